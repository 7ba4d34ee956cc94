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
#include <cstring>
#include <exception>
#include <string>
#include <utility>
#include <vector>

TRICKLE_NAMESPACE_BEGIN

namespace comm {

// How comm::process_group makes sure every rank called the same collective with the
// same arguments (sizes, null pointers, roots) before any data moves or changes.
enum class argument_checks {
    // A small allreduce of the arguments before every collective (the default): a rank
    // that passes a different size than the others gets trickle::comm_error, and so do
    // they, whatever the call. It costs one more collective per call (its latency).
    collective,
    // No collective of its own: a 32-byte header travels in each collective's payload
    // (which collective, its size, how many collectives this object ran before it, a
    // null-pointer flag) and every rank compares every rank's header before it writes
    // anything, so ranks in different calls, or at different points of their sequence,
    // or with a null pointer, all throw together. Sizes are not checked before the data
    // moves: a rank whose size differs from the others' makes the backend fail (Gloo
    // aborts the process). Use it where every size follows from a configuration the
    // ranks agreed on, as trickle's algorithms do (their configuration, model layout
    // included, is compared once at construction); the Python package does.
    in_payload,
};

struct process_group_options {
    argument_checks checks = argument_checks::collective;
    // all_reduce_sum goes as a single all-gather (every rank sums all ranks' values, in
    // rank order) instead of a reduce-scatter and an all-gather (two all-to-alls) while
    // that sends at most this many bytes more per rank: always for two ranks (where both
    // send the same bytes), for small buffers otherwise, where latency rules. 0: only for
    // two ranks (within gather_max_bytes). 4 KiB: about what a slow link (10 Mb/s) moves
    // in the round trip the second collective costs; a SPARTA exchange of 4,040 values
    // over 4 ranks (16 KB) then sends the ring's 24 KB, not the all-gather's 48 KB (the
    // network lab). Set it higher where latency, not bandwidth, is scarce (one machine, a
    // datacenter): 64 KiB sends such an exchange as one all-gather.
    std::size_t gather_extra_bytes = 4 * 1024;
    // ...and while the buffer holds at most this many bytes: past it, the all-gather's
    // staging (N blocks received, every one read by every rank) costs more memory traffic
    // than the extra round trip saves, even for two ranks.
    std::size_t gather_max_bytes = 1 << 20;
    // Buffers of at least this many bytes that do not go as one all-gather go round a
    // pipelined ring instead of two all-to-alls: each rank sends only to rank + 1 and
    // receives only from rank - 1, the ring's 2 (N-1) steps cut into segments of
    // ring_segment_bytes so a step's segment leaves as soon as the previous step's arrived.
    // Every link carries one flow each way that stays busy for the whole sum, where an
    // all-to-all opens N-1 flows at once into every receiver's link (on a slow link they
    // overflow its queue: drops and retransmissions) and starts them cold each time. The
    // ring adds chunk q in ring order (rank q + 1's value first, rank q's last), not rank
    // order: every rank still gets the same bits, run after run, but not comm::local's (set
    // SIZE_MAX for rank order at every size). 0: always the ring (three ranks or more).
    std::size_t ring_min_bytes = 256 * 1024;
    std::size_t ring_segment_bytes = 64 * 1024;
};

// A trickle::communicator over a c10d::ProcessGroup the trainer owns (in Python,
// torch.distributed's default group or any group from new_group; in C++ a
// c10::intrusive_ptr<c10d::ProcessGroup>, e.g. comm::gloo_group's), one worker per rank,
// data in host memory. Every operation blocks until this rank's part is done.
//
// Determinism: all_reduce_sum does not call the backend's allreduce. Each element is
// added in exactly one order, rank 0's value first, then rank 1's, and so on, the order
// comm::local and comm::mpi add it in: every rank ends with the same bits, whatever the
// backend, and the same bits as those communicators. Small buffers go as one all-gather
// (each rank adds every element: one collective, (N-1) n values sent per rank); larger
// ones as a reduce-scatter and an all-gather (each rank adds its chunk: the ring
// all-reduce's 2 (N-1)/N n values), each one alltoall. Large buffers go round a pipelined
// ring (process_group_options::ring_min_bytes), the same bytes over one warm flow per
// link, whose sums are in ring order: the same bits on every rank and in every run, but
// not comm::local's. traffic() counts the values each way sends; headers and argument
// checks are not counted.
//
// Arguments are checked on every rank together (argument_checks above), so ranks that
// pass different counts or roots throw trickle::comm_error instead of hanging or
// corrupting each other. Errors the backend raises (a timeout, a dead peer) become
// trickle::comm_error naming the operation. The process group must outlive this object,
// and no other thread may use it at the same time through this object.
class process_group {
public:
    using memory_space = host_space;

    explicit process_group(c10::intrusive_ptr<c10d::ProcessGroup> group, process_group_options options = {})
        : group_(std::move(group)), options_(options) {
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
    const process_group_options& options() const { return options_; }
    // Whether an operation failed in the backend (a dead or silent peer, a timeout), as
    // opposed to ranks that disagreed on their arguments: comm::elastic_group reads it.
    bool backend_failed() const { return backend_failed_; }
    // The collectives this object started, argument checks by a collective of their own
    // included: what its calls cost in round trips.
    std::uint64_t collectives() const { return collectives_; }

    // Whether all_reduce_sum of n floats goes as one all-gather (see process_group_options);
    // the same answer on every rank that passes the same n.
    bool all_reduce_gathers(std::size_t n) const {
        if (static_cast<std::uint64_t>(n) * sizeof(float) > options_.gather_max_bytes) return false;
        if (size_ <= 2) return true;
        const auto N = static_cast<std::uint64_t>(size_);
        // (N-1) n - 2 (N-1) n / N values more, in bytes: (N-1)(N-2) 4n / N.
        return (N - 1) * (N - 2) * 4 * static_cast<std::uint64_t>(n) <= N * options_.gather_extra_bytes;
    }

    // Whether all_reduce_sum of n floats goes round the pipelined ring (see
    // process_group_options::ring_min_bytes); the same answer on every rank.
    bool all_reduce_in_ring(std::size_t n) const {
        return size_ > 2 && n != 0 && !all_reduce_gathers(n) &&
               static_cast<std::uint64_t>(n) * sizeof(float) >= options_.ring_min_bytes;
    }

    // In place: data = elementwise sum over ranks, the same bits on every rank (see above).
    void all_reduce_sum(float* data, std::size_t n) {
        const bool null = n != 0 && data == nullptr;
        if (options_.checks == argument_checks::collective) {
            const auto s = spread<2>("all_reduce_sum", {static_cast<std::int64_t>(n), null_flag(null)});
            if (s[0].lo != s[0].hi)
                throw comm_error(detail::concat("comm::process_group all_reduce_sum: ranks passed different element "
                                                "counts (from ",
                                                s[0].lo, " to ", s[0].hi, "); rank ", rank_, " passed ", n));
            check_null("all_reduce_sum", s[1].hi);
        }
        const header mine = next_header(op_all_reduce, n, null);
        if (size_ > 1 && n != 0 && all_reduce_gathers(n)) {
            reduce_by_gather(mine, data, n);
            traffic_.count_all_gather(n * sizeof(float), size_);
            return;
        }
        if (all_reduce_in_ring(n)) {
            reduce_in_ring(mine, data, n);
            return;
        }
        if (size_ > 1 && n != 0)
            reduce_by_chunks(mine, data, n);
        else
            check_headers("all_reduce_sum", &mine, 0, 1);
        traffic_.count_all_reduce(detail::all_reduce_bytes(n, sizeof(float), size_, rank_));
    }

    // recv[r*bytes .. (r+1)*bytes) = rank r's send. Every rank must pass the same size.
    void all_gather_bytes(const void* send, void* recv, std::size_t bytes) {
        exchange_blocks("all_gather_bytes", op_all_gather_bytes, send, recv, bytes, false);
    }

    // The data-plane byte collectives (byte_communicator), in host memory: the process
    // group's allgather and alltoall_base on uint8 tensors, with the checks above.
    void all_gather(const void* send, void* recv, std::size_t bytes) {
        exchange_blocks("all_gather", op_all_gather, send, recv, bytes, false);
    }
    // recv[q*bytes .. (q+1)*bytes) = rank q's send[rank*bytes .. (rank+1)*bytes).
    void all_to_all(const void* send, void* recv, std::size_t bytes) {
        exchange_blocks("all_to_all", op_all_to_all, send, recv, bytes, true);
    }

    // Sends n floats to rank dst and receives m floats from rank src; collective, with the
    // pattern checked on every rank before any data moves (as comm::mpi does).
    void send_recv(const float* send, std::size_t n, int dst, float* recv, std::size_t m, int src) {
        const auto mine = detail::send_recv_entry(send, n, dst, recv, m, src);
        std::vector<std::uint64_t> all(detail::send_recv_fields * static_cast<std::size_t>(size_));
        gather_bytes("send_recv", mine.data(), all.data(), sizeof mine);
        ++seq_;
        detail::check_send_recv_pattern(all.data(), size_, "comm::process_group");
        if (dst == rank_ && src == rank_) {
            for (std::size_t i = 0; i < m; ++i) recv[i] = send[i];
        } else {
            c10::intrusive_ptr<c10d::Work> in, out;
            std::vector<at::Tensor> rt, st;
            try {
                ++collectives_;
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

    // data on every rank = data on root. Every rank must pass the same n and root (checked
    // by a collective of its own in either mode: a broadcast's receivers cannot tell the
    // root about their arguments).
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
        ++seq_;
        if (size_ > 1 && n != 0) {
            std::vector<at::Tensor> t{wrap(data, n)};
            c10d::BroadcastOptions o;
            o.rootRank = root;
            run("broadcast", [&] { return group_->broadcast(t, o); });
        }
        traffic_.count_broadcast(n * sizeof(float), size_, rank_ == root);
    }

    void barrier() {
        ++seq_;
        run("barrier", [&] { return group_->barrier(); });
    }

private:
    static constexpr int tag = 0x7121;
    static constexpr int ring_tag = 0x10000; // + the message's index within one ring sum

    // ---- the call header (argument_checks::in_payload; also sent under collective checks,
    // where it catches ranks at different points of their sequence of calls) ----
    enum op_code : std::uint64_t {
        op_all_reduce = 1,
        op_all_gather_bytes = 2,
        op_all_gather = 3,
        op_all_to_all = 4,
    };
    struct header {
        std::uint64_t op;   // op_code
        std::uint64_t size; // elements (all_reduce_sum) or bytes
        std::uint64_t seq;  // collectives this object ran before this one
        std::uint64_t bad;  // rank + 1 when this rank passed a null pointer, else 0
    };
    static constexpr std::size_t header_bytes = sizeof(header);
    static_assert(header_bytes == 32);

    static const char* op_name(std::uint64_t op) {
        switch (op) {
        case op_all_reduce: return "all_reduce_sum";
        case op_all_gather_bytes: return "all_gather_bytes";
        case op_all_gather: return "all_gather";
        case op_all_to_all: return "all_to_all";
        default: return "an unknown collective";
        }
    }

    header next_header(op_code op, std::size_t size, bool null) {
        return header{op, static_cast<std::uint64_t>(size), seq_++, null ? static_cast<std::uint64_t>(rank_) + 1 : 0};
    }

    // Every rank's header, rank q's at base + q * stride (or `count` headers one after
    // another): throws on every rank alike when a rank passed a null pointer or when the
    // ranks are not in the same call.
    void check_headers(const char* op, const void* base, std::size_t stride, std::size_t count) const {
        auto at_rank = [&](std::size_t q) {
            header h;
            std::memcpy(&h, static_cast<const unsigned char*>(base) + q * stride, header_bytes);
            return h;
        };
        for (std::size_t q = 0; q < count; ++q) check_null(op, static_cast<std::int64_t>(at_rank(q).bad));
        const header first = at_rank(0);
        for (std::size_t q = 1; q < count; ++q) {
            const header h = at_rank(q);
            if (h.op != first.op || h.size != first.size || h.seq != first.seq)
                throw comm_error(detail::concat(
                    "comm::process_group ", op, ": the ranks are not in the same call: rank 0 is in its collective ",
                    first.seq, " (", op_name(first.op), " of ", first.size, first.op == op_all_reduce ? " elements" : " bytes",
                    "), rank ", q, " in its collective ", h.seq, " (", op_name(h.op), " of ", h.size,
                    h.op == op_all_reduce ? " elements" : " bytes",
                    "); every rank must make the same calls in the same order"));
        }
    }

    // A block of the payload: the header, then `bytes` of `from`, or zeros when the header
    // flags a null pointer (the call is refused on every rank once the headers are read).
    static void put_block(unsigned char* to, const header& h, const void* from, std::size_t bytes) {
        std::memcpy(to, &h, header_bytes);
        if (h.bad == 0)
            std::memcpy(to + header_bytes, from, bytes);
        else
            std::memset(to + header_bytes, 0, bytes);
    }

    // out[i] = the sum over ranks q, in rank order as comm::local adds, of element i of the
    // values after rank q's header at base + q * stride; for i < count.
    static void sum_in_rank_order(float* out, const unsigned char* base, std::size_t stride, std::size_t ranks,
                                  std::size_t count) {
        auto values = [&](std::size_t q) { return reinterpret_cast<const float*>(base + q * stride + header_bytes); };
        for (std::size_t i = 0; i < count; ++i) {
            float acc = values(0)[i];
            for (std::size_t q = 1; q < ranks; ++q) acc += values(q)[i];
            out[i] = acc;
        }
    }

    // One all-gather of [header | values]; every rank adds all ranks' values in rank order.
    void reduce_by_gather(const header& mine, float* data, std::size_t n) {
        const auto N = static_cast<std::size_t>(size_);
        const std::size_t block = header_bytes + n * sizeof(float);
        send_.resize(block);
        recv_.resize(N * block);
        put_block(send_.data(), mine, data, n * sizeof(float));
        gather_bytes("all_reduce_sum", send_.data(), recv_.data(), block);
        check_headers("all_reduce_sum", recv_.data(), block, N);
        sum_in_rank_order(data, recv_.data(), block, N, n);
    }

    // A reduce-scatter (each rank's pieces of my chunk, each after its sender's header)
    // and an all-gather of the summed chunks, each one alltoall.
    void reduce_by_chunks(const header& mine_header, float* data, std::size_t n) {
        const auto N = static_cast<std::size_t>(size_);
        const std::size_t mine = detail::chunk_size(n, size_, rank_);
        const std::size_t mine_begin = detail::chunk_begin(n, size_, rank_);
        std::vector<std::int64_t> send_splits(N), recv_splits(N, static_cast<std::int64_t>(header_bytes + mine * 4));
        send_.resize(N * header_bytes + n * sizeof(float));
        recv_.resize(N * (header_bytes + mine * sizeof(float)));
        unsigned char* out = send_.data();
        for (int q = 0; q < size_; ++q) {
            const std::size_t c = detail::chunk_size(n, size_, q);
            send_splits[static_cast<std::size_t>(q)] = static_cast<std::int64_t>(header_bytes + c * sizeof(float));
            put_block(out, mine_header, data + detail::chunk_begin(n, size_, q), c * sizeof(float));
            out += header_bytes + c * sizeof(float);
        }
        const auto bytes = at::TensorOptions().dtype(at::kByte);
        at::Tensor sent = at::from_blob(send_.data(), {static_cast<std::int64_t>(send_.size())}, bytes);
        at::Tensor got = at::from_blob(recv_.data(), {static_cast<std::int64_t>(recv_.size())}, bytes);
        // 1. Rank q's header and piece of my chunk land at recv_[q * (header + mine) ...].
        // (Copies of the split sizes: some versions of c10d move from the vectors they are given.)
        run("all_reduce_sum", [&] {
            std::vector<std::int64_t> o = recv_splits, i = send_splits;
            return group_->alltoall_base(got, sent, o, i);
        });
        const std::size_t stride = header_bytes + mine * sizeof(float);
        check_headers("all_reduce_sum", recv_.data(), stride, N);
        // 2. The sum, in rank order, as comm::local adds.
        float* sum = data + mine_begin;
        sum_in_rank_order(sum, recv_.data(), stride, N, mine);
        // 3. My summed chunk to every rank (the same bits everywhere).
        scratch_.resize(N * mine);
        for (std::size_t q = 0; q < N; ++q)
            for (std::size_t i = 0; i < mine; ++i) scratch_[q * mine + i] = sum[i];
        std::vector<std::int64_t> chunks(N), mine_each(N, static_cast<std::int64_t>(mine));
        for (int r = 0; r < size_; ++r)
            chunks[static_cast<std::size_t>(r)] = static_cast<std::int64_t>(detail::chunk_size(n, size_, r));
        at::Tensor whole = wrap(data, n);
        at::Tensor pieces = wrap(scratch_.data(), N * mine);
        run("all_reduce_sum", [&] {
            std::vector<std::int64_t> o = chunks, i = mine_each;
            return group_->alltoall_base(whole, pieces, o, i);
        });
    }

    // The pipelined ring (process_group_options::ring_min_bytes). First every rank's
    // header, in one small all-gather, so that ranks in different calls or with a null
    // pointer are refused on every rank before a value moves. Then 2 (N-1) steps, each
    // rank sending to rank + 1 and receiving from rank - 1:
    //   reduce-scatter, step k < N-1: send my partial of chunk (r-1-k) mod N (step 0: my
    //     own values); receive rank r-1's partial of chunk (r-2-k) mod N and add my values
    //     to it, last. The chunk received at step N-2 is my own: with mine, its full sum.
    //   all-gather, step k = N-1+j: send chunk (r-j) mod N, receive chunk (r-j-1) mod N
    //     straight into data (passed on at the next step).
    // Chunk q is summed in ring order, rank q+1's value first and rank q's last. Each step
    // is cut into segments; every receive is posted at the start, and a step's segment is
    // sent as soon as the previous step's same segment has arrived, so the link never
    // waits for a whole step.
    void reduce_in_ring(const header& mine, float* data, std::size_t n) {
        const int N = size_;
        const auto Nz = static_cast<std::size_t>(N);
        headers_.resize(Nz * header_bytes);
        gather_bytes("all_reduce_sum", &mine, headers_.data(), header_bytes);
        check_headers("all_reduce_sum", headers_.data(), header_bytes, Nz);

        const int next = (rank_ + 1) % N, prev = (rank_ + N - 1) % N;
        const auto mod = [N](int x) { return ((x % N) + N) % N; };
        const std::size_t seg = std::max<std::size_t>(1, options_.ring_segment_bytes / sizeof(float));
        const std::size_t steps = 2 * (Nz - 1);
        // The chunk rank `who` sends at step k (its successor receives it).
        const auto sent_chunk = [&](int who, std::size_t k) {
            const int kk = static_cast<int>(k), rs = N - 1;
            return kk < rs ? mod(who - 1 - kk) : mod(who - (kk - rs));
        };
        const auto chunk = [&](int q) { return detail::chunk_size(n, N, q); };
        const auto begin = [&](int q) { return detail::chunk_begin(n, N, q); };
        const auto segments = [&](std::size_t count) { return (count + seg - 1) / seg; };
        const std::size_t cap = chunk(0); // the largest chunk
        const std::size_t slots = segments(cap);
        // The reduce-scatter's received partials: step k's at stage_[k * cap ...].
        stage_.resize((Nz - 1) * cap);
        const auto recv_at = [&](std::size_t k) -> float* {
            return k < Nz - 1 ? stage_.data() + k * cap : data + begin(sent_chunk(prev, k));
        };
        const auto send_at = [&](std::size_t k) -> const float* {
            if (k == 0) return data + begin(sent_chunk(rank_, 0));
            if (k < Nz - 1) return stage_.data() + (k - 1) * cap; // the partial received at k-1, mine added
            return data + begin(sent_chunk(rank_, k));             // a summed chunk
        };
        const auto bytes = at::TensorOptions().dtype(at::kByte);
        const auto tensor = [&](const float* p, std::size_t m) {
            return std::vector<at::Tensor>{
                at::from_blob(const_cast<float*>(p), {static_cast<std::int64_t>(m * sizeof(float))}, bytes)};
        };
        const auto tag = [&](std::size_t k, std::size_t j) { return ring_tag + static_cast<int>(k * slots + j); };
        std::vector<c10::intrusive_ptr<c10d::Work>> recvs(steps * slots), sends(steps * slots);
        std::vector<std::vector<at::Tensor>> held(2 * steps * slots); // alive until the works complete
        collectives_ += steps;
        try {
            for (std::size_t k = 0; k < steps; ++k) {
                const std::size_t count = chunk(sent_chunk(prev, k));
                for (std::size_t j = 0; j < segments(count); ++j) {
                    auto& t = held[k * slots + j];
                    t = tensor(recv_at(k) + j * seg, std::min(seg, count - j * seg));
                    recvs[k * slots + j] = group_->recv(t, prev, tag(k, j));
                }
            }
            for (std::size_t k = 0; k < steps; ++k) {
                const std::size_t count = chunk(sent_chunk(rank_, k));
                for (std::size_t j = 0; j < segments(count); ++j) {
                    const std::size_t lo = j * seg, m = std::min(seg, count - lo);
                    if (k > 0) {
                        recvs[(k - 1) * slots + j]->wait();
                        if (k <= Nz - 1) { // add my values to the partial that arrived at k-1
                            const float* own = data + begin(sent_chunk(prev, k - 1)) + lo;
                            float* part = stage_.data() + (k - 1) * cap + lo;
                            if (k < Nz - 1) {
                                for (std::size_t i = 0; i < m; ++i) part[i] += own[i];
                            } else { // my own chunk: its full sum, in place
                                float* sum = data + begin(rank_) + lo;
                                for (std::size_t i = 0; i < m; ++i) sum[i] = part[i] + own[i];
                            }
                        }
                    }
                    auto& t = held[(steps + k) * slots + j];
                    t = tensor(send_at(k) + lo, m);
                    sends[k * slots + j] = group_->send(t, next, tag(k, j));
                }
            }
            for (std::size_t j = 0; j < slots; ++j)
                if (auto& w = recvs[(steps - 1) * slots + j]) w->wait();
            for (auto& w : sends)
                if (w) w->wait();
        } catch (const std::exception& e) {
            backend_failed_ = true;
            throw comm_error(detail::concat("comm::process_group all_reduce_sum: ", backend_name(), ": ", what(e)));
        }
        const auto [sent, received] = detail::ring_all_reduce_bytes(n, sizeof(float), N, rank_);
        traffic_.count_send_recv(sent, received);
    }

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
        ++collectives_;
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

    // all_gather (to_all false) or all_to_all of `bytes` per block, each block after its
    // sender's header; the payload is copied out only once every header checked out.
    void exchange_blocks(const char* op, op_code code, const void* send, void* recv, std::size_t bytes, bool to_all) {
        const bool null = bytes != 0 && (send == nullptr || recv == nullptr);
        if (options_.checks == argument_checks::collective) {
            const auto s = spread<2>(op, {static_cast<std::int64_t>(bytes), null_flag(null)});
            if (s[0].lo != s[0].hi)
                throw comm_error(detail::concat("comm::process_group ", op, ": ranks passed different sizes (from ",
                                                s[0].lo, " to ", s[0].hi, " bytes); rank ", rank_, " passed ", bytes));
            check_null(op, s[1].hi);
        }
        const header mine = next_header(code, bytes, null);
        const auto N = static_cast<std::size_t>(size_);
        const std::size_t block = header_bytes + bytes;
        const auto* from = static_cast<const unsigned char*>(send);
        auto* to = static_cast<unsigned char*>(recv);
        if (size_ == 1 || bytes == 0) {
            check_headers(op, &mine, 0, 1);
            if (bytes != 0) std::memmove(to, from, bytes);
        } else {
            const std::size_t blocks = to_all ? N : 1;
            send_.resize(blocks * block);
            recv_.resize(N * block);
            for (std::size_t q = 0; q < blocks; ++q) put_block(send_.data() + q * block, mine, from + q * bytes, bytes);
            if (to_all) {
                const auto opts = at::TensorOptions().dtype(at::kByte);
                const auto total = static_cast<std::int64_t>(N * block);
                at::Tensor in = at::from_blob(send_.data(), {total}, opts);
                at::Tensor out = at::from_blob(recv_.data(), {total}, opts);
                run(op, [&] {
                    std::vector<std::int64_t> equal_out, equal_in; // empty: equal blocks
                    return group_->alltoall_base(out, in, equal_out, equal_in);
                });
            } else {
                gather_bytes(op, send_.data(), recv_.data(), block);
            }
            check_headers(op, recv_.data(), block, N);
            // g++ 12 at -O3 unrolls this loop past a caller's array it can see (N is not a
            // constant to it) and warns of a write beyond it on an iteration that never runs.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstringop-overflow"
#endif
            for (std::size_t q = 0; q < N; ++q)
                std::memcpy(to + q * bytes, recv_.data() + q * block + header_bytes, bytes);
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
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
    process_group_options options_{};
    int rank_ = 0;
    int size_ = 1;
    traffic_counters traffic_{};
    std::vector<float> scratch_;
    std::vector<unsigned char> send_, recv_; // [header | values] blocks
    std::vector<unsigned char> headers_;      // the ring's gathered headers
    std::vector<float> stage_;                // the ring's received partial sums
    std::uint64_t seq_ = 0;                  // collectives started (every kind), the headers' seq
    std::uint64_t collectives_ = 0;
    bool backend_failed_ = false;
};

static_assert(byte_communicator<process_group>);

} // namespace comm

TRICKLE_NAMESPACE_END
