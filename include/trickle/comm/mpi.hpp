// trickle/comm/mpi.hpp: comm::mpi, one worker per MPI process over host memory.
//
// Declares nothing unless TRICKLE_HAS_MPI is 1 (link the trickle::mpi CMake target).
#pragma once

#include <trickle/config.hpp>

#if TRICKLE_HAS_MPI

#include <trickle/comm/communicator.hpp>
#include <trickle/core/memory_space.hpp>
#include <trickle/error.hpp>

#include <mpi.h>

#include <array>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <string>
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
class mpi {
public:
    using memory_space = host_space;

    // max_message_elements bounds the element count of one MPI call (MPI counts are
    // int); larger transfers are split. It must be the same on every rank.
    explicit mpi(MPI_Comm comm = MPI_COMM_WORLD, std::size_t max_message_elements = INT_MAX) {
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

        TRICKLE_MPI_CHECK(MPI_Comm_dup(comm, &comm_));
        try {
            TRICKLE_MPI_CHECK(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));
            TRICKLE_MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
            TRICKLE_MPI_CHECK(MPI_Comm_size(comm_, &size_));
            // Ranks that split transfers differently would pair unrelated messages, so
            // the bound is agreed here, where every rank can still throw together.
            const auto s = spread(std::array<std::uint64_t, 1>{max_message_elements});
            require(s[0].lo == s[0].hi, "comm::mpi: max_message_elements differs between ranks (from ", s[0].lo,
                    " to ", s[0].hi, ")");
            require(s[0].lo >= 1 && s[0].lo <= static_cast<std::uint64_t>(INT_MAX),
                    "comm::mpi: max_message_elements must be in [1, ", INT_MAX, "], got ", s[0].lo);
            max_elements_ = max_message_elements;
        } catch (...) {
            MPI_Comm_free(&comm_);
            throw;
        }
    }

    mpi(const mpi&) = delete;
    mpi& operator=(const mpi&) = delete;
    mpi(mpi&& o) noexcept
        : comm_(std::exchange(o.comm_, MPI_COMM_NULL)), rank_(o.rank_), size_(o.size_),
          max_elements_(o.max_elements_), traffic_(o.traffic_), scratch_(std::move(o.scratch_)),
          counts_(std::move(o.counts_)), displs_(std::move(o.displs_)) {}
    mpi& operator=(mpi&& o) noexcept {
        if (this != &o) {
            release();
            comm_ = std::exchange(o.comm_, MPI_COMM_NULL);
            rank_ = o.rank_;
            size_ = o.size_;
            max_elements_ = o.max_elements_;
            traffic_ = o.traffic_;
            scratch_ = std::move(o.scratch_);
            counts_ = std::move(o.counts_);
            displs_ = std::move(o.displs_);
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
    void all_reduce_sum(float* data, std::size_t n) {
        check_usable("all_reduce_sum");
        const auto s = spread(std::array<std::uint64_t, 2>{n, null_flag(n != 0 && data == nullptr)});
        if (s[0].lo != s[0].hi)
            throw comm_error(detail::concat("comm::mpi all_reduce_sum: ranks passed different element counts (from ",
                                            s[0].lo, " to ", s[0].hi, "); rank ", rank_, " passed ", n));
        check_null("all_reduce_sum", s[1].hi);
        // Segments are a multiple of size_ elements, so the chunk sizes summed over all
        // segments equal chunk_size(n) and the bytes moved match all_reduce_bytes(n).
        const std::size_t N = static_cast<std::size_t>(size_);
        const std::size_t segment = max_elements_ >= N ? max_elements_ / N * N : N;
        counts_.resize(N);
        displs_.resize(N);
        for (std::size_t off = 0; off < n; off += segment) {
            const std::size_t len = n - off < segment ? n - off : segment;
            for (int r = 0; r < size_; ++r) {
                counts_[static_cast<std::size_t>(r)] = static_cast<int>(detail::chunk_size(len, size_, r));
                displs_[static_cast<std::size_t>(r)] = static_cast<int>(detail::chunk_begin(len, size_, r));
            }
            const int mine = counts_[static_cast<std::size_t>(rank_)];
            scratch_.resize(static_cast<std::size_t>(mine));
            TRICKLE_MPI_CHECK(
                MPI_Reduce_scatter(data + off, scratch_.data(), counts_.data(), MPI_FLOAT, MPI_SUM, comm_));
            TRICKLE_MPI_CHECK(MPI_Allgatherv(scratch_.data(), mine, MPI_FLOAT, data + off, counts_.data(),
                                             displs_.data(), MPI_FLOAT, comm_));
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
    // and MPI_Alltoall of MPI_BYTE, with the checks above.
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
    void send_recv(const float* send, std::size_t n, int dst, float* recv, std::size_t m, int src) {
        check_usable("send_recv");
        const auto mine = detail::send_recv_entry(send, n, dst, recv, m, src);
        constexpr auto fields = detail::send_recv_fields;
        std::vector<std::uint64_t> all(fields * static_cast<std::size_t>(size_));
        TRICKLE_MPI_CHECK(MPI_Allgather(mine.data(), static_cast<int>(fields), MPI_UINT64_T, all.data(),
                                        static_cast<int>(fields), MPI_UINT64_T, comm_));
        detail::check_send_recv_pattern(all.data(), size_, "comm::mpi");
        // Pieces of at most max_elements_; a side with nothing left talks to MPI_PROC_NULL,
        // which matches the peer's piece count because pairs carry equal counts.
        for (std::size_t off = 0; off < n || off < m; off += max_elements_) {
            const int ns = off < n ? static_cast<int>(n - off < max_elements_ ? n - off : max_elements_) : 0;
            const int mr = off < m ? static_cast<int>(m - off < max_elements_ ? m - off : max_elements_) : 0;
            TRICKLE_MPI_CHECK(MPI_Sendrecv(ns ? send + off : nullptr, ns, MPI_FLOAT, ns ? dst : MPI_PROC_NULL, tag,
                                           mr ? recv + off : nullptr, mr, MPI_FLOAT, mr ? src : MPI_PROC_NULL, tag,
                                           comm_, MPI_STATUS_IGNORE));
        }
        traffic_.count_send_recv(n * sizeof(float), m * sizeof(float));
    }

    // data on every rank = data on root. Every rank must pass the same n and root.
    void broadcast(float* data, std::size_t n, int root) {
        check_usable("broadcast");
        const auto s = spread(std::array<std::uint64_t, 3>{
            n, static_cast<std::uint64_t>(static_cast<std::int64_t>(root)), null_flag(n != 0 && data == nullptr)});
        if (s[0].lo != s[0].hi || s[1].lo != s[1].hi)
            throw comm_error(detail::concat("comm::mpi broadcast: ranks passed different sizes or roots (sizes from ",
                                            s[0].lo, " to ", s[0].hi, "); rank ", rank_, " passed ", n,
                                            " elements from root ", root));
        require(root >= 0 && root < size_, "comm::mpi broadcast: root ", root, " out of range [0, ", size_, ")");
        check_null("broadcast", s[2].hi);
        for (std::size_t off = 0; off < n; off += max_elements_) {
            const int len = static_cast<int>(n - off < max_elements_ ? n - off : max_elements_);
            TRICKLE_MPI_CHECK(MPI_Bcast(data + off, len, MPI_FLOAT, root, comm_));
        }
        traffic_.count_broadcast(n * sizeof(float), size_, rank_ == root);
    }

    void barrier() {
        check_usable("barrier");
        TRICKLE_MPI_CHECK(MPI_Barrier(comm_));
    }

private:
    static constexpr int tag = 0x7121; // on trickle's private communicator, so any value works

    struct range {
        std::uint64_t lo, hi;
    };

    // The minimum and maximum of each value over all ranks, in one MPI_Allreduce(MAX) of
    // the values and their complements (max of ~v is ~min of v).
    template <std::size_t K>
    std::array<range, K> spread(const std::array<std::uint64_t, K>& values) const {
        std::array<std::uint64_t, 2 * K> in{}, out{};
        for (std::size_t i = 0; i < K; ++i) {
            in[i] = values[i];
            in[K + i] = ~values[i];
        }
        TRICKLE_MPI_CHECK(MPI_Allreduce(in.data(), out.data(), static_cast<int>(2 * K), MPI_UINT64_T, MPI_MAX, comm_));
        std::array<range, K> r{};
        for (std::size_t i = 0; i < K; ++i) r[i] = {~out[K + i], out[i]};
        return r;
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
        const auto s =
            spread(std::array<std::uint64_t, 2>{bytes, null_flag(bytes != 0 && (send == nullptr || recv == nullptr))});
        if (s[0].lo != s[0].hi)
            throw comm_error(detail::concat("comm::mpi ", op, ": ranks passed different sizes (from ", s[0].lo, " to ",
                                            s[0].hi, " bytes); rank ", rank_, " passed ", bytes));
        check_null(op, s[1].hi);
        require(bytes <= static_cast<std::size_t>(INT_MAX), "comm::mpi ", op, ": ", bytes,
                " bytes per rank is more than MPI's limit of ", INT_MAX);
        const int b = static_cast<int>(bytes);
        if (bytes != 0) {
            if (to_all)
                TRICKLE_MPI_CHECK(MPI_Alltoall(send, b, MPI_BYTE, recv, b, MPI_BYTE, comm_));
            else
                TRICKLE_MPI_CHECK(MPI_Allgather(send, b, MPI_BYTE, recv, b, MPI_BYTE, comm_));
        }
        if (to_all)
            traffic_.count_all_to_all(bytes, size_);
        else
            traffic_.count_all_gather(bytes, size_);
    }

    void check_usable(const char* op) const {
        if (comm_ == MPI_COMM_NULL)
            throw invalid_argument(detail::concat("comm::mpi ", op, ": this communicator was moved from"));
    }

    void release() noexcept {
        if (comm_ == MPI_COMM_NULL) return;
        // After MPI_Finalize nothing can be freed; the process is ending its MPI life anyway.
        int finalized = 1;
        if (MPI_Finalized(&finalized) == MPI_SUCCESS && finalized == 0) MPI_Comm_free(&comm_);
        comm_ = MPI_COMM_NULL;
    }

    MPI_Comm comm_ = MPI_COMM_NULL;
    int rank_ = 0;
    int size_ = 1;
    std::size_t max_elements_ = INT_MAX;
    traffic_counters traffic_{};
    std::vector<float> scratch_;
    std::vector<int> counts_, displs_;
};

static_assert(byte_communicator<mpi>);

} // namespace comm

TRICKLE_NAMESPACE_END

#endif // TRICKLE_HAS_MPI
