// Helpers shared by the MPI tests: whole-world gathers that bypass the communicator under test,
// test values and exception messages.
#pragma once

#include <trickle/comm/async.hpp>
#include <trickle/comm/mpi.hpp>

#include <mpi.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

namespace trickle_mpi_test {

// What constructing comm::mpi before MPI_Init threw (set by main).
extern std::string error_before_init;

inline int world_rank() {
    int r = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    return r;
}

inline int world_size() {
    int n = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    return n;
}

// Every rank's vector (all of the same size), concatenated in rank order, on every rank.
template <class T>
std::vector<T> gather_all(const std::vector<T>& mine) {
    std::vector<T> all(mine.size() * static_cast<std::size_t>(world_size()));
    MPI_Allgather(mine.data(), static_cast<int>(mine.size() * sizeof(T)), MPI_BYTE, all.data(),
                  static_cast<int>(mine.size() * sizeof(T)), MPI_BYTE, MPI_COMM_WORLD);
    return all;
}

// Rank 0's vector on every rank; the others pass their size in `v` and receive into it.
template <class T>
void broadcast_from_0(std::vector<T>& v) {
    std::uint64_t n = v.size();
    MPI_Bcast(&n, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
    v.resize(n);
    if (n != 0) MPI_Bcast(v.data(), static_cast<int>(n * sizeof(T)), MPI_BYTE, 0, MPI_COMM_WORLD);
}

// Whether every rank passed true.
inline bool all_ranks(bool mine) {
    int in = mine ? 1 : 0, out = 0;
    MPI_Allreduce(&in, &out, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    return out == 1;
}

// An arbitrary float of rank r at position i (sums of these round).
inline float wavy(int r, std::size_t i) {
    return static_cast<float>(std::sin(0.37 * static_cast<double>(i) + 1.3 * r) * (1.0 + r) + 1e-3 * r);
}

// An integer-valued float: sums of a few are exact in any order.
inline float whole(int r, std::size_t i) { return static_cast<float>(r * 1000 + static_cast<int>(i % 977)); }

// The message of the E that fn throws; "(no exception)" or "(other) ..." otherwise.
template <class E, class Fn>
std::string thrown(Fn&& fn) {
    try {
        fn();
    } catch (const E& e) {
        return e.what();
    } catch (const std::exception& e) {
        return std::string("(other) ") + e.what();
    }
    return "(no exception)";
}

inline bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// Whether v is bitwise the same on every rank.
inline bool same_bits_everywhere(const std::vector<float>& v) {
    const auto all = gather_all(v);
    bool same = true;
    for (int q = 0; q < world_size(); ++q)
        same = same && (v.empty() || std::memcmp(all.data() + static_cast<std::size_t>(q) * v.size(), v.data(),
                                                 v.size() * sizeof(float)) == 0);
    return same;
}

// A good all-reduce after a failed call: the communicator is still in step.
template <class Comm>
bool still_works(Comm& c) {
    std::vector<float> v(5, 1.0f);
    c.all_reduce_sum(v.data(), v.size());
    bool ok = true;
    for (float x : v) ok = ok && x == static_cast<float>(c.size());
    return ok;
}

// Whether the same calls give the same bits and bytes overlapped through comm::async as
// blocking on the communicator itself.
struct async_against_blocking {
    bool same_sums = false, same_shifted = false, same_traffic = false;
};

// On c, an all-reduce of sum_n wavy values and a ring shift of shift_n (rank r sends
// wavy(r + shift_seed, i)), first blocking and then overlapped through comm::async;
// meanwhile() runs while both overlapped calls are in flight.
template <class Fn>
async_against_blocking run_async_against_blocking(trickle::comm::mpi& c, std::size_t sum_n, std::size_t shift_n,
                                                  int shift_seed, Fn&& meanwhile) {
    const int N = c.size(), r = c.rank();
    std::vector<float> a(sum_n), b(sum_n), sa(shift_n), sb(shift_n), ra(shift_n), rb(shift_n);
    for (std::size_t i = 0; i < a.size(); ++i) a[i] = b[i] = wavy(r, i);
    for (std::size_t i = 0; i < sa.size(); ++i) sa[i] = sb[i] = wavy(r + shift_seed, i);
    const trickle::traffic_counters t0 = c.traffic();
    c.all_reduce_sum(a.data(), a.size());
    c.send_recv(sa.data(), sa.size(), (r + 1) % N, ra.data(), ra.size(), (r + N - 1) % N);
    const trickle::traffic_counters blocking = c.traffic() - t0;
    trickle::traffic_counters overlapped;
    {
        trickle::comm::async<trickle::comm::mpi> ac(c);
        const trickle::traffic_counters t1 = ac.traffic();
        trickle::comm::request q1 = ac.start_all_reduce_sum(b.data(), b.size());
        trickle::comm::request q2 =
            ac.start_send_recv(sb.data(), sb.size(), (r + 1) % N, rb.data(), rb.size(), (r + N - 1) % N);
        meanwhile();
        q1.wait();
        q2.wait();
        overlapped = ac.traffic() - t1;
    }
    async_against_blocking o;
    o.same_sums = std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
    o.same_shifted = std::memcmp(ra.data(), rb.data(), ra.size() * sizeof(float)) == 0;
    o.same_traffic = overlapped == blocking;
    return o;
}

} // namespace trickle_mpi_test
