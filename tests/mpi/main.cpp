// The doctest entry point of the MPI tests: every rank runs every test case between
// MPI_Init and MPI_Finalize; only rank 0 prints the summary, every rank prints its own
// failures, and every rank exits nonzero when any rank failed.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <trickle/comm/mpi.hpp>

#include "mpi_test_support.hpp"

#include <mpi.h>

#include <cstdio>
#include <exception>

std::string trickle_mpi_test::error_before_init;

int main(int argc, char** argv) {
    // Constructing before MPI_Init must fail cleanly; checked by a test case later.
    try {
        trickle::comm::mpi early;
        trickle_mpi_test::error_before_init = "(no exception)";
    } catch (const trickle::invalid_argument& e) {
        trickle_mpi_test::error_before_init = e.what();
    } catch (const std::exception& e) {
        trickle_mpi_test::error_before_init = std::string("(wrong exception type) ") + e.what();
    }

    // SERIALIZED: comm::async's progress thread calls MPI (one thread at a time); rank 0
    // also runs comm::local reference workers on threads that never call MPI.
    int provided = MPI_THREAD_SINGLE;
    if (MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS) {
        std::fprintf(stderr, "MPI_Init_thread failed\n");
        return 1;
    }
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);

    doctest::Context context;
    context.applyCommandLine(argc, argv);
    // Ranks other than 0 report only their failures, so the output holds one summary.
    if (rank != 0) context.setOption("minimal", true);
    int result = context.run();
    if (context.shouldExit()) {
        MPI_Finalize();
        return result;
    }
    int worst = 0;
    MPI_Allreduce(&result, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (rank == 0 && worst != 0 && result == 0) std::printf("[rank 0] another rank failed: see its failures above\n");
    MPI_Finalize();
    return worst;
}
