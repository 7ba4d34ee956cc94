// comm::mpi with a timeout and every rank healthy: refused timeouts, the untimed results and
// byte counts, comm::local's bits for the sums, argument checks, moves and comm::async.
// A rank that stops answering is tested by mpi_silent_peer.cpp, a program of its own.
#include <trickle/comm/local.hpp>
#include <trickle/comm/mpi.hpp>

#include "mpi_test_support.hpp"
#include "test_support.hpp"

#include <doctest/doctest.h>

#include <mpi.h>

#include <chrono>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

using namespace trickle;
using namespace std::chrono_literals;
using trickle_mpi_test::contains;
using trickle_mpi_test::same_bits_everywhere;
using trickle_mpi_test::still_works;
using trickle_mpi_test::thrown;
using trickle_mpi_test::wavy;
using trickle_mpi_test::whole;
using trickle_test::bitwise_equal;

namespace {

const std::size_t sum_sizes[] = {0, 1, 3, 5, 1000, 4099};

// Everything one rank sees from a fixed sequence of every operation.
struct record {
    std::vector<std::vector<float>> wavy, whole; // one per sum_sizes entry
    std::vector<float> shifted, broadcast;
    std::vector<unsigned char> gathered, all_gathered, all_to_all;
    traffic_counters traffic{};
};

template <class Comm>
record run_all(Comm& c) {
    const int N = c.size(), r = c.rank();
    record o;
    for (std::size_t n : sum_sizes) {
        std::vector<float> w(n), h(n);
        for (std::size_t i = 0; i < n; ++i) {
            w[i] = wavy(r, i);
            h[i] = whole(r, i);
        }
        c.all_reduce_sum(w.data(), n);
        c.all_reduce_sum(h.data(), n);
        o.wavy.push_back(std::move(w));
        o.whole.push_back(std::move(h));
    }
    // A ring shift with a different count on each rank (rank r sends r + 3 floats).
    const auto sends = static_cast<std::size_t>(r + 3), gets = static_cast<std::size_t>((r + N - 1) % N + 3);
    std::vector<float> out(sends);
    for (std::size_t i = 0; i < sends; ++i) out[i] = wavy(r + 7, i);
    o.shifted.assign(gets, -1.0f);
    c.send_recv(out.data(), sends, (r + 1) % N, o.shifted.data(), gets, (r + N - 1) % N);
    for (int root = 0; root < N; ++root) {
        std::vector<float> b(11);
        for (std::size_t i = 0; i < b.size(); ++i) b[i] = wavy(r, i + 50);
        c.broadcast(b.data(), b.size(), root);
        o.broadcast.insert(o.broadcast.end(), b.begin(), b.end());
    }
    const std::size_t B = 9;
    std::vector<unsigned char> mine(B * static_cast<std::size_t>(N));
    for (std::size_t i = 0; i < mine.size(); ++i) mine[i] = static_cast<unsigned char>(r * 31 + i);
    o.gathered.resize(B * static_cast<std::size_t>(N));
    o.all_gathered.resize(B * static_cast<std::size_t>(N));
    o.all_to_all.resize(B * static_cast<std::size_t>(N));
    c.all_gather_bytes(mine.data(), o.gathered.data(), B);
    c.all_gather(mine.data(), o.all_gathered.data(), B);
    c.all_to_all(mine.data(), o.all_to_all.data(), B);
    c.barrier();
    o.traffic = c.traffic();
    return o;
}

} // namespace

TEST_CASE("mpi timeout: negative or unequal timeouts are refused on every rank; set_timeout agrees the same way") {
    const int r = trickle_mpi_test::world_rank(), N = trickle_mpi_test::world_size();
    std::string msg = thrown<invalid_argument>([] { comm::mpi c(MPI_COMM_WORLD, INT_MAX, -5ms); });
    CHECK(contains(msg, "comm::mpi: the timeout must be positive, or zero for none"));
    CHECK(contains(msg, "this rank passed -5 ms"));
    // Refused on every rank, even where the rank's own value was fine.
    msg = thrown<invalid_argument>([&] { comm::mpi c(MPI_COMM_WORLD, INT_MAX, r == N - 1 ? -1ms : 1000ms); });
    CHECK(contains(msg, "rank " + std::to_string(N - 1) + " passed a negative one"));
    if (N > 1) {
        msg = thrown<invalid_argument>(
            [&] { comm::mpi c(MPI_COMM_WORLD, INT_MAX, std::chrono::milliseconds(1000 + r)); });
        CHECK(contains(msg, "the timeout differs between ranks (from 1000 to " + std::to_string(1000 + N - 1) + " ms)"));
        // On for some ranks and off for others: nonblocking and blocking calls never match.
        msg = thrown<invalid_argument>([&] { comm::mpi c(MPI_COMM_WORLD, INT_MAX, r == 0 ? 0ms : 1000ms); });
        CHECK(contains(msg, "the timeout differs between ranks"));
    }

    comm::mpi plain;
    CHECK(plain.timeout() == 0ms);
    comm::mpi c(MPI_COMM_WORLD, INT_MAX, 1500ms);
    CHECK(c.timeout() == 1500ms);
    CHECK(!c.broken());
    msg = thrown<invalid_argument>([&] { c.set_timeout(-1ms); });
    CHECK(contains(msg, "comm::mpi set_timeout: the timeout must be positive"));
    CHECK(c.timeout() == 1500ms);
    msg = thrown<invalid_argument>([&] { c.set_timeout(std::chrono::milliseconds(r == 0 ? 700 : 800)); });
    if (N > 1) CHECK(contains(msg, "comm::mpi set_timeout: the timeout differs between ranks"));
    CHECK(c.timeout() == (N > 1 ? 1500ms : 700ms));
    CHECK(!c.broken());
    CHECK(still_works(c));
    c.set_timeout(0ms); // off: blocking calls again
    CHECK(c.timeout() == 0ms);
    CHECK(still_works(c));
    c.set_timeout(2s); // and on again, from the blocking mode
    CHECK(c.timeout() == 2000ms);
    CHECK(still_works(c));
}

TEST_CASE("mpi timeout: healthy ranks get the untimed results and byte counts; sums carry comm::local's bits") {
    const int N = trickle_mpi_test::world_size(), r = trickle_mpi_test::world_rank();
    INFO("rank ", r);
    // INT_MAX: one piece per transfer; 7: every transfer split into pieces (and sums into
    // segments of 4 elements with 4 ranks).
    for (std::size_t max_elements : {static_cast<std::size_t>(INT_MAX), std::size_t{7}}) {
        INFO("max_message_elements ", max_elements);
        comm::mpi timed(MPI_COMM_WORLD, max_elements, 5s), untimed(MPI_COMM_WORLD, max_elements);
        const record t = run_all(timed);
        const record u = run_all(untimed);
        CHECK(!timed.broken());

        // The data movements are copies: the same bits as the blocking calls.
        CHECK(bitwise_equal(t.shifted, u.shifted));
        CHECK(bitwise_equal(t.broadcast, u.broadcast));
        CHECK(t.gathered == u.gathered);
        CHECK(t.all_gathered == u.all_gathered);
        CHECK(t.all_to_all == u.all_to_all);
        CHECK(t.traffic == u.traffic);

        // Sums: exact ones equal bit for bit; rounded ones identical on every rank and
        // within rounding of the untimed ones.
        for (std::size_t k = 0; k < std::size(sum_sizes); ++k) {
            INFO("n ", sum_sizes[k]);
            CHECK(bitwise_equal(t.whole[k], u.whole[k]));
            CHECK(same_bits_everywhere(t.wavy[k]));
            std::size_t far = 0;
            for (std::size_t i = 0; i < t.wavy[k].size(); ++i) {
                const float a = t.wavy[k][i], b = u.wavy[k][i];
                if (std::fabs(a - b) > 4e-7f * static_cast<float>(N) * (std::fabs(b) + 4.0f)) ++far;
            }
            CHECK(far == 0);
        }

        // comm::local adds in rank order; so do the timed sums: the same bits. Rank 0 plays
        // every worker with threads and sends the reference to everyone.
        std::vector<float> reference;
        if (r == 0) {
            std::vector<record> local(static_cast<std::size_t>(N));
            comm::run_local(N, [&](comm::local& l) { local[static_cast<std::size_t>(l.rank())] = run_all(l); });
            for (const auto& o : local)
                for (const auto& w : o.wavy) reference.insert(reference.end(), w.begin(), w.end());
        }
        trickle_mpi_test::broadcast_from_0(reference);
        std::size_t per_rank = 0;
        for (std::size_t n : sum_sizes) per_rank += n;
        REQUIRE(reference.size() == per_rank * static_cast<std::size_t>(N));
        std::vector<float> mine;
        for (const auto& w : t.wavy) mine.insert(mine.end(), w.begin(), w.end());
        CHECK(std::memcmp(mine.data(), reference.data() + static_cast<std::size_t>(r) * per_rank,
                          per_rank * sizeof(float)) == 0);
    }
}

TEST_CASE("mpi timeout: mismatched arguments still throw on every rank and leave the timed communicator usable") {
    comm::mpi c(MPI_COMM_WORLD, INT_MAX, 5s);
    const int N = c.size(), r = c.rank();
    std::vector<float> v(static_cast<std::size_t>(10 + r), 1.0f);
    const std::vector<float> before = v;
    const traffic_counters t0 = c.traffic();
    std::string msg = thrown<comm_error>([&] { c.all_reduce_sum(v.data(), v.size()); });
    if (N > 1) {
        CHECK(contains(msg, "comm::mpi all_reduce_sum: ranks passed different element counts"));
        CHECK(v == before);
    }
    msg = thrown<invalid_argument>([&] { c.broadcast(v.data(), 4, N); });
    CHECK(contains(msg, "out of range"));
    msg = thrown<invalid_argument>([&] { c.all_gather_bytes(r == 0 ? nullptr : v.data(), v.data(), 4); });
    CHECK(contains(msg, "rank 0 passed a null pointer"));
    if (N > 1) {
        // Everyone sends to rank 0 and receives from itself: the pairings do not match.
        msg = thrown<comm_error>([&] { c.send_recv(v.data(), 2, 0, v.data() + 4, 2, r); });
        CHECK(contains(msg, "do not pair up"));
    }
    CHECK(c.traffic() == t0);
    CHECK(!c.broken());
    CHECK(still_works(c));
}

TEST_CASE("mpi timeout: moves carry the timeout; the moved-from communicator refuses work") {
    comm::mpi a(MPI_COMM_WORLD, INT_MAX, 3s);
    comm::mpi b(std::move(a));
    CHECK(b.timeout() == 3000ms);
    CHECK(still_works(b));
    CHECK(contains(thrown<invalid_argument>([&] { a.barrier(); }), "moved from"));
    CHECK(contains(thrown<invalid_argument>([&] { a.set_timeout(1s); }), "moved from"));
    comm::mpi c;
    c = std::move(b);
    CHECK(c.timeout() == 3000ms);
    CHECK(still_works(c));
}

TEST_CASE("mpi timeout through comm::async: overlapped operations give the timed blocking bits and bytes") {
    comm::mpi c(MPI_COMM_WORLD, INT_MAX, 5s);
    if (!c.thread_level_ok()) {
        MESSAGE("skipped: MPI was initialized below MPI_THREAD_SERIALIZED");
        return;
    }
    const auto o = trickle_mpi_test::run_async_against_blocking(c, 2001, 33, 3, [] {});
    CHECK(o.same_sums);
    CHECK(o.same_shifted);
    CHECK(o.same_traffic);
    CHECK(!c.broken());
}
