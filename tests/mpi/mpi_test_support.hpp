// Helpers shared by the MPI tests: whole-world gathers that bypass the communicator under test.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <cstdint>
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

} // namespace trickle_mpi_test
