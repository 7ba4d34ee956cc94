// trickle/comm/local_cuda.hpp: comm::local_cuda, N workers as threads of one process over the memory of one GPU.
//
// The sibling of comm::local for cuda_space: it simulates N workers on one GPU, so the
// device code paths of the algorithms (SPARTA, DiLoCo, ring and all-reduce topologies)
// run with several workers without NCCL or several GPUs. Deterministic like comm::local:
// an all-reduce adds every element in rank order 0..N-1 in fp32, so it gives comm::local's
// bits, on every rank and every run.
//
// Declares nothing unless TRICKLE_HAS_CUDA is 1. all_reduce_sum launches a kernel, so a
// translation unit that calls it must be compiled by nvcc (one that only includes the
// header, through trickle/comm.hpp say, may be compiled by the host compiler).
#pragma once

#include <trickle/config.hpp>

#if TRICKLE_HAS_CUDA

#include <trickle/comm/communicator.hpp>
#include <trickle/comm/thread_barrier.hpp>
#include <trickle/core/memory_space.hpp>
#include <trickle/error.hpp>
#include <trickle/exec/cuda.hpp>
#include <trickle/kernels/reduce.hpp>

#include <cuda_runtime_api.h>

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

TRICKLE_NAMESPACE_BEGIN

namespace detail {

// Why a data pointer of comm::local_cuda cannot be used ("" when it can): null with
// elements to move, not device (or managed) memory, or memory of another device.
inline std::string local_cuda_pointer_problem(const void* p, std::size_t count, int device, const char* what) {
    if (count == 0) return {};
    if (p == nullptr) return concat(what, " is null with ", count, " elements");
    cudaPointerAttributes attr{};
    const cudaError_t rc = cudaPointerGetAttributes(&attr, p);
    if (rc != cudaSuccess) {
        (void)cudaGetLastError();
        return concat(what, " cannot be inspected by the CUDA runtime (", cudaGetErrorString(rc), ")");
    }
    if (attr.type == cudaMemoryTypeManaged) return {};
    if (attr.type != cudaMemoryTypeDevice) return concat(what, " points to host memory, not CUDA device memory");
    if (attr.device != device)
        return concat(what, " is memory of device ", attr.device, ", not of the world's device ", device);
    return {};
}

} // namespace detail

namespace comm {

class local_cuda;

// The shared state of N in-process workers on one GPU. Create one, hand
// world.rank(r, stream) to the thread that plays worker r, and keep the world alive while
// they run (run_local_cuda below does all of it).
//
// How the workers meet. Host threads never wait for the device: they meet only at a host
// barrier (as comm::local's threads do), where they exchange pointers and the CUDA events
// that order their streams. Every rank owns two events, ready[r] and done[r], and every
// data operation has the same shape on every rank r:
//
//   record ready[r] on stream r          (r's data, and r's earlier work, are in place)
//   -- host barrier 1 --                 (all slots written, every ready[q] recorded)
//   check the arguments of all ranks     (every rank reaches the same verdict)
//   stream r waits for ready[q] of the peers whose buffers it reads or writes;
//   the data work on stream r (a kernel, or a device-to-device copy);
//   record done[r] on stream r
//   -- host barrier 2 --                 (every done[q] recorded)
//   stream r waits for done[q] of the peers that read or write r's buffers.
//
// An argument error throws on every rank after barrier 2, before any stream waits or any
// data moves. barrier() is the first half: record ready[r], barrier 1, wait for every
// ready[q], barrier 2.
//
// Why re-recording an event is safe. cudaStreamWaitEvent waits for the record that is the
// event's most recent one when it is called; a later cudaEventRecord does not change what
// an already enqueued wait waits for, but a record that comes *before* a peer's wait call
// would make the peer wait for the wrong (later) work. So an event must not be recorded
// again until every peer has enqueued its wait on the previous record:
//   ready[q]: every wait on it is enqueued between barrier 1 and barrier 2 of one
//     operation; q records it again only in a later operation, after it has left that
//     barrier 2, which no rank leaves before every rank has arrived at it, i.e. before
//     every wait on ready[q] has been enqueued.
//   done[q]: every wait on it is enqueued after barrier 2 of one operation and before the
//     rank enters its next operation; q records it again only after barrier 1 of a later
//     operation, which no rank leaves before every rank has arrived at it, i.e. before
//     every rank has finished the operation before, waits included.
// all_gather_bytes (host memory only) uses no events; its barriers only add order.
//
// And why the device never deadlocks: every wait is enqueued after (host order, through
// a barrier) the record it waits for, so every dependency between streams points from
// earlier to later enqueued work; the device finishes everything enqueued without any
// help from the host, even after a failure or abort() leaves host threads behind.
class local_cuda_world {
public:
    // The most workers one world holds: the all-reduce kernel carries every rank's
    // pointer by value (rank_sum_body).
    static constexpr int max_size = rank_sum_body::max_ranks;

    // size workers (1 <= size <= max_size) on CUDA device `device`. A collective that
    // waits longer than `timeout` for its peers throws trickle::comm_error on the ranks
    // that arrived and aborts the world (zero means wait forever).
    local_cuda_world(int size, int device, std::chrono::milliseconds timeout = std::chrono::milliseconds{0})
        : size_(size), device_(device), barrier_("comm::local_cuda", size, timeout) {
        require(size >= 1 && size <= max_size, "comm::local_cuda_world: size must be in [1, ", max_size, "], got ",
                size);
        int devices = 0;
        TRICKLE_CUDA_CHECK(cudaGetDeviceCount(&devices));
        require(device >= 0 && device < devices, "comm::local_cuda_world: device ", device, " out of range [0, ",
                devices, ")");
        slots_.resize(static_cast<std::size_t>(size));
        ready_.assign(static_cast<std::size_t>(size), nullptr);
        done_.assign(static_cast<std::size_t>(size), nullptr);
        try {
            detail::device_scope on(device_);
            for (std::size_t r = 0; r < static_cast<std::size_t>(size); ++r) {
                TRICKLE_CUDA_CHECK(cudaEventCreateWithFlags(&ready_[r], cudaEventDisableTiming));
                TRICKLE_CUDA_CHECK(cudaEventCreateWithFlags(&done_[r], cudaEventDisableTiming));
            }
        } catch (...) {
            destroy_events();
            throw;
        }
    }

    local_cuda_world(const local_cuda_world&) = delete;
    local_cuda_world& operator=(const local_cuda_world&) = delete;
    // The workers' streams may still hold waits on the events: cudaEventDestroy releases
    // an event only once the work that uses it is done.
    ~local_cuda_world() { destroy_events(); }

    int size() const { return size_; }
    int device() const { return device_; }

    // The communicator of worker r (0 <= r < size) on `stream`: the caller's, which must
    // outlive it, belong to the world's device and be the worker's own (create it with
    // cudaStreamNonBlocking so it does not synchronize with the legacy default stream).
    // Use each communicator from one thread only.
    local_cuda rank(int r, cudaStream_t stream);

    // Wakes every rank waiting in a collective with trickle::comm_error. Call it when a
    // worker fails, so its peers do not wait for it forever. Irreversible.
    void abort(std::string why = "a peer aborted") { barrier_.abort(std::move(why)); }

    bool aborted() const { return barrier_.aborted(); }

private:
    friend class local_cuda;

    // What each rank posts at barrier 1 of an operation; read by all ranks until barrier 2.
    struct slot {
        const void* src = nullptr;
        void* dst = nullptr;
        std::size_t count = 0;
        int peer = -1;          // send_recv: dst; broadcast: root
        int peer2 = -1;         // send_recv: src
        std::size_t count2 = 0; // send_recv: m
        int bad = 0;            // local_cuda::slot_ok, slot_bad_argument or slot_bad_peer
    };

    // All ranks meet here; throws comm_error after abort() or a time-out.
    void arrive_and_wait(const char* op) { barrier_.arrive_and_wait(op); }

    void destroy_events() noexcept {
        for (cudaEvent_t& e : ready_)
            if (e != nullptr) (void)cudaEventDestroy(std::exchange(e, nullptr));
        for (cudaEvent_t& e : done_)
            if (e != nullptr) (void)cudaEventDestroy(std::exchange(e, nullptr));
    }

    int size_;
    int device_;
    std::vector<slot> slots_;
    std::vector<cudaEvent_t> ready_; // ready_[r]: recorded by rank r only, before barrier 1
    std::vector<cudaEvent_t> done_;  // done_[r]: recorded by rank r only, between barriers 1 and 2
    detail::thread_barrier barrier_;
};

// One worker's handle on a local_cuda_world: a trickle::communicator over device memory
// (cuda_space) of the world's device, bound to the worker's stream.
//
// Data operations (all_reduce_sum, send_recv, broadcast) are enqueued on the stream: the
// host threads meet at host barriers but never wait for the device, and results are ready
// for later work on the same stream (call synchronize() before the host reads them). Every
// rank must call every operation, in the same order; the arguments of all ranks are
// checked on every rank, and a mismatch or a bad argument anywhere throws on every rank
// before any data moves (mismatched counts, roots or pairings: comm_error; a null, host or
// other-device pointer with data to move, a peer or root out of range: invalid_argument),
// and the communicator stays usable. A CUDA call that fails inside an operation throws
// cuda_error on its rank and aborts the world, so that its peers get comm_error instead of
// waiting for ever; work the peers had already enqueued may then still use the failed
// worker's buffers, so let the device finish before freeing them with a stream-ordered
// free. With more than one worker the operations cannot be captured into a CUDA graph
// (the peers' events are recorded outside the capture): on a capturing stream they throw
// invalid_argument on every rank before enqueueing anything.
class local_cuda {
public:
    using memory_space = cuda_space;

    int rank() const { return rank_; }
    int size() const { return world_->size_; }
    int device() const { return world_->device_; }
    cudaStream_t stream() const { return stream_; }
    traffic_counters traffic() const { return traffic_; }

    // Waits until the work queued on this worker's stream (trickle's and the trainer's)
    // is done, which includes the peers' kernels and copies that write this worker's
    // buffers (the stream waits for them).
    void synchronize() { TRICKLE_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

    // In place on the stream: data = elementwise sum over ranks, added in rank order
    // 0..N-1 in fp32 (comm::local's bits). Rank r's kernel sums chunk r
    // (detail::chunk_begin / chunk_size) of every rank's buffer and writes the sum into
    // every rank's buffer. Every rank must pass the same n.
    //
    // A member template only so that host-compiled translation units can include this
    // header: the kernel, which needs nvcc, is instantiated where all_reduce_sum is
    // called. Call it as all_reduce_sum(data, n).
    template <class Body = rank_sum_body>
    void all_reduce_sum(float* data, std::size_t n) {
        static_assert(std::is_same_v<Body, rank_sum_body>, "call all_reduce_sum(data, n)");
        guarded("all_reduce_sum", [&] {
            auto& w = *world_;
            const int N = w.size_;
            detail::device_scope on(w.device_);
            std::string mine = capture_problem();
            if (mine.empty()) mine = detail::local_cuda_pointer_problem(data, n, w.device_, "data");
            w.slots_[static_cast<std::size_t>(rank_)] =
                local_cuda_world::slot{data, data, n, -1, -1, 0, mine.empty() ? slot_ok : slot_bad_argument};
            if (mine.empty()) post_ready();
            w.arrive_and_wait("all_reduce_sum");
            // Every rank judges the same slots, so all reach the same verdict.
            verdict v;
            for (int r = 0; r < N && v.ok(); ++r)
                if (slot_of(r).count != n)
                    v = {comm_mismatch,
                         detail::concat("comm::local_cuda all_reduce_sum: ranks passed different element counts: rank ",
                                        r, " passed ", slot_of(r).count, ", rank ", rank_, " passed ", n)};
            if (v.ok()) v = argument_verdict("all_reduce_sum", mine);
            if (!v.ok()) fail("all_reduce_sum", v);
            if (N > 1 && n != 0) {
                const std::size_t begin = detail::chunk_begin(n, N, rank_);
                const std::size_t count = detail::chunk_size(n, N, rank_);
                wait_for_peers(w.ready_);
                Body body{};
                for (int r = 0; r < N; ++r) {
                    body.src[r] = static_cast<const float*>(slot_of(r).src);
                    body.dst[r] = static_cast<float*>(slot_of(r).dst);
                }
                body.ranks = N;
                body.begin = begin;
                for_each_index(exec::cuda{stream_, w.device_}, count, body);
            }
            post_done();
            w.arrive_and_wait("all_reduce_sum");
            // Every peer's kernel writes its chunk into my buffer.
            if (N > 1 && n != 0) wait_for_peers(w.done_);
        });
        const std::uint64_t bytes = detail::all_reduce_bytes(n, sizeof(float), size(), rank_);
        traffic_.count_all_reduce(bytes);
    }

    // Control plane, HOST pointers: recv[r*bytes .. (r+1)*bytes) = rank r's send, copied
    // by the host between two host barriers (as comm::local); no stream is involved.
    // Every rank must pass the same size.
    void all_gather_bytes(const void* send, void* recv, std::size_t bytes) {
        guarded("all_gather_bytes", [&] {
            auto& w = *world_;
            const int N = w.size_;
            std::string mine;
            if (bytes != 0 && (send == nullptr || recv == nullptr))
                mine = "comm::local_cuda all_gather_bytes: null pointer with a nonzero size";
            else
                try {
                    detail::check_pointer_space<host_space>(send, "comm::local_cuda all_gather_bytes: send");
                    detail::check_pointer_space<host_space>(recv, "comm::local_cuda all_gather_bytes: recv");
                } catch (const invalid_argument& e) {
                    mine = e.what();
                }
            w.slots_[static_cast<std::size_t>(rank_)] =
                local_cuda_world::slot{send, recv, bytes, -1, -1, 0, mine.empty() ? slot_ok : slot_bad_argument};
            w.arrive_and_wait("all_gather_bytes");
            verdict v;
            for (int r = 0; r < N && v.ok(); ++r)
                if (slot_of(r).count != bytes)
                    v = {comm_mismatch,
                         detail::concat("comm::local_cuda all_gather_bytes: ranks passed different sizes: rank ", r,
                                        " passed ", slot_of(r).count, " bytes, rank ", rank_, " passed ", bytes)};
            for (int r = 0; r < N && v.ok(); ++r)
                if (slot_of(r).bad != slot_ok)
                    v = {invalid, r == rank_ ? mine
                                             : detail::concat("comm::local_cuda all_gather_bytes: rank ", r,
                                                              " passed an invalid buffer")};
            if (!v.ok()) fail("all_gather_bytes", v);
            for (int r = 0; r < N; ++r)
                if (bytes != 0)
                    std::memcpy(static_cast<unsigned char*>(recv) + static_cast<std::size_t>(r) * bytes,
                                slot_of(r).src, bytes);
            w.arrive_and_wait("all_gather_bytes");
        });
        traffic_.count_all_gather(bytes, size());
    }

    // On the stream: sends n floats to rank dst and receives m floats from rank src.
    // Collective: every rank calls it at once (a ring shift, say), and each pairing must
    // match (src's dst is me, with src's n equal to my m); dst or src may be this rank.
    // The receiver copies (cudaMemcpyAsync, device to device) on its own stream after
    // waiting for the sender's ready event; the sender's stream then waits for the
    // receiver's done event, so later work on it cannot overwrite the send buffer early.
    void send_recv(const float* send, std::size_t n, int dst, float* recv, std::size_t m, int src) {
        guarded("send_recv", [&] {
            auto& w = *world_;
            const int N = w.size_;
            detail::device_scope on(w.device_);
            const bool in_range = dst >= 0 && dst < N && src >= 0 && src < N;
            std::string mine = capture_problem();
            if (in_range && mine.empty()) {
                mine = detail::local_cuda_pointer_problem(send, n, w.device_, "send");
                if (mine.empty()) mine = detail::local_cuda_pointer_problem(recv, m, w.device_, "recv");
            }
            w.slots_[static_cast<std::size_t>(rank_)] = local_cuda_world::slot{
                send, recv, n, dst, src, m, !in_range ? slot_bad_peer : mine.empty() ? slot_ok : slot_bad_argument};
            if (mine.empty()) post_ready();
            w.arrive_and_wait("send_recv");
            verdict v;
            for (int r = 0; r < N && v.ok(); ++r)
                if (slot_of(r).bad == slot_bad_peer)
                    v = {invalid, detail::concat("comm::local_cuda send_recv: rank ", r,
                                                 " passed a peer out of range (dst ", slot_of(r).peer, ", src ",
                                                 slot_of(r).peer2, ", size ", N, ")")};
            if (v.ok()) v = argument_verdict("send_recv", mine);
            for (int r = 0; r < N && v.ok(); ++r) {
                const local_cuda_world::slot& s = slot_of(r);
                const local_cuda_world::slot& from = slot_of(s.peer2);
                if (from.peer != r || from.count != s.count2)
                    v = {comm_mismatch,
                         detail::concat("comm::local_cuda send_recv: the ranks' sends and receives do not pair up: "
                                        "rank ",
                                        r, " expects ", s.count2, " elements from rank ", s.peer2, ", which sends ",
                                        from.count, " to rank ", from.peer)};
            }
            if (!v.ok()) fail("send_recv", v);
            if (m != 0) {
                if (src != rank_) wait_for(w.ready_, src);
                TRICKLE_CUDA_CHECK(cudaMemcpyAsync(recv, slot_of(src).src, m * sizeof(float), cudaMemcpyDeviceToDevice,
                                                   stream_));
            }
            post_done();
            w.arrive_and_wait("send_recv");
            // dst's stream reads my send buffer: my later work waits until it has.
            if (n != 0 && dst != rank_) wait_for(w.done_, dst);
        });
        traffic_.count_send_recv(n * sizeof(float), m * sizeof(float));
    }

    // On the stream: data on every rank = data on root. Every rank must pass the same n
    // and root. Each other rank copies from the root on its own stream; the root's stream
    // then waits until all of them have.
    void broadcast(float* data, std::size_t n, int root) {
        guarded("broadcast", [&] {
            auto& w = *world_;
            const int N = w.size_;
            detail::device_scope on(w.device_);
            const bool in_range = root >= 0 && root < N;
            std::string mine = capture_problem();
            if (in_range && mine.empty()) mine = detail::local_cuda_pointer_problem(data, n, w.device_, "data");
            w.slots_[static_cast<std::size_t>(rank_)] = local_cuda_world::slot{
                data, data, n, root, -1, 0, !in_range ? slot_bad_peer : mine.empty() ? slot_ok : slot_bad_argument};
            if (mine.empty()) post_ready();
            w.arrive_and_wait("broadcast");
            verdict v;
            for (int r = 0; r < N && v.ok(); ++r)
                if (slot_of(r).count != n || slot_of(r).peer != root)
                    v = {comm_mismatch, detail::concat("comm::local_cuda broadcast: ranks passed different sizes or "
                                                       "roots: rank ",
                                                       r, " passed ", slot_of(r).count, " elements from root ",
                                                       slot_of(r).peer, ", rank ", rank_, " passed ", n,
                                                       " from root ", root)};
            if (v.ok() && !in_range)
                v = {invalid,
                     detail::concat("comm::local_cuda broadcast: root ", root, " out of range [0, ", N, ")")};
            if (v.ok()) v = argument_verdict("broadcast", mine);
            if (!v.ok()) fail("broadcast", v);
            if (rank_ != root && n != 0) {
                wait_for(w.ready_, root);
                TRICKLE_CUDA_CHECK(cudaMemcpyAsync(data, slot_of(root).src, n * sizeof(float),
                                                   cudaMemcpyDeviceToDevice, stream_));
            }
            post_done();
            w.arrive_and_wait("broadcast");
            if (rank_ == root && n != 0) wait_for_peers(w.done_);
        });
        traffic_.count_broadcast(n * sizeof(float), size(), rank_ == root);
    }

    // Byte collectives on the stream (trickle::byte_communicator), DEVICE pointers: every
    // rank passes the same size b.
    //   all_gather: recv[q*b .. (q+1)*b) = rank q's send
    //   all_to_all: recv[q*b .. (q+1)*b) = rank q's send[r*b .. (r+1)*b) on rank r
    // Each rank copies its N blocks from the peers' send buffers on its own stream (after
    // their ready events); the peers' later work waits until every copy from them is done.
    void all_gather(const void* send, void* recv, std::size_t bytes) { gather_from_peers("all_gather", send, recv, bytes, false); }
    void all_to_all(const void* send, void* recv, std::size_t bytes) { gather_from_peers("all_to_all", send, recv, bytes, true); }

    // Every rank's host thread reaches the barrier before any leaves it, and every
    // stream waits for the work that every rank had enqueued on its own stream before the
    // barrier: work enqueued after barrier() on any stream runs after work enqueued before
    // it on all of them. It does not wait for the device (comm::nccl's barrier does; call
    // synchronize() for that).
    void barrier() {
        guarded("barrier", [&] {
            auto& w = *world_;
            detail::device_scope on(w.device_);
            const std::string mine = capture_problem();
            w.slots_[static_cast<std::size_t>(rank_)] =
                local_cuda_world::slot{nullptr, nullptr, 0, -1, -1, 0, mine.empty() ? slot_ok : slot_bad_argument};
            if (mine.empty()) post_ready();
            w.arrive_and_wait("barrier");
            const verdict v = argument_verdict("barrier", mine);
            if (!v.ok()) fail("barrier", v);
            wait_for_peers(w.ready_);
            w.arrive_and_wait("barrier");
        });
    }

private:
    friend class local_cuda_world;
    local_cuda(local_cuda_world* w, int r, cudaStream_t stream) : world_(w), rank_(r), stream_(stream) {}

    // slot::bad values.
    static constexpr int slot_ok = 0;
    static constexpr int slot_bad_argument = 1;
    static constexpr int slot_bad_peer = 2;

    enum verdict_kind { fine, invalid, comm_mismatch };
    struct verdict {
        verdict_kind kind = fine;
        std::string what;
        bool ok() const { return kind == fine; }
    };

    const local_cuda_world::slot& slot_of(int r) const { return world_->slots_[static_cast<std::size_t>(r)]; }

    // invalid_argument on every rank when any rank passed an unusable pointer or stream.
    verdict argument_verdict(const char* op, const std::string& mine) const {
        for (int r = 0; r < world_->size_; ++r)
            if (slot_of(r).bad == slot_bad_argument)
                return {invalid, r == rank_ ? detail::concat("comm::local_cuda ", op, ": ", mine)
                                            : detail::concat("comm::local_cuda ", op, ": rank ", r,
                                                             " passed an invalid argument")};
        return {};
    }

    // "" unless this stream is being captured into a CUDA graph while the world has peers:
    // the peers' events are recorded outside the capture, so the operation cannot be part
    // of a graph. Checked before anything is enqueued, so the capture is left untouched.
    std::string capture_problem() const {
        if (world_->size_ == 1) return {};
        if (!detail::stream_capturing(stream_)) return {};
        return "the stream is being captured into a CUDA graph, and comm::local_cuda with more than one worker "
               "cannot be captured (its streams wait for events recorded by other threads)";
    }

    // After barrier 1 with a bad verdict: barrier 2, so no rank posts a new slot while
    // another still reads this one, then every rank throws. No stream waited on anything.
    [[noreturn]] void fail(const char* op, const verdict& v) {
        world_->arrive_and_wait(op);
        if (v.kind == invalid) throw invalid_argument(v.what);
        throw comm_error(v.what);
    }

    void post_ready() {
        if (world_->size_ > 1)
            TRICKLE_CUDA_CHECK(cudaEventRecord(world_->ready_[static_cast<std::size_t>(rank_)], stream_));
    }
    void post_done() {
        if (world_->size_ > 1)
            TRICKLE_CUDA_CHECK(cudaEventRecord(world_->done_[static_cast<std::size_t>(rank_)], stream_));
    }
    void wait_for(const std::vector<cudaEvent_t>& events, int q) {
        TRICKLE_CUDA_CHECK(cudaStreamWaitEvent(stream_, events[static_cast<std::size_t>(q)], 0));
    }
    void wait_for_peers(const std::vector<cudaEvent_t>& events) {
        for (int q = 0; q < world_->size_; ++q)
            if (q != rank_) wait_for(events, q);
    }

    // all_gather (to_all false: block q is all of q's send) and all_to_all (block q is
    // q's send block `rank_`), N blocks of `bytes` each.
    void gather_from_peers(const char* op, const void* send, void* recv, std::size_t bytes, bool to_all) {
        const int N = world_->size_;
        const std::size_t total = static_cast<std::size_t>(N) * bytes;
        guarded(op, [&] {
            auto& w = *world_;
            detail::device_scope on(w.device_);
            std::string mine = capture_problem();
            if (mine.empty())
                mine = detail::local_cuda_pointer_problem(send, to_all ? total : bytes, w.device_, "send");
            if (mine.empty()) mine = detail::local_cuda_pointer_problem(recv, total, w.device_, "recv");
            w.slots_[static_cast<std::size_t>(rank_)] =
                local_cuda_world::slot{send, recv, bytes, -1, -1, 0, mine.empty() ? slot_ok : slot_bad_argument};
            if (mine.empty()) post_ready();
            w.arrive_and_wait(op);
            verdict v;
            for (int r = 0; r < N && v.ok(); ++r)
                if (slot_of(r).count != bytes)
                    v = {comm_mismatch, detail::concat("comm::local_cuda ", op, ": ranks passed different sizes: rank ", r,
                                                       " passed ", slot_of(r).count, " bytes, rank ", rank_, " passed ",
                                                       bytes)};
            if (v.ok()) v = argument_verdict(op, mine);
            if (!v.ok()) fail(op, v);
            if (bytes != 0) {
                const std::size_t from = to_all ? static_cast<std::size_t>(rank_) * bytes : 0;
                for (int q = 0; q < N; ++q) {
                    if (q != rank_) wait_for(w.ready_, q);
                    TRICKLE_CUDA_CHECK(cudaMemcpyAsync(static_cast<unsigned char*>(recv) + static_cast<std::size_t>(q) * bytes,
                                                       static_cast<const unsigned char*>(slot_of(q).src) + from, bytes,
                                                       cudaMemcpyDeviceToDevice, stream_));
                }
            }
            post_done();
            w.arrive_and_wait(op);
            // Every peer's stream reads my send buffer: my later work waits until it has.
            if (bytes != 0) wait_for_peers(w.done_);
        });
        if (to_all)
            traffic_.count_all_to_all(bytes, N);
        else
            traffic_.count_all_gather(bytes, N);
    }

    // Runs one collective. Argument errors (invalid_argument, comm_error) are agreed by
    // every rank and leave the world usable; anything else (a failed CUDA call, no
    // memory) happened on this rank alone, between barriers its peers are waiting at, so
    // it aborts the world before propagating.
    template <class F>
    void guarded(const char* op, F&& f) {
        try {
            f();
        } catch (const cuda_error& e) {
            world_->abort(detail::concat("rank ", rank_, " failed in ", op, ": ", e.what()));
            throw;
        } catch (const error&) {
            throw;
        } catch (...) {
            world_->abort(detail::concat("rank ", rank_, " failed in ", op));
            throw;
        }
    }

    local_cuda_world* world_;
    int rank_;
    cudaStream_t stream_;
    traffic_counters traffic_{};
};

inline local_cuda local_cuda_world::rank(int r, cudaStream_t stream) {
    require(r >= 0 && r < size_, "comm::local_cuda_world::rank: rank ", r, " out of range [0, ", size_, ")");
    require(stream != nullptr && stream != cudaStreamLegacy,
            "comm::local_cuda_world::rank: the stream is the legacy default stream; give each worker a stream of its "
            "own (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking))");
#if CUDART_VERSION >= 12080
    int stream_device = -1;
    TRICKLE_CUDA_CHECK(cudaStreamGetDevice(stream, &stream_device));
    require(stream_device == device_, "comm::local_cuda_world::rank: the stream belongs to device ", stream_device,
            " but the world to device ", device_);
#endif
    return local_cuda(this, r, stream);
}

static_assert(byte_communicator<local_cuda>);

// Runs fn(comm) for every rank of a new local_cuda_world on `device`, one thread each
// (with `device` current) and one new non-blocking stream each, and waits for all: each
// worker's stream is synchronized after its fn returns, and the streams are destroyed at
// the end. If any worker throws, the world is aborted (peers blocked in collectives get
// comm_error) and the first exception, by rank, is rethrown, a worker's own error before
// the comm_error it caused in its peers.
template <class Fn>
void run_local_cuda(int workers, int device, Fn&& fn) {
    local_cuda_world world(workers, device);
    const auto W = static_cast<std::size_t>(workers);

    // Owns the streams; synchronizes and destroys them on every way out.
    struct stream_set {
        std::vector<cudaStream_t> streams;
        stream_set() = default;
        stream_set(const stream_set&) = delete;
        stream_set& operator=(const stream_set&) = delete;
        ~stream_set() {
            for (cudaStream_t s : streams)
                if (s != nullptr) {
                    (void)cudaStreamSynchronize(s);
                    (void)cudaStreamDestroy(s);
                }
        }
    } owned;
    owned.streams.assign(W, nullptr);
    {
        detail::device_scope on(device);
        for (cudaStream_t& s : owned.streams) TRICKLE_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    }

    std::vector<std::exception_ptr> errors(W);
    std::vector<std::thread> threads;
    threads.reserve(W);
    try {
        for (int r = 0; r < workers; ++r)
            threads.emplace_back([&, r] {
                try {
                    TRICKLE_CUDA_CHECK(cudaSetDevice(device));
                    local_cuda c = world.rank(r, owned.streams[static_cast<std::size_t>(r)]);
                    fn(c);
                    c.synchronize();
                } catch (...) {
                    errors[static_cast<std::size_t>(r)] = std::current_exception();
                    world.abort(detail::concat("rank ", r, " failed"));
                }
            });
    } catch (...) { // a thread could not be started: release the ones that were
        world.abort("comm::run_local_cuda could not start every worker");
        for (auto& t : threads) t.join();
        throw;
    }
    for (auto& t : threads) t.join();
    // A failed worker may have left work on its stream; it completes without help (every
    // wait refers to an event already recorded), and the streams are drained before the
    // world's events go.
    std::exception_ptr sync_error;
    for (cudaStream_t s : owned.streams) {
        const cudaError_t rc = cudaStreamSynchronize(s);
        if (rc != cudaSuccess && !sync_error) {
            try {
                detail::check_cuda(rc, "cudaStreamSynchronize(stream)", __FILE__, __LINE__);
            } catch (...) {
                sync_error = std::current_exception();
            }
        }
    }
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
    if (sync_error) std::rethrow_exception(sync_error);
}

} // namespace comm

TRICKLE_NAMESPACE_END

#endif // TRICKLE_HAS_CUDA
