// tests/sim/test_network.cpp: the network model's arithmetic (examples/sim/network.hpp), on hand-made logs.
#include "network.hpp"
#include "options.hpp"

#include <doctest/doctest.h>

#include <vector>

using namespace trickle_sim;

TEST_CASE("network: rounds per exchange for each topology") {
    CHECK(exchange_rounds(topology_kind::all_reduce, 4, 2) == 6);
    CHECK(exchange_rounds(topology_kind::all_reduce, 8, 2) == 14);
    CHECK(exchange_rounds(topology_kind::ring, 8, 2) == 2);
    CHECK(exchange_rounds(topology_kind::gossip, 8, 2) == 1);
    CHECK(exchange_rounds(topology_kind::exponential, 8, 2) == 1);
    CHECK(exchange_rounds(topology_kind::islands, 8, 4) == 6);
    CHECK(exchange_rounds(topology_kind::islands, 8, 1) == 0);
    CHECK(exchange_rounds(topology_kind::all_reduce, 1, 2) == 0);
}

TEST_CASE("network: one operation's time, and what compute hides of it") {
    const network_config net{"1Gbps,50ms", 1e9 / 8, 50e-3};
    // 6 rounds of 50 ms and 1 MB at 125 MB/s: 0.3 + 0.008 s.
    CHECK(op_seconds(net, 1, 6, 1'000'000) == doctest::Approx(0.308).epsilon(1e-12));
    // Two operations completing together pay the rounds twice.
    CHECK(op_seconds(net, 2, 6, 1'000'000) == doctest::Approx(0.608).epsilon(1e-12));
    CHECK(exposed_seconds(0.308, 0.1) == doctest::Approx(0.208).epsilon(1e-12));
    CHECK(exposed_seconds(0.308, 0.5) == 0.0);
    CHECK(exposed_seconds(0.308, 0.0) == 0.308);
}

TEST_CASE("network: the exposed total of a log and the modelled wall time") {
    const network_config net{"8Mbps,10ms", 1e6, 10e-3}; // 1 MB/s
    const std::vector<step_traffic> log = {
        {.step = 3, .blocking_ops = 1, .blocking_bytes = 20'000},                // 0.02 + 0.02 = 0.04 s
        {.step = 5, .hidden_ops = 1, .hidden_bytes = 50'000},                    // 0.02 + 0.05 = 0.07 s, 0.03 hidden
        {.step = 8, .hidden_ops = 2, .hidden_bytes = 10'000},                    // 0.04 + 0.01 = 0.05 s, 0.03 hidden
        {.step = 9, .blocking_ops = 1, .blocking_bytes = 0, .hidden_ops = 0, .hidden_bytes = 0}, // 0.02 s
    };
    const traffic_shape blocking{.rounds = 2, .hide_steps = 0};
    const traffic_shape streaming{.rounds = 2, .hide_steps = 3}; // 3 steps of 10 ms = 30 ms hidden per op group
    CHECK(exposed_total(log, 9, blocking, net, 0.010) == doctest::Approx(0.04 + 0.07 + 0.05 + 0.02).epsilon(1e-12));
    CHECK(exposed_total(log, 9, streaming, net, 0.010) == doctest::Approx(0.04 + 0.04 + 0.02 + 0.02).epsilon(1e-12));
    CHECK(exposed_total(log, 5, streaming, net, 0.010) == doctest::Approx(0.04 + 0.04).epsilon(1e-12));
    CHECK(exposed_total(log, 2, streaming, net, 0.010) == 0.0);
    // Enough compute hides every overlapped operation; the blocking ones stay.
    CHECK(exposed_total(log, 9, streaming, net, 1.0) == doctest::Approx(0.04 + 0.02).epsilon(1e-12));
    // The wall time: compute, plus the busiest worker's exposed time.
    CHECK(modelled_wall(9, 0.010, {0.1, 0.25, 0.2}) == doctest::Approx(0.09 + 0.25).epsilon(1e-12));
    CHECK(modelled_wall(9, 0.010, {}) == doctest::Approx(0.09).epsilon(1e-12));
}
