// trickle/comm/mpi.hpp: comm::mpi, one worker per MPI process over host memory.
//
// Declares nothing unless TRICKLE_HAS_MPI is 1 (link the trickle::mpi CMake target).
#pragma once

#include <trickle/config.hpp>

#if TRICKLE_HAS_MPI

#include <trickle/comm/communicator.hpp>
#include <trickle/comm/replicas.hpp>
#include <trickle/core/memory_space.hpp>
#include <trickle/error.hpp>

#include <mpi.h>

#include <array>
#include <chrono>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

TRICKLE_NAMESPACE_BEGIN

namespace detail {

inline std::string mpi_error_text(int code) {
    char text[MPI_MAX_ERROR_STRING] = {};
    int len = 0;
    if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) return detail::concat("MPI error code ", code);
    return std::string(text, static_cast<std::size_t>(len));
}

inline void check_mpi(int code, const char* call, const char* file, int line) {
    if (code != MPI_SUCCESS)
        throw comm_error(concat("comm::mpi: MPI call '", call, "' failed at ", file, ':', line, ": ",
                                mpi_error_text(code)));
}

} // namespace detail

// Checks an MPI call and throws trickle::comm_error naming it. Only meaningful on a
// communicator whose error handler is MPI_ERRORS_RETURN (the default handler aborts).
#define TRICKLE_MPI_CHECK(call) ::trickle::detail::check_mpi((call), #call, __FILE__, __LINE__)

namespace comm {

// A trickle::communicator over an MPI communicator the caller owns (MPI_COMM_WORLD by
// default), one worker per process. Every operation blocks until this rank's part is
// done; data lives in host memory.
//
// Construction is collective: it duplicates the communicator, so trickle's messages never
// meet the trainer's, and sets MPI_ERRORS_RETURN on the duplicate only, so a failed call
// becomes a trickle::comm_error while the trainer's own error handler stays as it was.
// Destroy it on every rank before MPI_Finalize.
//
// Each collective first reduces a few integers (the counts, roots and null-pointer flags
// of all ranks) so that ranks passing different arguments all throw instead of hanging or
// corrupting each other. That check is not counted in traffic(): traffic() follows the
// cost model of communicator.hpp exactly, as comm::local does.
//
// Timeout (optional, off by default). Without one, every operation is the blocking MPI
// call named at it and waits as long as MPI waits: for ever, for a peer that stopped
// answering. With one, each wait on the peers (the argument agreement, every piece of
// every transfer) posts MPI-3's nonblocking form of the operation and polls it; a wait not
// over within the timeout throws trickle::peer_failure on the rank that waited. Every
// surviving rank is waiting on the silent one, so each of them reports it within the
// timeout (plus a poll interval) instead of hanging. The object is then broken: every later
// call throws peer_failure at once. Plain MPI cannot take a process out of a communicator
// (that needs the ULFM extension, MPIX_Comm_shrink, which Debian's Open MPI is built
// without), so nothing can carry on over this communicator: end the job (MPI_Abort) or
// restart it from a checkpoint. docs/communicators.md, "Failures and timeouts", has more.
class mpi {
public:
    using memory_space = host_space;

    // max_message_elements bounds the element count of one MPI call (MPI counts are
    // int); larger transfers are split. It must be the same on every rank.
    //
    // timeout: zero (the default) for none; otherwise positive, and the same on every rank
    // (MPI never matches a blocking collective with a nonblocking one, so the ranks must
    // agree on the mode). A negative or unequal timeout throws invalid_argument on every
    // rank. Construction itself always blocks: the ranks must agree on the timeout before
    // using it.
    explicit mpi(MPI_Comm comm = MPI_COMM_WORLD, std::size_t max_message_elements = INT_MAX,
                 std::chrono::milliseconds timeout = std::chrono::milliseconds::zero()) {
        int initialized = 0, finalized = 0;
        TRICKLE_MPI_CHECK(MPI_Initialized(&initialized));
        TRICKLE_MPI_CHECK(MPI_Finalized(&finalized));
        require(initialized != 0 && finalized == 0,
                "comm::mpi: MPI is ", finalized ? "already finalized" : "not initialized",
                "; construct comm::mpi between MPI_Init and MPI_Finalize");
        require(comm != MPI_COMM_NULL, "comm::mpi: the communicator is MPI_COMM_NULL");
        int inter = 0;
        TRICKLE_MPI_CHECK(MPI_Comm_test_inter(comm, &inter));
        require(inter == 0, "comm::mpi: intercommunicators are not supported");

        name_ = comm_name(comm);
        io_ = std::make_unique<buffers>();
        TRICKLE_MPI_CHECK(MPI_Comm_dup(comm, &comm_));
        try {
            TRICKLE_MPI_CHECK(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));
            TRICKLE_MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
            TRICKLE_MPI_CHECK(MPI_Comm_size(comm_, &size_));
            // Ranks that split transfers differently would pair unrelated messages, so
            // the bound is agreed here, where every rank can still throw together; so is
            // the timeout.
            const auto s = spread(std::array<std::uint64_t, 3>{max_message_elements, timeout_bits(timeout),
                                                               null_flag(timeout.count() < 0)},
                                  "construction");
            require(s[0].lo == s[0].hi, "comm::mpi: max_message_elements differs between ranks (from ", s[0].lo,
                    " to ", s[0].hi, ")");
            require(s[0].lo >= 1 && s[0].lo <= static_cast<std::uint64_t>(INT_MAX),
                    "comm::mpi: max_message_elements must be in [1, ", INT_MAX, "], got ", s[0].lo);
            check_timeout("comm::mpi", timeout, s[1], s[2]);
            max_elements_ = max_message_elements;
            timeout_ = timeout;
        } catch (...) {
            MPI_Comm_free(&comm_);
            throw;
        }
    }

    mpi(const mpi&) = delete;
    mpi& operator=(const mpi&) = delete;
    mpi(mpi&& o) noexcept
        : comm_(std::exchange(o.comm_, MPI_COMM_NULL)), rank_(o.rank_), size_(o.size_),
          max_elements_(o.max_elements_), timeout_(o.timeout_), traffic_(o.traffic_), name_(std::move(o.name_)),
          io_(std::move(o.io_)), pending_(std::move(o.pending_)), failure_(std::move(o.failure_)),
          failure_kind_(o.failure_kind_) {}
    mpi& operator=(mpi&& o) noexcept {
        if (this != &o) {
            release();
            comm_ = std::exchange(o.comm_, MPI_COMM_NULL);
            rank_ = o.rank_;
            size_ = o.size_;
            max_elements_ = o.max_elements_;
            timeout_ = o.timeout_;
            traffic_ = o.traffic_;
            name_ = std::move(o.name_);
            io_ = std::move(o.io_);
            pending_ = std::move(o.pending_);
            failure_ = std::move(o.failure_);
            failure_kind_ = o.failure_kind_;
        }
        return *this;
    }
    ~mpi() { release(); }

    // Whether MPI may be called from a thread other than the one that initialized it, one
    // thread at a time (MPI_THREAD_SERIALIZED or MPI_THREAD_MULTIPLE), as comm::async's
    // progress thread does.
    bool thread_level_ok() const {
        int provided = MPI_THREAD_SINGLE;
        TRICKLE_MPI_CHECK(MPI_Query_thread(&provided));
        return provided >= MPI_THREAD_SERIALIZED;
    }

    int rank() const { return rank_; }
    int size() const { return size_; }
    traffic_counters traffic() const { return traffic_; }
    void synchronize() {}

    // The timeout of each wait on the peers; zero: none (blocking MPI calls).
    std::chrono::milliseconds timeout() const { return timeout_; }

    // Collective: every rank sets the same timeout (zero turns it off). A negative or unequal
    // value throws invalid_argument on every rank and changes nothing. The agreement runs in
    // the mode in force before the call.
    void set_timeout(std::chrono::milliseconds timeout) {
        check_usable("set_timeout");
        const auto s = spread(std::array<std::uint64_t, 2>{timeout_bits(timeout), null_flag(timeout.count() < 0)},
                              "set_timeout");
        check_timeout("comm::mpi set_timeout", timeout, s[0], s[1]);
        timeout_ = timeout;
    }

    // Whether an earlier call timed out (or its MPI wait failed): then every call throws.
    bool broken() const { return failure_kind_ != failure::none; }

    // In place: data = elementwise sum over ranks, the same bits on every rank. Every
    // rank must pass the same n; otherwise every rank throws trickle::comm_error and no
    // buffer changes.
    //
    // Not MPI_Allreduce: the MPI standard only advises, and does not require, that every
    // rank receives the same bits, and some implementations add in a different order on
    // different ranks. A one-ulp difference would make SPARTA's replicas drift apart for
    // ever without any error. A reduce-scatter reduces each element in exactly one place
    // (chunk r on rank r, as comm::local does), and the all-gather then copies those bits
    // to every rank, so equality holds by construction, with the same bytes on the wire
    // as a ring all-reduce.
    //
    // With a timeout the reduce-scatter is MPI_Ialltoallv (every rank's piece of chunk r
    // to rank r) followed by rank r adding the pieces in rank order, as comm::local and
    // comm::process_group do, then MPI_Iallgatherv: the same bytes on the wire, one extra
    // host buffer of about n floats, and the bits of comm::local whatever MPI's algorithms.
    // MPI_Ireduce_scatter would also reduce each element once, but in an order of its own
    // that differs from MPI_Reduce_scatter's (Open MPI 4.1, 4 ranks: in a third to a half of
    // the elements, in the last bits), so a timed sum could never promise the untimed one's
    // bits anyway; it promises comm::local's instead. Untimed and timed sums agree to rounding.
    void all_reduce_sum(float* data, std::size_t n) {
        check_usable("all_reduce_sum");
        const auto s =
            spread(std::array<std::uint64_t, 2>{n, null_flag(n != 0 && data == nullptr)}, "all_reduce_sum");
        if (s[0].lo != s[0].hi)
            throw comm_error(detail::concat("comm::mpi all_reduce_sum: ranks passed different element counts (from ",
                                            s[0].lo, " to ", s[0].hi, "); rank ", rank_, " passed ", n));
        check_null("all_reduce_sum", s[1].hi);
        // Segments are a multiple of size_ elements, so the chunk sizes summed over all
        // segments equal chunk_size(n) and the bytes moved match all_reduce_bytes(n).
        const std::size_t N = static_cast<std::size_t>(size_);
        const std::size_t segment = max_elements_ >= N ? max_elements_ / N * N : N;
        buffers& io = *io_;
        io.counts.resize(N);
        io.displs.resize(N);
        for (std::size_t off = 0; off < n; off += segment) {
            const std::size_t len = n - off < segment ? n - off : segment;
            for (int r = 0; r < size_; ++r) {
                io.counts[static_cast<std::size_t>(r)] = static_cast<int>(detail::chunk_size(len, size_, r));
                io.displs[static_cast<std::size_t>(r)] = static_cast<int>(detail::chunk_begin(len, size_, r));
            }
            const int mine = io.counts[static_cast<std::size_t>(rank_)];
            io.scratch.resize(static_cast<std::size_t>(mine));
            if (!timed()) {
                TRICKLE_MPI_CHECK(MPI_Reduce_scatter(data + off, io.scratch.data(), io.counts.data(), MPI_FLOAT,
                                                     MPI_SUM, comm_));
                TRICKLE_MPI_CHECK(MPI_Allgatherv(io.scratch.data(), mine, MPI_FLOAT, data + off, io.counts.data(),
                                                 io.displs.data(), MPI_FLOAT, comm_));
                continue;
            }
            // N * mine <= segment <= INT_MAX: a segment is a multiple of N, or N itself.
            const auto m = static_cast<std::size_t>(mine);
            io.pieces.resize(N * m);
            io.piece_counts.assign(N, mine);
            io.piece_displs.resize(N);
            for (int r = 0; r < size_; ++r) io.piece_displs[static_cast<std::size_t>(r)] = r * mine;
            MPI_Request q = MPI_REQUEST_NULL;
            TRICKLE_MPI_CHECK(MPI_Ialltoallv(data + off, io.counts.data(), io.displs.data(), MPI_FLOAT,
                                             io.pieces.data(), io.piece_counts.data(), io.piece_displs.data(),
                                             MPI_FLOAT, comm_, &q));
            complete(&q, 1, "all_reduce_sum");
            const float* piece = io.pieces.data();
            for (std::size_t i = 0; i < m; ++i) {
                float sum = piece[i];
                for (std::size_t r = 1; r < N; ++r) sum += piece[r * m + i];
                io.scratch[i] = sum;
            }
            TRICKLE_MPI_CHECK(MPI_Iallgatherv(io.scratch.data(), mine, MPI_FLOAT, data + off, io.counts.data(),
                                              io.displs.data(), MPI_FLOAT, comm_, &q));
            complete(&q, 1, "all_reduce_sum");
        }
        const std::uint64_t bytes = detail::all_reduce_bytes(n, sizeof(float), size_, rank_);
        traffic_.count_all_reduce(bytes);
    }

    // recv[r*bytes .. (r+1)*bytes) = rank r's send, in host memory. Every rank must pass
    // the same size, at most INT_MAX bytes; otherwise every rank throws.
    void all_gather_bytes(const void* send, void* recv, std::size_t bytes) {
        exchange_blocks("all_gather_bytes", send, recv, bytes, false);
    }

    // The data-plane byte collectives (byte_communicator), in host memory: MPI_Allgather
    // and MPI_Alltoall of MPI_BYTE (MPI_Iallgather and MPI_Ialltoall with a timeout), with
    // the checks above.
    void all_gather(const void* send, void* recv, std::size_t bytes) {
        exchange_blocks("all_gather", send, recv, bytes, false);
    }
    // recv[q*bytes .. (q+1)*bytes) = rank q's send[rank*bytes .. (rank+1)*bytes).
    void all_to_all(const void* send, void* recv, std::size_t bytes) {
        exchange_blocks("all_to_all", send, recv, bytes, true);
    }

    // Sends n floats to rank dst and receives m floats from rank src. Collective, as in
    // comm::local: every rank calls it at once, and unless every pairing matches (src's
    // dst is me and src's n is my m) every rank throws trickle::comm_error before any
    // data moves. The check gathers (dst, src, n, m) of all ranks: O(size) bytes.
    // MPI_Sendrecv; with a timeout, MPI_Irecv and MPI_Isend (MPI_Isendrecv is MPI-4).
    void send_recv(const float* send, std::size_t n, int dst, float* recv, std::size_t m, int src) {
        check_usable("send_recv");
        const auto mine = detail::send_recv_entry(send, n, dst, recv, m, src);
        constexpr auto fields = detail::send_recv_fields;
        buffers& io = *io_;
        io.pattern_in.assign(mine.begin(), mine.end());
        io.pattern_out.assign(fields * static_cast<std::size_t>(size_), 0);
        if (!timed()) {
            TRICKLE_MPI_CHECK(MPI_Allgather(io.pattern_in.data(), static_cast<int>(fields), MPI_UINT64_T,
                                            io.pattern_out.data(), static_cast<int>(fields), MPI_UINT64_T, comm_));
        } else {
            MPI_Request q = MPI_REQUEST_NULL;
            TRICKLE_MPI_CHECK(MPI_Iallgather(io.pattern_in.data(), static_cast<int>(fields), MPI_UINT64_T,
                                             io.pattern_out.data(), static_cast<int>(fields), MPI_UINT64_T, comm_,
                                             &q));
            complete(&q, 1, "send_recv");
        }
        detail::check_send_recv_pattern(io.pattern_out.data(), size_, "comm::mpi");
        // Pieces of at most max_elements_; a side with nothing left talks to MPI_PROC_NULL,
        // which matches the peer's piece count because pairs carry equal counts.
        for (std::size_t off = 0; off < n || off < m; off += max_elements_) {
            const int ns = off < n ? static_cast<int>(n - off < max_elements_ ? n - off : max_elements_) : 0;
            const int mr = off < m ? static_cast<int>(m - off < max_elements_ ? m - off : max_elements_) : 0;
            if (!timed()) {
                TRICKLE_MPI_CHECK(MPI_Sendrecv(ns ? send + off : nullptr, ns, MPI_FLOAT, ns ? dst : MPI_PROC_NULL,
                                               tag, mr ? recv + off : nullptr, mr, MPI_FLOAT,
                                               mr ? src : MPI_PROC_NULL, tag, comm_, MPI_STATUS_IGNORE));
                continue;
            }
            MPI_Request q[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
            TRICKLE_MPI_CHECK(MPI_Irecv(mr ? recv + off : nullptr, mr, MPI_FLOAT, mr ? src : MPI_PROC_NULL, tag,
                                        comm_, &q[0]));
            const int rc = MPI_Isend(ns ? send + off : nullptr, ns, MPI_FLOAT, ns ? dst : MPI_PROC_NULL, tag, comm_,
                                     &q[1]);
            if (rc != MPI_SUCCESS) {
                // A receive, unlike a collective, can be cancelled: nothing stays posted.
                MPI_Cancel(&q[0]);
                MPI_Wait(&q[0], MPI_STATUS_IGNORE);
                detail::check_mpi(rc, "MPI_Isend(send + off, ns, MPI_FLOAT, dst, tag, comm_, &q[1])", __FILE__,
                                  __LINE__);
            }
            complete(q, 2, "send_recv");
        }
        traffic_.count_send_recv(n * sizeof(float), m * sizeof(float));
    }

    // data on every rank = data on root. Every rank must pass the same n and root.
    // MPI_Bcast (MPI_Ibcast with a timeout).
    void broadcast(float* data, std::size_t n, int root) {
        check_usable("broadcast");
        const auto s = spread(std::array<std::uint64_t, 3>{n, static_cast<std::uint64_t>(static_cast<std::int64_t>(root)),
                                                           null_flag(n != 0 && data == nullptr)},
                              "broadcast");
        if (s[0].lo != s[0].hi || s[1].lo != s[1].hi)
            throw comm_error(detail::concat("comm::mpi broadcast: ranks passed different sizes or roots (sizes from ",
                                            s[0].lo, " to ", s[0].hi, "); rank ", rank_, " passed ", n,
                                            " elements from root ", root));
        require(root >= 0 && root < size_, "comm::mpi broadcast: root ", root, " out of range [0, ", size_, ")");
        check_null("broadcast", s[2].hi);
        for (std::size_t off = 0; off < n; off += max_elements_) {
            const int len = static_cast<int>(n - off < max_elements_ ? n - off : max_elements_);
            if (!timed()) {
                TRICKLE_MPI_CHECK(MPI_Bcast(data + off, len, MPI_FLOAT, root, comm_));
                continue;
            }
            MPI_Request q = MPI_REQUEST_NULL;
            TRICKLE_MPI_CHECK(MPI_Ibcast(data + off, len, MPI_FLOAT, root, comm_, &q));
            complete(&q, 1, "broadcast");
        }
        traffic_.count_broadcast(n * sizeof(float), size_, rank_ == root);
    }

    // MPI_Barrier (MPI_Ibarrier with a timeout).
    void barrier() {
        check_usable("barrier");
        if (!timed()) {
            TRICKLE_MPI_CHECK(MPI_Barrier(comm_));
            return;
        }
        MPI_Request q = MPI_REQUEST_NULL;
        TRICKLE_MPI_CHECK(MPI_Ibarrier(comm_, &q));
        complete(&q, 1, "barrier");
    }

private:
    static constexpr int tag = 0x7121; // on trickle's private communicator, so any value works

    struct range {
        std::uint64_t lo, hi;
    };

    // Every buffer MPI reads or writes besides the caller's data, on the heap: a wait that
    // times out must leave them to MPI (see abandon), so none may live on the stack.
    struct buffers {
        std::vector<float> scratch;                  // this rank's chunk of a sum
        std::vector<float> pieces;                   // every rank's piece of it (timed sums)
        std::vector<int> counts, displs;             // the chunks of a segment
        std::vector<int> piece_counts, piece_displs; // the pieces (timed sums)
        std::vector<std::uint64_t> agree_in, agree_out;
        std::vector<std::uint64_t> pattern_in, pattern_out; // send_recv's (dst, src, n, m) of all ranks
    };

    // A wait that timed out: its requests, still active, and the buffers they use.
    struct abandoned {
        std::vector<MPI_Request> requests;
        std::unique_ptr<buffers> io;
    };

    enum class failure { none, peer, mpi_error };

    bool timed() const { return timeout_.count() > 0; }

    static std::uint64_t timeout_bits(std::chrono::milliseconds t) {
        return static_cast<std::uint64_t>(static_cast<std::int64_t>(t.count()));
    }

    // The agreed timeout: none negative (flag: 1 + the highest offending rank), all equal.
    static void check_timeout(const char* who, std::chrono::milliseconds mine, range value, range negative) {
        if (negative.hi != 0)
            throw invalid_argument(detail::concat(who, ": the timeout must be positive, or zero for none; rank ",
                                                  negative.hi - 1, " passed a negative one (this rank passed ",
                                                  mine.count(), " ms)"));
        if (value.lo != value.hi)
            throw invalid_argument(detail::concat(who, ": the timeout differs between ranks (from ", value.lo, " to ",
                                                  value.hi, " ms); every rank must pass the same"));
    }

    static std::string comm_name(MPI_Comm comm) {
        char text[MPI_MAX_OBJECT_NAME] = {};
        int len = 0;
        if (MPI_Comm_get_name(comm, text, &len) != MPI_SUCCESS || len <= 0) return "an unnamed communicator";
        return std::string(text, static_cast<std::size_t>(len));
    }

    // The minimum and maximum of each value over all ranks, in one MPI_Allreduce(MAX) of
    // the values and their complements (max of ~v is ~min of v); MPI_Iallreduce with a
    // timeout.
    template <std::size_t K>
    std::array<range, K> spread(const std::array<std::uint64_t, K>& values, const char* op) {
        std::array<std::uint64_t, 2 * K> in{}, out{};
        for (std::size_t i = 0; i < K; ++i) {
            in[i] = values[i];
            in[K + i] = ~values[i];
        }
        if (!timed()) {
            TRICKLE_MPI_CHECK(
                MPI_Allreduce(in.data(), out.data(), static_cast<int>(2 * K), MPI_UINT64_T, MPI_MAX, comm_));
        } else {
            buffers& io = *io_;
            io.agree_in.assign(in.begin(), in.end());
            io.agree_out.assign(2 * K, 0);
            MPI_Request q = MPI_REQUEST_NULL;
            TRICKLE_MPI_CHECK(MPI_Iallreduce(io.agree_in.data(), io.agree_out.data(), static_cast<int>(2 * K),
                                             MPI_UINT64_T, MPI_MAX, comm_, &q));
            complete(&q, 1, op);
            for (std::size_t i = 0; i < 2 * K; ++i) out[i] = io.agree_out[i];
        }
        std::array<range, K> r{};
        for (std::size_t i = 0; i < K; ++i) r[i] = {~out[K + i], out[i]};
        return r;
    }

    // Waits for the requests of a timed operation: polls MPI_Testall (which also drives
    // MPI's progress) until all are done or the timeout has passed since the wait began.
    void complete(MPI_Request* requests, int count, const char* op) {
        using clock = std::chrono::steady_clock;
        const auto start = clock::now();
        const auto deadline = start + timeout_;
        for (;;) {
            int done = 0;
            const int rc = MPI_Testall(count, requests, &done, MPI_STATUSES_IGNORE);
            if (rc != MPI_SUCCESS)
                abandon(requests, count, failure::mpi_error,
                        detail::concat("comm::mpi ", op, ": MPI call 'MPI_Testall' failed: ", detail::mpi_error_text(rc),
                                       " (rank ", rank_, " of ", size_, " on ", name_,
                                       "); this communicator cannot be used again"));
            if (done != 0) return;
            const auto now = clock::now();
            if (now >= deadline)
                abandon(requests, count, failure::peer,
                        detail::concat("comm::mpi ", op, ": no answer from the peers within ", timeout_.count(),
                                       " ms (rank ", rank_, " of ", size_, " on ", name_,
                                       "); a peer has failed or stopped. Without ULFM the communicator cannot "
                                       "shrink: end the job (MPI_Abort) or restart it from a checkpoint"));
            // Spin (yielding the core) for the first moments, then poll less often: an
            // operation that takes long costs at most this much extra latency.
            if (now - start < std::chrono::milliseconds(2))
                std::this_thread::yield();
            else
                std::this_thread::sleep_for(std::chrono::microseconds(100));
        }
    }

    // Gives up on a timed wait: records the failure, keeps the requests and their buffers,
    // and throws. The requests stay active. MPI cannot cancel a collective (MPI_Cancel and
    // MPI_Request_free are erroneous on a nonblocking collective's request), nor take back
    // a send or a receive that a slow peer may yet match, and freeing the buffers would let
    // MPI write into freed memory if the silent peer comes back. So they are held until the
    // destructor, which frees them only if MPI has completed the requests by then.
    [[noreturn]] void abandon(MPI_Request* requests, int count, failure kind, std::string message) {
        pending_ = std::make_unique<abandoned>(
            abandoned{std::vector<MPI_Request>(requests, requests + count), std::move(io_)});
        failure_kind_ = kind;
        failure_ = message;
        if (kind == failure::peer) throw peer_failure(message);
        throw comm_error(message);
    }

    // Buffers and requests of waits that never completed, for the rest of the process: MPI
    // may still write into them. Held through a pointer that is never freed (reachable,
    // so leak checkers do not report it).
    static void keep_forever(std::unique_ptr<abandoned> p) noexcept {
        static std::mutex lock;
        static auto* kept = new std::vector<std::unique_ptr<abandoned>>();
        try {
            std::lock_guard<std::mutex> hold(lock);
            kept->push_back(std::move(p));
        } catch (...) {
            (void)p.release(); // no memory left to record it: leak it rather than free it
        }
    }

    // 1 + this rank when it passed a null pointer with data to move, else 0, so the
    // maximum over ranks names the highest offending rank.
    std::uint64_t null_flag(bool bad) const { return bad ? static_cast<std::uint64_t>(rank_) + 1 : 0; }

    static void check_null(const char* op, std::uint64_t flag) {
        if (flag != 0)
            throw invalid_argument(
                detail::concat("comm::mpi ", op, ": rank ", flag - 1, " passed a null pointer with a nonzero count"));
    }

    void exchange_blocks(const char* op, const void* send, void* recv, std::size_t bytes, bool to_all) {
        check_usable(op);
        const auto s = spread(
            std::array<std::uint64_t, 2>{bytes, null_flag(bytes != 0 && (send == nullptr || recv == nullptr))}, op);
        if (s[0].lo != s[0].hi)
            throw comm_error(detail::concat("comm::mpi ", op, ": ranks passed different sizes (from ", s[0].lo, " to ",
                                            s[0].hi, " bytes); rank ", rank_, " passed ", bytes));
        check_null(op, s[1].hi);
        require(bytes <= static_cast<std::size_t>(INT_MAX), "comm::mpi ", op, ": ", bytes,
                " bytes per rank is more than MPI's limit of ", INT_MAX);
        const int b = static_cast<int>(bytes);
        if (bytes != 0 && !timed()) {
            if (to_all)
                TRICKLE_MPI_CHECK(MPI_Alltoall(send, b, MPI_BYTE, recv, b, MPI_BYTE, comm_));
            else
                TRICKLE_MPI_CHECK(MPI_Allgather(send, b, MPI_BYTE, recv, b, MPI_BYTE, comm_));
        } else if (bytes != 0) {
            MPI_Request q = MPI_REQUEST_NULL;
            if (to_all)
                TRICKLE_MPI_CHECK(MPI_Ialltoall(send, b, MPI_BYTE, recv, b, MPI_BYTE, comm_, &q));
            else
                TRICKLE_MPI_CHECK(MPI_Iallgather(send, b, MPI_BYTE, recv, b, MPI_BYTE, comm_, &q));
            complete(&q, 1, op);
        }
        if (to_all)
            traffic_.count_all_to_all(bytes, size_);
        else
            traffic_.count_all_gather(bytes, size_);
    }

    void check_usable(const char* op) const {
        if (comm_ == MPI_COMM_NULL)
            throw invalid_argument(detail::concat("comm::mpi ", op, ": this communicator was moved from"));
        if (failure_kind_ == failure::none) return;
        const std::string what = detail::concat("comm::mpi ", op, ": this communicator failed earlier and cannot be "
                                                "used again: ", failure_);
        if (failure_kind_ == failure::peer) throw peer_failure(what);
        throw comm_error(what);
    }

    void release() noexcept {
        if (comm_ == MPI_COMM_NULL) return;
        // After MPI_Finalize nothing can be freed, nor written by MPI any more; the process
        // is ending its MPI life anyway.
        int finalized = 1;
        if (MPI_Finalized(&finalized) != MPI_SUCCESS || finalized != 0) {
            pending_.reset();
            comm_ = MPI_COMM_NULL;
            return;
        }
        if (pending_ != nullptr) {
            // A wait that timed out: if the silent peer came back and MPI has completed the
            // requests since, everything can be freed; if not, MPI may still write into
            // their buffers, so they are kept, and so is the communicator (its operations
            // are still pending).
            int done = 0;
            const int rc = MPI_Testall(static_cast<int>(pending_->requests.size()), pending_->requests.data(), &done,
                                       MPI_STATUSES_IGNORE);
            if (rc != MPI_SUCCESS || done == 0) {
                keep_forever(std::move(pending_));
                comm_ = MPI_COMM_NULL;
                return;
            }
            pending_.reset();
        }
        MPI_Comm_free(&comm_);
        comm_ = MPI_COMM_NULL;
    }

    MPI_Comm comm_ = MPI_COMM_NULL;
    int rank_ = 0;
    int size_ = 1;
    std::size_t max_elements_ = INT_MAX;
    std::chrono::milliseconds timeout_{0};
    traffic_counters traffic_{};
    std::string name_;                   // the caller's communicator, for messages
    std::unique_ptr<buffers> io_;        // null once a timed wait gave up on them
    std::unique_ptr<abandoned> pending_; // that wait's requests and buffers
    std::string failure_;                // why this communicator is broken
    failure failure_kind_ = failure::none;
};

static_assert(byte_communicator<mpi>);

// A replica's own group and its shard's cross-replica group (comm/replicas.hpp), split
// from `world` (collective over it). Every rank must pass the same ranks_per_replica (or
// every rank throws invalid_argument); timeout as for comm::mpi. Run trickle over
// `across`, with the shard's seed (layout.shard_seed), and the trainer's data or model
// parallelism over `within`.
struct replica_comms {
    replica_layout layout;
    mpi within;
    mpi across;
};

inline replica_comms split_replicas(MPI_Comm world, int ranks_per_replica,
                                    std::chrono::milliseconds timeout = std::chrono::milliseconds::zero()) {
    int rank = 0, size = 0;
    TRICKLE_MPI_CHECK(MPI_Comm_rank(world, &rank));
    TRICKLE_MPI_CHECK(MPI_Comm_size(world, &size));
    int spread[2] = {ranks_per_replica, -ranks_per_replica};
    TRICKLE_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, spread, 2, MPI_INT, MPI_MAX, world));
    require(spread[0] == -spread[1], "comm::split_replicas: the ranks passed different ranks_per_replica (from ",
            -spread[1], " to ", spread[0], ")");
    const replica_layout layout(rank, size, ranks_per_replica);
    MPI_Comm w = MPI_COMM_NULL, a = MPI_COMM_NULL;
    TRICKLE_MPI_CHECK(MPI_Comm_split(world, layout.within_color(), layout.within_key(), &w));
    const auto free_both = [&] {
        if (w != MPI_COMM_NULL) MPI_Comm_free(&w);
        if (a != MPI_COMM_NULL) MPI_Comm_free(&a);
    };
    try {
        TRICKLE_MPI_CHECK(MPI_Comm_split(world, layout.across_color(), layout.across_key(), &a));
        replica_comms out{layout, mpi(w, INT_MAX, timeout), mpi(a, INT_MAX, timeout)};
        free_both();
        return out;
    } catch (...) {
        free_both();
        throw;
    }
}

} // namespace comm

TRICKLE_NAMESPACE_END

#endif // TRICKLE_HAS_MPI
