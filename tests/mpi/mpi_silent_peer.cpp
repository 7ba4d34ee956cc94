// A rank that stops answering, under mpirun (4 ranks in ctest). Every rank builds comm::mpi
// with a 1500 ms timeout; the last rank then sleeps 5 s instead of entering the operation
// named on the command line (all_reduce_sum, broadcast or barrier). Every other rank must
// throw trickle::peer_failure from it within [timeout, timeout + 3 s], with a message that
// names the operation, the timeout and the communicator, and must throw peer_failure again,
// at once, from any later call.
//
// Ending cleanly. A survivor's request stays pending after the timeout (MPI cannot cancel a
// collective), and MPI_Finalize with a collective that can never complete is erroneous and
// may hang. So the silent rank, once awake, joins exactly the operation the survivors left
// pending, and every request completes:
//   - all_reduce_sum and broadcast: the survivors gave up in the argument agreement (one
//     MPI_Iallreduce), which cannot finish without the silent rank. It calls the same
//     operation with a different element count: its agreement matches theirs and completes
//     it, and since the counts differ it throws comm_error before posting anything else.
//     (With the same count it would go on to a transfer that nobody else posts, time out in
//     turn, and leave that one pending for ever.)
//   - barrier: the survivors' MPI_Ibarrier is pending; the silent rank's barrier matches it.
// Then all ranks exchange their verdicts over MPI_COMM_WORLD (a blocking call, which also
// lets MPI finish the survivors' pending request), destroy the communicator and finalize.
// Every rank exits 0 when every verdict passed, 1 otherwise.
#include <trickle/comm/mpi.hpp>

#include <mpi.h>

#include <chrono>
#include <climits>
#include <cstdio>
#include <exception>
#include <string>
#include <thread>
#include <vector>

namespace {

using clock_type = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr milliseconds timeout{1500};
constexpr milliseconds slack{3000};       // how late after the timeout a survivor may report
constexpr milliseconds silence{5000};     // longer than timeout + slack
constexpr milliseconds at_once{1000};     // a broken communicator's refusal (no MPI involved)

long long ms_since(clock_type::time_point t0) {
    return std::chrono::duration_cast<milliseconds>(clock_type::now() - t0).count();
}

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// The operation under test, as every rank calls it; `count` elements where it takes any.
void run(const std::string& op, trickle::comm::mpi& c, std::vector<float>& data, std::size_t count) {
    if (op == "all_reduce_sum")
        c.all_reduce_sum(data.data(), count);
    else if (op == "broadcast")
        c.broadcast(data.data(), count, 0);
    else
        c.barrier();
}

// A survivor: the call must throw peer_failure in the window, and the next one at once.
std::string survivor(const std::string& op, trickle::comm::mpi& c) {
    std::vector<float> data(64, 1.0f);
    const auto t0 = clock_type::now();
    try {
        run(op, c, data, data.size());
        return "FAIL: the operation returned although a peer never entered it";
    } catch (const trickle::peer_failure& e) {
        const long long took = ms_since(t0);
        const std::string what = e.what();
        std::string verdict = "peer_failure after " + std::to_string(took) + " ms";
        if (took < timeout.count() || took > (timeout + slack).count())
            return "FAIL: " + verdict + ", outside [" + std::to_string(timeout.count()) + ", " +
                   std::to_string((timeout + slack).count()) + "] ms: " + what;
        for (const std::string& part : {"comm::mpi " + op + ": no answer from the peers within 1500 ms",
                                        std::string("on MPI_COMM_WORLD"), std::string("Without ULFM"),
                                        std::string("MPI_Abort")})
            if (!has(what, part)) return "FAIL: the message lacks '" + part + "': " + what;
        if (!c.broken()) return "FAIL: " + verdict + " but broken() is false";
        const auto t1 = clock_type::now();
        try {
            c.all_reduce_sum(data.data(), data.size());
            return "FAIL: a call after the failure returned";
        } catch (const trickle::peer_failure& again) {
            if (ms_since(t1) > at_once.count()) return "FAIL: the call after the failure waited";
            if (!has(again.what(), "failed earlier and cannot be used again"))
                return std::string("FAIL: unexpected message after the failure: ") + again.what();
        }
        return "ok: " + verdict + ": " + what;
    } catch (const std::exception& e) {
        return std::string("FAIL: wrong exception after ") + std::to_string(ms_since(t0)) + " ms: " + e.what();
    }
}

// The silent rank: sleeps through the survivors' timeout, then joins what they left pending.
std::string silent(const std::string& op, trickle::comm::mpi& c) {
    std::this_thread::sleep_for(silence);
    std::vector<float> data(64, 1.0f);
    try {
        run(op, c, data, 1); // a different count: see the comment at the top
        if (op == "barrier") return "ok: slept " + std::to_string(silence.count()) + " ms, then joined the barrier";
        return "FAIL: joining with a different count did not throw";
    } catch (const trickle::peer_failure& e) {
        return std::string("FAIL: the late rank timed out too: ") + e.what();
    } catch (const trickle::comm_error& e) {
        if (op != "barrier" && has(e.what(), "ranks passed different"))
            return "ok: slept " + std::to_string(silence.count()) + " ms, then joined the pending agreement";
        return std::string("FAIL: ") + e.what();
    } catch (const std::exception& e) {
        return std::string("FAIL: ") + e.what();
    }
}

} // namespace

int main(int argc, char** argv) {
    if (MPI_Init(&argc, &argv) != MPI_SUCCESS) {
        std::fprintf(stderr, "MPI_Init failed\n");
        return 1;
    }
    int rank = 0, size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const std::string op = argc > 1 ? argv[1] : "all_reduce_sum";
    std::string verdict;
    if (op != "all_reduce_sum" && op != "broadcast" && op != "barrier") {
        verdict = "FAIL: unknown operation '" + op + "' (all_reduce_sum, broadcast or barrier)";
    } else if (size < 2) {
        verdict = "ok: skipped (needs at least 2 ranks)";
    } else {
        try {
            trickle::comm::mpi c(MPI_COMM_WORLD, INT_MAX, timeout);
            // A healthy timed round first, so that MPI's connection set-up is not timed below.
            std::vector<float> warm(64, 1.0f);
            c.all_reduce_sum(warm.data(), warm.size());
            c.barrier();
            verdict = rank == size - 1 ? silent(op, c) : survivor(op, c);
            // Verdicts are counted below; this blocking call waits for the silent rank (and
            // lets MPI complete the survivors' pending request) before c is destroyed.
            MPI_Barrier(MPI_COMM_WORLD);
        } catch (const std::exception& e) {
            verdict = std::string("FAIL: ") + e.what();
            MPI_Barrier(MPI_COMM_WORLD);
        }
    }
    std::printf("[rank %d] %s: %s\n", rank, op.c_str(), verdict.c_str());
    std::fflush(stdout);
    int failed = verdict.rfind("ok", 0) == 0 ? 0 : 1, any = 0;
    MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (rank == 0) std::printf("%s: %s\n", op.c_str(), any ? "FAILED on some rank" : "passed on every rank");
    MPI_Finalize();
    return any;
}
