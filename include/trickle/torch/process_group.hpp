// trickle/torch/process_group.hpp: comm::process_group, a communicator over a torch.distributed process group.
//
// Part of the trickle::torch component (link the trickle::torch CMake target, found when
// CMake finds Torch). For trainers that already run torch.distributed: trickle's
// messages travel through the same c10d::ProcessGroup (Gloo, MPI, or any backend with the
// collectives below on CPU tensors), with the agreement checks, byte counting and
// determinism of comm::mpi.
#pragma once

#include <trickle/comm/communicator.hpp>
#include <trickle/config.hpp>
#include <trickle/core/memory_space.hpp>
#include <trickle/error.hpp>

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <string>
#include <utility>
#include <vector>

TRICKLE_NAMESPACE_BEGIN

namespace comm {

// A trickle::communicator over a c10d::ProcessGroup the trainer owns (in Python,
// torch.distributed's default group or any group from new_group; in C++ a
// c10::intrusive_ptr<c10d::ProcessGroup>), one worker per rank, data in host memory.
// Every operation blocks until this rank's part is done.
//
// Determinism: all_reduce_sum does not call the backend's allreduce. It sends each rank
// the pieces of its chunk (alltoall), sums them there in rank order, and sends the sums
// back (alltoall), so each element is added in exactly one place, in the order comm::local
// and comm::mpi add it: every rank ends with the same bits, whatever the backend, and the
// same bits as those communicators. The bytes on the wire are the ring all-reduce's,
// 2 (N-1)/N of the buffer, as traffic() reports.
//
// Every collective first agrees on its arguments (one small allreduce of int64 values),
// so ranks that pass different counts or roots all throw trickle::comm_error instead of
// hanging or corrupting each other; that check is not counted in traffic(). Errors the
// backend raises (a timeout, a dead peer) become trickle::comm_error naming the operation.
// The process group must outlive this object, and no other thread may use it at the same
// time through this object.
class process_group {
public:
    using memory_space = host_space;

    explicit process_group(c10::intrusive_ptr<c10d::ProcessGroup> group) : group_(std::move(group)) {
        require(group_.defined(), "comm::process_group: the process group is null");
        rank_ = group_->getRank();
        size_ = group_->getSize();
        require(size_ >= 1 && rank_ >= 0 && rank_ < size_, "comm::process_group: rank ", rank_, " of size ", size_,
                " is not a valid place in the group");
    }

    process_group(const process_group&) = delete;
    process_group& operator=(const process_group&) = delete;
    process_group(process_group&&) noexcept = default;
    process_group& operator=(process_group&&) noexcept = default;

    int rank() const { return rank_; }
    int size() const { return size_; }
    traffic_counters traffic() const { return traffic_; }
    void synchronize() {}
    const c10::intrusive_ptr<c10d::ProcessGroup>& group() const { return group_; }
    // Whether an operation failed in the backend (a dead or silent peer, a timeout), as
    // opposed to ranks that disagreed on their arguments: comm::elastic_group reads it.
    bool backend_failed() const { return backend_failed_; }

    // In place: data = elementwise sum over ranks, the same bits on every rank (see above).
    void all_reduce_sum(float* data, std::size_t n) {
        const auto s = spread<2>("all_reduce_sum", {static_cast<std::int64_t>(n), null_flag(n != 0 && data == nullptr)});
        if (s[0].lo != s[0].hi)
            throw comm_error(detail::concat("comm::process_group all_reduce_sum: ranks passed different element counts "
                                            "(from ",
                                            s[0].lo, " to ", s[0].hi, "); rank ", rank_, " passed ", n));
        check_null("all_reduce_sum", s[1].hi);
        if (size_ > 1 && n != 0) {
            const auto N = static_cast<std::size_t>(size_);
            const std::size_t mine = detail::chunk_size(n, size_, rank_);
            const std::size_t mine_begin = detail::chunk_begin(n, size_, rank_);
            std::vector<std::int64_t> chunks(N), mine_each(N, static_cast<std::int64_t>(mine));
            for (int r = 0; r < size_; ++r)
                chunks[static_cast<std::size_t>(r)] = static_cast<std::int64_t>(detail::chunk_size(n, size_, r));
            scratch_.resize(N * mine);
            at::Tensor whole = wrap(data, n);
            at::Tensor pieces = wrap(scratch_.data(), N * mine);
            // 1. Rank q's piece of my chunk lands at scratch[q * mine ...].
            // (Copies of the split sizes: some versions of c10d move from the vectors they are given.)
            run("all_reduce_sum", [&] {
                std::vector<std::int64_t> out_splits = mine_each, in_splits = chunks;
                return group_->alltoall_base(pieces, whole, out_splits, in_splits);
            });
            // 2. The sum, in rank order, as comm::local adds.
            float* out = data + mine_begin;
            for (std::size_t i = 0; i < mine; ++i) {
                float acc = scratch_[i];
                for (std::size_t q = 1; q < N; ++q) acc += scratch_[q * mine + i];
                out[i] = acc;
            }
            // 3. My summed chunk to every rank (the same bits everywhere).
            for (std::size_t q = 0; q < N; ++q)
                for (std::size_t i = 0; i < mine; ++i) scratch_[q * mine + i] = out[i];
            run("all_reduce_sum", [&] {
                std::vector<std::int64_t> out_splits = chunks, in_splits = mine_each;
                return group_->alltoall_base(whole, pieces, out_splits, in_splits);
            });
        }
        const std::uint64_t bytes = detail::all_reduce_bytes(n, sizeof(float), size_, rank_);
        traffic_.count_all_reduce(bytes);
    }

    // recv[r*bytes .. (r+1)*bytes) = rank r's send. Every rank must pass the same size.
    void all_gather_bytes(const void* send, void* recv, std::size_t bytes) {
        exchange_blocks("all_gather_bytes", send, recv, bytes, false);
    }

    // The data-plane byte collectives (byte_communicator), in host memory: the process
    // group's allgather and alltoall_base on uint8 tensors, with the checks above.
    void all_gather(const void* send, void* recv, std::size_t bytes) { exchange_blocks("all_gather", send, recv, bytes, false); }
    // recv[q*bytes .. (q+1)*bytes) = rank q's send[rank*bytes .. (rank+1)*bytes).
    void all_to_all(const void* send, void* recv, std::size_t bytes) { exchange_blocks("all_to_all", send, recv, bytes, true); }

    // Sends n floats to rank dst and receives m floats from rank src; collective, with the
    // pattern checked on every rank before any data moves (as comm::mpi does).
    void send_recv(const float* send, std::size_t n, int dst, float* recv, std::size_t m, int src) {
        const auto mine = detail::send_recv_entry(send, n, dst, recv, m, src);
        std::vector<std::uint64_t> all(detail::send_recv_fields * static_cast<std::size_t>(size_));
        gather_bytes("send_recv", mine.data(), all.data(), sizeof mine);
        detail::check_send_recv_pattern(all.data(), size_, "comm::process_group");
        if (dst == rank_ && src == rank_) {
            for (std::size_t i = 0; i < m; ++i) recv[i] = send[i];
        } else {
            c10::intrusive_ptr<c10d::Work> in, out;
            std::vector<at::Tensor> rt, st;
            try {
                if (m != 0) {
                    rt.push_back(wrap(recv, m));
                    in = group_->recv(rt, src, tag);
                }
                if (n != 0) {
                    st.push_back(wrap(const_cast<float*>(send), n));
                    out = group_->send(st, dst, tag);
                }
                if (out) out->wait();
                if (in) in->wait();
            } catch (const std::exception& e) {
                backend_failed_ = true;
                throw comm_error(detail::concat("comm::process_group send_recv: ", backend_name(), ": ", what(e)));
            }
        }
        traffic_.count_send_recv(n * sizeof(float), m * sizeof(float));
    }

    // data on every rank = data on root. Every rank must pass the same n and root.
    void broadcast(float* data, std::size_t n, int root) {
        const auto s = spread<3>("broadcast", {static_cast<std::int64_t>(n), root, null_flag(n != 0 && data == nullptr)});
        if (s[0].lo != s[0].hi || s[1].lo != s[1].hi)
            throw comm_error(detail::concat("comm::process_group broadcast: ranks passed different sizes or roots "
                                            "(sizes from ",
                                            s[0].lo, " to ", s[0].hi, "); rank ", rank_, " passed ", n,
                                            " elements from root ", root));
        require(root >= 0 && root < size_, "comm::process_group broadcast: root ", root, " out of range [0, ", size_,
                ")");
        check_null("broadcast", s[2].hi);
        if (size_ > 1 && n != 0) {
            std::vector<at::Tensor> t{wrap(data, n)};
            c10d::BroadcastOptions o;
            o.rootRank = root;
            run("broadcast", [&] { return group_->broadcast(t, o); });
        }
        traffic_.count_broadcast(n * sizeof(float), size_, rank_ == root);
    }

    void barrier() {
        run("barrier", [&] { return group_->barrier(); });
    }

private:
    static constexpr int tag = 0x7121;

    struct range {
        std::int64_t lo, hi;
    };

    static at::Tensor wrap(float* p, std::size_t n) {
        return at::from_blob(p, {static_cast<std::int64_t>(n)}, at::TensorOptions().dtype(at::kFloat));
    }

    std::string backend_name() const {
        try {
            return "backend " + group_->getBackendName();
        } catch (...) {
            return "the process group";
        }
    }

    static std::string what(const std::exception& e) {
        if (const auto* c = dynamic_cast<const c10::Error*>(&e)) return c->what_without_backtrace();
        return e.what();
    }

    // Starts an operation and waits for it; the backend's errors become comm_error.
    template <class Start>
    void run(const char* op, Start&& start) {
        try {
            auto work = start();
            work->wait();
        } catch (const std::exception& e) {
            backend_failed_ = true;
            throw comm_error(detail::concat("comm::process_group ", op, ": ", backend_name(), ": ", what(e)));
        }
    }

    void gather_bytes(const char* op, const void* send, void* recv, std::size_t bytes) {
        const auto opts = at::TensorOptions().dtype(at::kByte);
        std::vector<at::Tensor> in{at::from_blob(const_cast<void*>(send), {static_cast<std::int64_t>(bytes)}, opts)};
        std::vector<std::vector<at::Tensor>> out(1);
        for (int r = 0; r < size_; ++r)
            out[0].push_back(at::from_blob(static_cast<unsigned char*>(recv) + static_cast<std::size_t>(r) * bytes,
                                           {static_cast<std::int64_t>(bytes)}, opts));
        run(op, [&] { return group_->allgather(out, in); });
    }

    void exchange_blocks(const char* op, const void* send, void* recv, std::size_t bytes, bool to_all) {
        const auto s = spread<2>(op, {static_cast<std::int64_t>(bytes),
                                      null_flag(bytes != 0 && (send == nullptr || recv == nullptr))});
        if (s[0].lo != s[0].hi)
            throw comm_error(detail::concat("comm::process_group ", op, ": ranks passed different sizes (from ", s[0].lo,
                                            " to ", s[0].hi, " bytes); rank ", rank_, " passed ", bytes));
        check_null(op, s[1].hi);
        if (bytes != 0) {
            if (to_all) {
                const auto opts = at::TensorOptions().dtype(at::kByte);
                const auto total = static_cast<std::int64_t>(bytes * static_cast<std::size_t>(size_));
                at::Tensor in = at::from_blob(const_cast<void*>(send), {total}, opts);
                at::Tensor out = at::from_blob(recv, {total}, opts);
                run(op, [&] {
                    std::vector<std::int64_t> equal_out, equal_in; // empty: equal blocks
                    return group_->alltoall_base(out, in, equal_out, equal_in);
                });
            } else {
                gather_bytes(op, send, recv, bytes);
            }
        }
        traffic_.count_all_gather(bytes, size_);
    }

    // The minimum and maximum of each value over all ranks, in one allreduce(MAX) of the
    // values and their negations.
    template <std::size_t K>
    std::array<range, K> spread(const char* op, const std::array<std::int64_t, K>& values) {
        at::Tensor t = at::empty({static_cast<std::int64_t>(2 * K)}, at::TensorOptions().dtype(at::kLong));
        auto* p = t.data_ptr<std::int64_t>();
        for (std::size_t i = 0; i < K; ++i) {
            p[i] = values[i];
            p[K + i] = -values[i];
        }
        if (size_ > 1) {
            std::vector<at::Tensor> ts{t};
            c10d::AllreduceOptions o;
            o.reduceOp = c10d::ReduceOp::MAX;
            run(op, [&] { return group_->allreduce(ts, o); });
        }
        std::array<range, K> r{};
        for (std::size_t i = 0; i < K; ++i) r[i] = {-p[K + i], p[i]};
        return r;
    }

    std::int64_t null_flag(bool bad) const { return bad ? rank_ + 1 : 0; }

    static void check_null(const char* op, std::int64_t flag) {
        if (flag != 0)
            throw invalid_argument(detail::concat("comm::process_group ", op, ": rank ", flag - 1,
                                                  " passed a null pointer with a nonzero count"));
    }

    c10::intrusive_ptr<c10d::ProcessGroup> group_;
    int rank_ = 0;
    int size_ = 1;
    traffic_counters traffic_{};
    std::vector<float> scratch_;
    bool backend_failed_ = false;
};

static_assert(byte_communicator<process_group>);

} // namespace comm

TRICKLE_NAMESPACE_END
