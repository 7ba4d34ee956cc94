// comm::async: non-blocking collectives on a progress thread give the wrapped
// communicator's bits and byte counts while the caller computes; errors come back through
// the requests; dropped requests, failed peers and shutdown never hang or write late.
#include <trickle/comm/async.hpp>
#include <trickle/comm/local.hpp>

#include "test_support.hpp"

#include <doctest/doctest.h>

#include <chrono>
#include <cmath>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

using namespace trickle;
using trickle_test::bitwise_equal;

namespace {

std::vector<float> values(int r, std::size_t n, int salt) {
    std::vector<float> v(n);
    for (std::size_t i = 0; i < n; ++i)
        v[i] = static_cast<float>(std::sin(0.013 * static_cast<double>(i) * (r + 1) + salt) * (1 + r));
    return v;
}

// Local "compute" between start and wait: a deterministic loop over a buffer of its own.
float compute(std::vector<float>& x) {
    float s = 0;
    for (int round = 0; round < 20; ++round)
        for (float& v : x) {
            v = v * 0.999f + 0.001f;
            s += v;
        }
    return s;
}

struct outcome {
    std::vector<std::vector<float>> results;
    traffic_counters traffic;
};

// The same script, blocking on comm::local (async = false) or overlapped through comm::async.
std::vector<outcome> script(int N, bool overlapped) {
    std::vector<outcome> out(static_cast<std::size_t>(N));
    comm::run_local(N, [&](comm::local& c) {
        outcome& o = out[static_cast<std::size_t>(c.rank())];
        const int r = c.rank(), right = (r + 1) % N, left = (r + N - 1) % N;
        std::vector<float> a = values(r, 1001, 1), b = values(r, 17, 2), s = values(r, 300, 3), got(300);
        std::vector<float> g(static_cast<std::size_t>(N) * 5), t(static_cast<std::size_t>(N) * 3);
        std::vector<float> sendg = values(r, 5, 4), sendt = values(r, static_cast<std::size_t>(N) * 3, 5);
        std::vector<float> scratch(4096, 1.0f);
        if (!overlapped) {
            c.all_reduce_sum(a.data(), a.size());
            c.all_reduce_sum(b.data(), b.size());
            c.send_recv(s.data(), s.size(), right, got.data(), got.size(), left);
            c.all_gather(sendg.data(), g.data(), 5 * sizeof(float));
            c.all_to_all(sendt.data(), t.data(), 3 * sizeof(float));
            c.broadcast(b.data(), b.size(), N - 1);
            o.traffic = c.traffic();
        } else {
            comm::async<comm::local> ac(c);
            // Several operations in flight at once, computing meanwhile.
            comm::request ra = ac.start_all_reduce_sum(a.data(), a.size());
            comm::request rb = ac.start_all_reduce_sum(b.data(), b.size());
            comm::request rs = ac.start_send_recv(s.data(), s.size(), right, got.data(), got.size(), left);
            comm::request rg = ac.start_all_gather(sendg.data(), g.data(), 5 * sizeof(float));
            comm::request rt = ac.start_all_to_all(sendt.data(), t.data(), 3 * sizeof(float));
            (void)compute(scratch);
            ra.wait();
            rs.wait();
            rb.wait();
            rg.wait();
            rt.wait();
            CHECK(ac.in_flight() == 0);
            ac.broadcast(b.data(), b.size(), N - 1); // a blocking call through the wrapper
            o.traffic = ac.traffic();
            CHECK(o.traffic == c.traffic());
        }
        o.results = {a, b, got, g, t};
    });
    return out;
}

} // namespace

TEST_CASE("comm::async: overlapped collectives give the blocking ones' bits and byte counts") {
    for (int N : {1, 2, 3, 4}) {
        const auto blocking = script(N, false);
        const auto overlapped = script(N, true);
        for (int r = 0; r < N; ++r) {
            INFO("N = ", N, ", rank ", r);
            const auto R = static_cast<std::size_t>(r);
            REQUIRE(overlapped[R].results.size() == blocking[R].results.size());
            for (std::size_t k = 0; k < blocking[R].results.size(); ++k)
                CHECK(bitwise_equal(overlapped[R].results[k], blocking[R].results[k]));
            CHECK(overlapped[R].traffic == blocking[R].traffic);
        }
    }
}

TEST_CASE("comm::async: bytes are counted when an operation completes; test() reports completion") {
    comm::run_local(2, [&](comm::local& c) {
        comm::async<comm::local> ac(c);
        std::vector<float> v(1000, 1.0f);
        comm::request rq = ac.start_all_reduce_sum(v.data(), v.size());
        while (!rq.test()) std::this_thread::yield();
        CHECK(ac.traffic().bytes_sent == detail::all_reduce_bytes(1000, 4, 2, c.rank()));
        rq.wait();
        CHECK(v[999] == 2.0f);
        rq.wait(); // a second wait is a no-op
        CHECK(!comm::request{}.valid());
    });
}

TEST_CASE("comm::async::start_with: a whole exchange of several collectives runs on the progress thread, in order") {
    std::vector<std::string> errors(2);
    comm::run_local(2, [&](comm::local& c) {
        comm::async<comm::local> ac(c);
        std::vector<float> a(100, 1.0f), b(50, 2.0f);
        std::thread::id ran_on;
        // Started after an all-reduce: it runs after it, and it is itself two collectives and
        // the computation between them.
        comm::request first = ac.start_all_reduce_sum(a.data(), a.size());
        comm::request job = ac.start_with([&](comm::local& inner) {
            ran_on = std::this_thread::get_id();
            for (float& x : b) x += a[0]; // a is summed already: 2
            inner.all_reduce_sum(b.data(), b.size());
            inner.all_reduce_sum(b.data(), 1);
        });
        first.wait();
        const traffic_counters t = job.wait();
        CHECK(ran_on != std::this_thread::get_id());
        CHECK(b[0] == 16.0f); // (2 + 2) * 2, then * 2
        CHECK(b[1] == 8.0f);
        CHECK(t.bytes_sent == detail::all_reduce_bytes(50, 4, 2, c.rank()) + detail::all_reduce_bytes(1, 4, 2, c.rank()));
        CHECK(t.calls == 2);
        // What the job throws comes back through wait(); the wrapper goes on.
        comm::request bad = ac.start_with([](comm::local&) { throw invalid_argument("the job failed"); });
        try {
            bad.wait();
        } catch (const invalid_argument& e) {
            errors[static_cast<std::size_t>(c.rank())] = e.what();
        }
        ac.all_reduce_sum(a.data(), 1);
        CHECK(a[0] == 4.0f);
    });
    for (const auto& e : errors) CHECK(e == "the job failed");
}

TEST_CASE("comm::async: a bad argument comes back through wait() on every rank; the wrapper stays usable") {
    std::vector<std::string> errors(3);
    std::vector<float> after(3);
    comm::run_local(3, [&](comm::local& c) {
        comm::async<comm::local> ac(c);
        std::vector<float> v(8, 1.0f);
        comm::request bad = ac.start_all_reduce_sum(v.data(), c.rank() == 2 ? 8 : 7);
        try {
            bad.wait();
        } catch (const comm_error& e) {
            errors[static_cast<std::size_t>(c.rank())] = e.what();
        }
        ac.all_reduce_sum(v.data(), 8);
        after[static_cast<std::size_t>(c.rank())] = v[0];
    });
    for (int r = 0; r < 3; ++r) {
        CHECK(errors[static_cast<std::size_t>(r)].find("all_reduce_sum: rank") != std::string::npos);
        CHECK(after[static_cast<std::size_t>(r)] == 3.0f);
    }
}

TEST_CASE("comm::async: a request dropped unwaited, and the wrapper's destructor, wait for the operation") {
    std::vector<float> seen(2);
    comm::run_local(2, [&](comm::local& c) {
        std::vector<float> v(100000, 1.0f);
        {
            comm::async<comm::local> ac(c);
            { comm::request dropped = ac.start_all_reduce_sum(v.data(), v.size()); } // waits here
            CHECK(v.back() == 2.0f);
            (void)ac.start_all_reduce_sum(v.data(), v.size()); // discarded at once: waits too
            CHECK(v.back() == 4.0f);
            comm::request last = ac.start_all_reduce_sum(v.data(), v.size());
            (void)last;
        } // the destructor waits for everything started
        seen[static_cast<std::size_t>(c.rank())] = v.back();
    });
    CHECK(seen[0] == 8.0f);
    CHECK(seen[1] == 8.0f);
}

TEST_CASE("comm::async: a worker that fails while its peers' operations are in flight ends every worker with an error, "
          "never a hang") {
    for (int failing : {0, 2}) {
        const auto t0 = std::chrono::steady_clock::now();
        std::vector<std::string> errors(3);
        CHECK_THROWS_WITH_AS(comm::run_local(3,
                                             [&](comm::local& c) {
                                                 comm::async<comm::local> ac(c);
                                                 std::vector<float> v(1000, 1.0f);
                                                 ac.all_reduce_sum(v.data(), v.size());
                                                 if (c.rank() == failing) throw std::runtime_error("worker failed");
                                                 comm::request rq = ac.start_all_reduce_sum(v.data(), v.size());
                                                 try {
                                                     rq.wait();
                                                 } catch (const comm_error& e) {
                                                     errors[static_cast<std::size_t>(c.rank())] = e.what();
                                                     throw;
                                                 }
                                             }),
                             "worker failed", std::runtime_error);
        for (int r = 0; r < 3; ++r)
            if (r != failing) CHECK(errors[static_cast<std::size_t>(r)].find("failed") != std::string::npos);
        CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(30));
    }
}
