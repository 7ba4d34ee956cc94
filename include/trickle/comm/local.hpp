// trickle/comm/local.hpp: N workers as threads of one process, for simulation and tests.
//
// Deterministic: an all-reduce sums in rank order 0..N-1 for every element, so every
// rank gets the same bits on every run, however the threads are scheduled.
#pragma once

#include <trickle/comm/communicator.hpp>
#include <trickle/comm/thread_barrier.hpp>
#include <trickle/config.hpp>
#include <trickle/core/memory_space.hpp>
#include <trickle/error.hpp>

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

TRICKLE_NAMESPACE_BEGIN

namespace comm {

class local;

// The shared state of N in-process workers. Create one, hand world.rank(r) to the
// thread that plays worker r, and keep the world alive while they run.
class local_world {
public:
    // size >= 1 workers. A collective that waits longer than `timeout` for its peers
    // throws trickle::comm_error on the ranks that arrived (zero means wait forever).
    explicit local_world(int size, std::chrono::milliseconds timeout = std::chrono::milliseconds{0})
        : size_(size), slots_(size > 0 ? static_cast<std::size_t>(size) : 0), barrier_("comm::local", size, timeout) {
        require(size >= 1, "comm::local_world: size must be >= 1, got ", size);
    }

    local_world(const local_world&) = delete;
    local_world& operator=(const local_world&) = delete;

    int size() const { return size_; }

    // The communicator of worker r (0 <= r < size). Use each from one thread only.
    local rank(int r);

    // Wakes every rank waiting in a collective with trickle::comm_error. Call it when a
    // worker fails, so its peers do not wait for it forever. Irreversible.
    void abort(std::string why = "a peer aborted") { barrier_.abort(std::move(why)); }

    bool aborted() const { return barrier_.aborted(); }

private:
    friend class local;

    struct slot {
        const void* src = nullptr;
        void* dst = nullptr;
        std::size_t count = 0;
        int peer = -1;
        int peer2 = -1;
        std::size_t count2 = 0;
    };

    // All ranks meet here; throws comm_error after abort() or a time-out.
    void arrive_and_wait(const char* op) { barrier_.arrive_and_wait(op); }

    int size_;
    std::vector<slot> slots_;
    detail::thread_barrier barrier_;
};

// One worker's handle on a local_world: a trickle::communicator over host memory.
class local {
public:
    using memory_space = host_space;

    int rank() const { return rank_; }
    int size() const { return world_->size_; }
    traffic_counters traffic() const { return traffic_; }
    void synchronize() {}

    // In place: data = elementwise sum over ranks, added in rank order. Every rank must
    // pass the same n; otherwise every rank throws trickle::comm_error.
    void all_reduce_sum(float* data, std::size_t n) {
        auto& w = *world_;
        const int N = w.size_;
        w.slots_[rank_] = {data, data, n};
        w.arrive_and_wait("all_reduce_sum");
        for (int r = 0; r < N; ++r)
            if (w.slots_[r].count != n) {
                // The message reads the slot before the barrier: after it, peers may post
                // their next operation's slots.
                std::string what = detail::concat("comm::local all_reduce_sum: rank ", r, " passed ",
                                                  w.slots_[r].count, " elements, rank ", rank_, " passed ", n);
                w.arrive_and_wait("all_reduce_sum");
                throw comm_error(what);
            }
        // Reduce my chunk from every rank's buffer into scratch, then write it everywhere.
        const std::size_t b = detail::chunk_begin(n, N, rank_);
        const std::size_t c = detail::chunk_size(n, N, rank_);
        scratch_.resize(c);
        for (std::size_t i = 0; i < c; ++i) {
            float s = static_cast<const float*>(w.slots_[0].src)[b + i];
            for (int r = 1; r < N; ++r) s += static_cast<const float*>(w.slots_[r].src)[b + i];
            scratch_[i] = s;
        }
        w.arrive_and_wait("all_reduce_sum");
        for (int r = 0; r < N; ++r)
            if (c != 0) std::memcpy(static_cast<float*>(w.slots_[r].dst) + b, scratch_.data(), c * sizeof(float));
        w.arrive_and_wait("all_reduce_sum");
        const std::uint64_t bytes = detail::all_reduce_bytes(n, sizeof(float), N, rank_);
        traffic_.count_all_reduce(bytes);
    }

    // recv[r*bytes .. (r+1)*bytes) = rank r's send. Every rank must pass the same size.
    void all_gather_bytes(const void* send, void* recv, std::size_t bytes) {
        exchange_blocks("all_gather_bytes", send, recv, bytes, false);
    }

    // The data-plane byte collectives (byte_communicator): in host memory, as above.
    void all_gather(const void* send, void* recv, std::size_t bytes) {
        exchange_blocks("all_gather", send, recv, bytes, false);
    }
    // recv[q*bytes .. (q+1)*bytes) = rank q's send[rank*bytes .. (rank+1)*bytes).
    void all_to_all(const void* send, void* recv, std::size_t bytes) {
        exchange_blocks("all_to_all", send, recv, bytes, true);
    }

    // Sends n floats to rank dst and receives m floats from rank src. Collective in this
    // communicator: every rank calls it at once (a ring shift, say), and each pairing
    // must match (src's dst is me, with src's n equal to my m) or every rank throws.
    void send_recv(const float* send, std::size_t n, int dst, float* recv, std::size_t m, int src) {
        auto& w = *world_;
        const int N = w.size_;
        require(dst >= 0 && dst < N && src >= 0 && src < N, "comm::local send_recv: peer out of range (dst ",
                dst, ", src ", src, ", size ", N, ")");
        w.slots_[rank_] = local_world::slot{send, recv, n, dst, src, m};
        w.arrive_and_wait("send_recv");
        // Every rank checks the whole pattern, so all reach the same verdict.
        bool ok = true;
        for (int r = 0; r < N && ok; ++r) {
            const local_world::slot& s = w.slots_[r];
            if (s.peer < 0 || s.peer >= N || s.peer2 < 0 || s.peer2 >= N) {
                ok = false;
                break;
            }
            const local_world::slot& from = w.slots_[s.peer2];
            ok = from.peer == r && from.count == s.count2;
        }
        if (ok && m != 0) std::memcpy(recv, w.slots_[src].src, m * sizeof(float));
        w.arrive_and_wait("send_recv");
        if (!ok) throw comm_error("comm::local send_recv: the ranks' sends and receives do not pair up");
        traffic_.count_send_recv(n * sizeof(float), m * sizeof(float));
    }

    // data on every rank = data on root.
    void broadcast(float* data, std::size_t n, int root) {
        auto& w = *world_;
        const int N = w.size_;
        w.slots_[rank_] = local_world::slot{data, data, n, root};
        w.arrive_and_wait("broadcast");
        bool ok = root >= 0 && root < N;
        for (int r = 0; r < N && ok; ++r) ok = w.slots_[r].count == n && w.slots_[r].peer == root;
        if (ok && rank_ != root && n != 0) std::memcpy(data, w.slots_[root].src, n * sizeof(float));
        w.arrive_and_wait("broadcast");
        if (!ok) throw comm_error("comm::local broadcast: ranks passed different sizes or roots");
        traffic_.count_broadcast(n * sizeof(float), N, rank_ == root);
    }

    void barrier() { world_->arrive_and_wait("barrier"); }

private:
    friend class local_world;
    local(local_world* w, int r) : world_(w), rank_(r) {}

    // all_gather (every rank's whole send) or all_to_all (block `rank_` of every rank's
    // send) of `bytes` per rank. Sizes and pointers are checked on every rank before
    // anything is copied, so all ranks throw together.
    void exchange_blocks(const char* op, const void* send, void* recv, std::size_t bytes, bool to_all) {
        auto& w = *world_;
        const int N = w.size_;
        w.slots_[rank_] = {send, recv, bytes};
        w.arrive_and_wait(op);
        bool same = true;
        int null_rank = -1;
        for (int r = 0; r < N; ++r) {
            same = same && w.slots_[r].count == bytes;
            if (w.slots_[r].count != 0 && (w.slots_[r].src == nullptr || w.slots_[r].dst == nullptr) && null_rank < 0)
                null_rank = r;
        }
        if (same && null_rank < 0 && bytes != 0)
            for (int r = 0; r < N; ++r) {
                const auto* from = static_cast<const unsigned char*>(w.slots_[r].src);
                if (to_all) from += static_cast<std::size_t>(rank_) * bytes;
                std::memcpy(static_cast<unsigned char*>(recv) + static_cast<std::size_t>(r) * bytes, from, bytes);
            }
        w.arrive_and_wait(op);
        if (!same) throw comm_error(detail::concat("comm::local ", op, ": ranks passed different sizes"));
        if (null_rank >= 0)
            throw invalid_argument(
                detail::concat("comm::local ", op, ": rank ", null_rank, " passed a null pointer with a nonzero size"));
        traffic_.count_all_gather(bytes, N);
    }

    local_world* world_;
    int rank_;
    traffic_counters traffic_{};
    std::vector<float> scratch_;
};

inline local local_world::rank(int r) {
    require(r >= 0 && r < size_, "comm::local_world::rank: rank ", r, " out of range [0, ", size_, ")");
    return local(this, r);
}

static_assert(byte_communicator<local>);

// Runs fn(comm) for every rank of a new local_world, one thread each, and waits for all.
// If any worker throws, the world is aborted (peers blocked in collectives get
// comm_error) and the first exception, by rank, is rethrown.
template <class Fn>
void run_local(int workers, Fn&& fn) {
    local_world world(workers);
    std::vector<std::exception_ptr> errors(static_cast<std::size_t>(workers));
    std::vector<std::thread> threads;
    threads.reserve(static_cast<std::size_t>(workers));
    for (int r = 0; r < workers; ++r)
        threads.emplace_back([&, r] {
            try {
                local c = world.rank(r);
                fn(c);
            } catch (...) {
                errors[static_cast<std::size_t>(r)] = std::current_exception();
                world.abort(detail::concat("rank ", r, " failed"));
            }
        });
    for (auto& t : threads) t.join();
    // A worker's own error outranks the comm_error its failure caused in its peers.
    std::exception_ptr first_comm;
    for (auto& e : errors) {
        if (!e) continue;
        try {
            std::rethrow_exception(e);
        } catch (const comm_error&) {
            if (!first_comm) first_comm = e;
        } catch (...) {
            std::rethrow_exception(e);
        }
    }
    if (first_comm) std::rethrow_exception(first_comm);
}

} // namespace comm

TRICKLE_NAMESPACE_END
