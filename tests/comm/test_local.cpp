// comm::local: in-process collectives, their byte counts and their failure modes.
#include <trickle/comm/local.hpp>

#include "test_support.hpp"

#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <numeric>
#include <thread>
#include <vector>

using namespace trickle;

TEST_CASE("local all_reduce_sum: exact sums, identical bits on every rank, counted bytes") {
    for (int N : {1, 2, 3, 4, 7}) {
        for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{5}, std::size_t{1000}}) {
            std::vector<std::vector<float>> result(static_cast<std::size_t>(N));
            std::vector<traffic_counters> traffic(static_cast<std::size_t>(N));
            comm::run_local(N, [&](comm::local& c) {
                std::vector<float> v(n);
                for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<float>(c.rank() * 1000 + i) * 0.1f;
                c.all_reduce_sum(v.data(), n);
                result[c.rank()] = v;
                traffic[c.rank()] = c.traffic();
            });
            std::uint64_t total_sent = 0;
            for (int r = 0; r < N; ++r) {
                CHECK(trickle_test::bitwise_equal(result[r], result[0]));
                // Same rank-ordered sum as a sequential reference.
                for (std::size_t i = 0; i < n; ++i) {
                    float s = 0.0f * 0;
                    s = static_cast<float>(0 * 1000 + i) * 0.1f;
                    for (int q = 1; q < N; ++q) s += static_cast<float>(q * 1000 + i) * 0.1f;
                    REQUIRE(result[r][i] == s);
                }
                CHECK(traffic[r].bytes_sent == detail::all_reduce_bytes(n, 4, N, r));
                CHECK(traffic[r].bytes_received == traffic[r].bytes_sent);
                CHECK(traffic[r].calls == 1);
                total_sent += traffic[r].bytes_sent;
            }
            // Over all ranks, a ring all-reduce moves exactly 2 (N-1) n elements.
            CHECK(total_sent == 2ull * static_cast<std::uint64_t>(N - 1) * n * 4);
        }
    }
}

TEST_CASE("all_reduce_bytes: the ring formula when N divides n") {
    CHECK(detail::all_reduce_bytes(400, 4, 4, 0) == 2 * 3 * 400 * 4 / 4);
    CHECK(detail::all_reduce_bytes(400, 4, 1, 0) == 0);
    CHECK(detail::chunk_begin(10, 3, 0) == 0);
    CHECK(detail::chunk_begin(10, 3, 1) == 4);
    CHECK(detail::chunk_begin(10, 3, 2) == 7);
    CHECK(detail::chunk_size(10, 3, 0) == 4);
    CHECK(detail::chunk_size(10, 3, 2) == 3);
}

TEST_CASE("local all_reduce_sum: different sizes throw on every rank") {
    const auto errors = trickle_test::run_collect_errors(3, [](comm::local& c) {
        std::vector<float> v(c.rank() == 1 ? 5 : 4, 1.0f);
        const auto before = v;
        try {
            c.all_reduce_sum(v.data(), v.size());
        } catch (...) {
            if (v != before) throw std::logic_error("buffer changed");
            throw;
        }
    });
    for (const auto& e : errors) CHECK(e.find("passed") != std::string::npos);
}

TEST_CASE("local send_recv: a ring shift in both directions") {
    const int N = 5;
    comm::run_local(N, [&](comm::local& c) {
        const int r = c.rank();
        const int right = (r + 1) % N, left = (r + N - 1) % N;
        std::vector<float> mine(3, static_cast<float>(r)), from_left(3), from_right(3);
        c.send_recv(mine.data(), 3, right, from_left.data(), 3, left);
        c.send_recv(mine.data(), 3, left, from_right.data(), 3, right);
        if (from_left[2] != static_cast<float>(left) || from_right[0] != static_cast<float>(right))
            throw std::logic_error("wrong neighbour data");
        if (c.traffic().bytes_sent != 24 || c.traffic().bytes_received != 24) throw std::logic_error("bytes");
    });
    CHECK(true);
}

TEST_CASE("local send_recv: unpaired exchanges throw on every rank") {
    const auto errors = trickle_test::run_collect_errors(3, [](comm::local& c) {
        std::vector<float> a(2), b(2);
        // Everyone sends to rank 0 and receives from rank 1: rank 1 did not send to 1, ...
        c.send_recv(a.data(), 2, 0, b.data(), 2, 1);
    });
    for (const auto& e : errors) CHECK(e.find("do not pair up") != std::string::npos);
    const auto out_of_range = trickle_test::run_collect_errors(1, [](comm::local& c) {
        float x = 0;
        c.send_recv(&x, 1, 3, &x, 1, 0);
    });
    CHECK(out_of_range[0].find("out of range") != std::string::npos);
}

TEST_CASE("local broadcast and all_gather_bytes") {
    comm::run_local(4, [](comm::local& c) {
        std::vector<float> v(6, static_cast<float>(c.rank() + 1));
        c.broadcast(v.data(), v.size(), 2);
        for (float x : v)
            if (x != 3.0f) throw std::logic_error("broadcast");
        const std::uint64_t mine = 100 + static_cast<std::uint64_t>(c.rank());
        std::vector<std::uint64_t> all(4);
        c.all_gather_bytes(&mine, all.data(), sizeof mine);
        for (int r = 0; r < 4; ++r)
            if (all[r] != 100u + static_cast<unsigned>(r)) throw std::logic_error("all_gather");
        const auto t = c.traffic();
        const std::uint64_t bsent = c.rank() == 2 ? 3 * 24 : 0;
        const std::uint64_t brecv = c.rank() == 2 ? 0 : 24;
        if (t.bytes_sent != bsent + 3 * 8 || t.bytes_received != brecv + 3 * 8) throw std::logic_error("bytes");
        c.barrier();
    });
    CHECK(true);
}

TEST_CASE("local all_gather and all_to_all: blocks where their definition puts them, bytes of the cost model") {
    for (int N : {1, 2, 3, 5})
        for (std::size_t bytes : {std::size_t{0}, std::size_t{1}, std::size_t{13}, std::size_t{4096}}) {
            const auto errors = trickle_test::run_collect_errors(N, [&](comm::local& c) {
                const std::string bad = trickle_test::check_byte_collectives(c, bytes);
                if (!bad.empty()) throw std::logic_error(bad);
            });
            for (int r = 0; r < N; ++r) {
                INFO("N = ", N, ", bytes = ", bytes, ", rank ", r);
                CHECK(errors[static_cast<std::size_t>(r)] == std::string());
            }
        }
}

TEST_CASE("local all_gather and all_to_all: different sizes or a null pointer throw on every rank") {
    auto errors = trickle_test::run_collect_errors(3, [](comm::local& c) {
        std::vector<unsigned char> s(30), d(30);
        c.all_to_all(s.data(), d.data(), c.rank() == 1 ? 9 : 10);
    });
    for (const auto& e : errors) CHECK(e == "comm::local all_to_all: ranks passed different sizes");
    errors = trickle_test::run_collect_errors(3, [](comm::local& c) {
        std::vector<unsigned char> s(30), d(30);
        c.all_gather(c.rank() == 2 ? nullptr : s.data(), d.data(), 10);
    });
    for (const auto& e : errors) CHECK(e == "comm::local all_gather: rank 2 passed a null pointer with a nonzero size");
}

TEST_CASE("local: a failing worker aborts its peers instead of hanging them") {
    std::atomic<int> comm_errors{0};
    CHECK_THROWS_WITH_AS(comm::run_local(4,
                                         [&](comm::local& c) {
                                             if (c.rank() == 3) throw std::runtime_error("worker 3 exploded");
                                             try {
                                                 c.barrier();
                                             } catch (const comm_error&) {
                                                 ++comm_errors;
                                                 throw;
                                             }
                                         }),
                         "worker 3 exploded", std::runtime_error);
    CHECK(comm_errors == 3);
}

TEST_CASE("local: a time-out turns a missing peer into an error") {
    comm::local_world world(2, std::chrono::milliseconds(50));
    auto c0 = world.rank(0);
    CHECK_THROWS_WITH_AS(c0.barrier(), doctest::Contains("timed out"), comm_error);
    CHECK(world.aborted());
}

TEST_CASE("local_world: bad sizes and ranks") {
    CHECK_THROWS_AS(comm::local_world(0), invalid_argument);
    comm::local_world w(2);
    CHECK_THROWS_AS(w.rank(2), invalid_argument);
    CHECK_THROWS_AS(w.rank(-1), invalid_argument);
}
