// Quick start under MPI: the quick start's worker as one process per worker.
//   mpirun -np 4 quickstart_mpi
// prints the same result line as quickstart (4 threads), to fp32 rounding.
#include "worker.hpp"

#include <trickle/comm/mpi.hpp>

#include <mpi.h>

#include <cstdio>

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    int status = 0;
    {
        trickle::comm::mpi comm(MPI_COMM_WORLD);
        const worker_result r = quickstart_worker(comm, 300);
        if (comm.rank() == 0) {
            double checksum = 0;
            for (float x : r.weight) checksum += x;
            std::printf("SPARTA over MPI, %d processes: reduction %.0fx\n", comm.size(), r.stats.reduction());
            std::printf("result: rank0_checksum=%.6e bytes_sent=%llu\n", checksum,
                        static_cast<unsigned long long>(r.stats.total.bytes_sent));
        }
        status = r.stats.exchanges == 300 ? 0 : 1;
    }
    MPI_Finalize();
    return status;
}
