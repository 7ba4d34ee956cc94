// trickle/comm/communicator.hpp: the communicator concept and its traffic accounting.
#pragma once

#include <trickle/config.hpp>
#include <trickle/core/memory_space.hpp>
#include <trickle/core/split.hpp>
#include <trickle/error.hpp>

#include <array>

#include <concepts>
#include <cstddef>
#include <cstdint>

TRICKLE_NAMESPACE_BEGIN

// Bytes a worker sent and received through a communicator, counted by the communicator
// itself with the cost model documented for each operation in docs/communicators.md:
//   all_reduce_sum of B bytes over N ranks, rank r owning chunk c_r (ring reduce-scatter +
//     all-gather): sent = received = (B - c_r) + (N - 1) * c_r   (= 2 (N-1)/N * B when N | B);
//     comm::process_group's pipelined ring (large buffers): sent = 2B - c_r - c_{r+1},
//     received = 2B - c_{r-1} - c_r (ring_all_reduce_bytes; the same when N | B)
//   all_gather_bytes of b bytes per rank: sent = received = (N - 1) * b
//   send_recv: sent = the bytes sent, received = the bytes received
//   broadcast of B bytes: the root sends (N - 1) * B, every other rank receives B
//   all_gather of b bytes per rank, all_to_all of b bytes per peer: sent = received = (N - 1) * b
struct traffic_counters {
    std::uint64_t bytes_sent = 0;
    std::uint64_t bytes_received = 0;
    std::uint64_t calls = 0;

    friend traffic_counters operator-(const traffic_counters& a, const traffic_counters& b) {
        return {a.bytes_sent - b.bytes_sent, a.bytes_received - b.bytes_received, a.calls - b.calls};
    }
    friend traffic_counters& operator+=(traffic_counters& a, const traffic_counters& b) {
        a.bytes_sent += b.bytes_sent;
        a.bytes_received += b.bytes_received;
        a.calls += b.calls;
        return a;
    }
    friend bool operator==(const traffic_counters&, const traffic_counters&) = default;

    // One call of each operation, counted by the cost model above (every communicator
    // counts through these, so the model has one home).
    void count_all_reduce(std::uint64_t bytes) {
        bytes_sent += bytes;
        bytes_received += bytes;
        ++calls;
    }
    void count_broadcast(std::uint64_t bytes, int ranks, bool root) {
        if (root)
            bytes_sent += static_cast<std::uint64_t>(ranks - 1) * bytes;
        else
            bytes_received += bytes;
        ++calls;
    }
    void count_all_gather(std::uint64_t bytes_per_rank, int ranks) {
        bytes_sent += static_cast<std::uint64_t>(ranks - 1) * bytes_per_rank;
        bytes_received += static_cast<std::uint64_t>(ranks - 1) * bytes_per_rank;
        ++calls;
    }
    void count_all_to_all(std::uint64_t bytes_per_peer, int ranks) { count_all_gather(bytes_per_peer, ranks); }
    void count_send_recv(std::uint64_t sent, std::uint64_t received) {
        bytes_sent += sent;
        bytes_received += received;
        ++calls;
    }
};

namespace detail {

// chunk_size, chunk_begin: the even split of core/split.hpp.

// Bytes rank r sends (and receives) in an all-reduce of n elements of elem_bytes each.
constexpr std::uint64_t all_reduce_bytes(std::size_t n, std::size_t elem_bytes, int ranks, int r) {
    if (ranks <= 1) return 0;
    const std::uint64_t c = chunk_size(n, ranks, r);
    return ((n - c) + static_cast<std::uint64_t>(ranks - 1) * c) * elem_bytes;
}

// Bytes rank r sends and receives in a ring all-reduce of n elements (a reduce-scatter
// and an all-gather round the ring, rank r sending to r + 1: comm::process_group's
// pipelined ring): it sends every chunk but its own in the first half and every chunk but
// r + 1's in the second, and receives every chunk but r - 1's, then every chunk but its
// own. Equal to all_reduce_bytes when N divides n.
struct sent_received {
    std::uint64_t sent, received;
};
constexpr sent_received ring_all_reduce_bytes(std::size_t n, std::size_t elem_bytes, int ranks, int r) {
    if (ranks <= 1) return {0, 0};
    const auto c = [&](int q) { return static_cast<std::uint64_t>(chunk_size(n, ranks, ((q % ranks) + ranks) % ranks)); };
    const auto twice = 2 * static_cast<std::uint64_t>(n);
    return {(twice - c(r) - c(r + 1)) * elem_bytes, (twice - c(r - 1) - c(r)) * elem_bytes};
}

// The verdict on a send_recv pattern, judged by every rank from the same gathered data
// so that all reach the same one: `all` holds send_recv_fields values per rank (dst, src,
// n, m, and 1 when the rank passed a null pointer with data to move). Throws
// invalid_argument for a peer out of range or a null pointer, comm_error when the sends
// and receives do not pair up (src's dst must be the rank, and src's n the rank's m).
inline constexpr std::size_t send_recv_fields = 5;

inline void check_send_recv_pattern(const std::uint64_t* all, int size, const char* who) {
    const auto field = [&](int r, std::size_t f) { return all[static_cast<std::size_t>(r) * send_recv_fields + f]; };
    const auto N = static_cast<std::uint64_t>(size);
    for (int r = 0; r < size; ++r)
        if (field(r, 0) >= N || field(r, 1) >= N)
            throw invalid_argument(concat(who, " send_recv: rank ", r, " passed a peer out of range (dst ",
                                          static_cast<std::int64_t>(field(r, 0)), ", src ",
                                          static_cast<std::int64_t>(field(r, 1)), ", size ", size, ")"));
    for (int r = 0; r < size; ++r)
        if (field(r, 4) != 0)
            throw invalid_argument(concat(who, " send_recv: rank ", r, " passed a null pointer with a nonzero count"));
    for (int r = 0; r < size; ++r) {
        const int from = static_cast<int>(field(r, 1));
        if (field(from, 0) != static_cast<std::uint64_t>(r) || field(from, 2) != field(r, 3))
            throw comm_error(concat(who, " send_recv: the ranks' sends and receives do not pair up: rank ", r,
                                    " expects ", field(r, 3), " elements from rank ", from, ", which sends ",
                                    field(from, 2), " to rank ", field(from, 0)));
    }
}

// This rank's entry of that pattern.
inline std::array<std::uint64_t, send_recv_fields> send_recv_entry(const float* send, std::size_t n, int dst,
                                                                   float* recv, std::size_t m, int src) {
    return {static_cast<std::uint64_t>(static_cast<std::int64_t>(dst)),
            static_cast<std::uint64_t>(static_cast<std::int64_t>(src)), n, m,
            (n != 0 && send == nullptr) || (m != 0 && recv == nullptr) ? 1u : 0u};
}

} // namespace detail

// A communicator links `size()` workers. Every operation is collective over all ranks
// unless stated, and blocks (host communicators) or is enqueued on the communicator's
// stream (comm::nccl). Data pointers are in memory_space; all_gather_bytes is a
// control-plane operation (configuration agreement, checkpoint checks) on host memory
// with every communicator, and may synchronize.
//   rank(), size()
//   all_reduce_sum(float* data, n)              in place: data = sum over ranks, identical on every rank
//   all_gather_bytes(const void* send, void* recv, b)   recv[r*b .. (r+1)*b) = rank r's send
//   send_recv(const float* send, n, dst, float* recv, m, src)   send to dst, receive from src
//   broadcast(float* data, n, root)
//   barrier()
//   traffic()                                   the counters above
//   synchronize()                               waits until queued work is done (no-op on host)
template <class C>
concept communicator = requires(C& c, const C& cc, float* f, const float* cf, std::size_t n, int peer,
                                void* v, const void* cv) {
    typename C::memory_space;
    requires memory_space<typename C::memory_space>;
    { cc.rank() } -> std::convertible_to<int>;
    { cc.size() } -> std::convertible_to<int>;
    c.all_reduce_sum(f, n);
    c.all_gather_bytes(cv, v, n);
    c.send_recv(cf, n, peer, f, n, peer);
    c.broadcast(f, n, peer);
    c.barrier();
    c.synchronize();
    { cc.traffic() } -> std::convertible_to<traffic_counters>;
};

// Byte collectives on the data plane (optional: the algorithms need them only for
// payloads that cannot be summed by all_reduce_sum, such as encoded or compressed
// values). Pointers are in memory_space, like the data of all_reduce_sum; every rank
// passes the same size, or every rank throws (communicators that check arguments).
//   all_gather(const void* send, void* recv, b)   recv[r*b .. (r+1)*b) = rank r's send
//   all_to_all(const void* send, void* recv, b)   recv[q*b .. (q+1)*b) = rank q's send[r*b .. (r+1)*b)
//                                                  on rank r (each sends N blocks of b bytes)
template <class C>
concept byte_communicator = communicator<C> && requires(C& c, const void* cv, void* v, std::size_t n) {
    c.all_gather(cv, v, n);
    c.all_to_all(cv, v, n);
};

TRICKLE_NAMESPACE_END
