// agree(): workers that disagree on a configuration all throw, naming what differs.
#include <trickle/algorithm/agreement.hpp>
#include <trickle/comm/local.hpp>

#include "test_support.hpp"

#include <doctest/doctest.h>

using namespace trickle;

namespace {
config_record make(double fraction, int seed, const std::string& err = "") {
    config_record r("sparta");
    r.add("fraction", fraction).add("seed", seed).add("layout", "a:10,b:5");
    if (!err.empty()) r.set_error(err);
    return r;
}
} // namespace

TEST_CASE("config_record: serialize and parse round trip") {
    const auto r = make(0.005, 42, "fraction must be in (0, 1]");
    const auto p = config_record::parse(r.serialize());
    CHECK(p.kind() == "sparta");
    CHECK(p.fields() == r.fields());
    CHECK(p.error() == r.error());
    const auto q = config_record::parse(make(0.5, 1).serialize());
    CHECK(q.error().empty());
    CHECK(q.fields().size() == 3);
}

TEST_CASE("agree: identical configurations pass") {
    comm::run_local(4, [](comm::local& c) { agree(c, make(0.005, 42)); });
    CHECK(true);
}

TEST_CASE("agree: a differing field throws a mismatch on every rank, naming it") {
    const auto errors = trickle_test::run_collect_errors(
        3, [](comm::local& c) { agree(c, make(c.rank() == 2 ? 0.01 : 0.005, 42)); });
    for (const auto& e : errors) {
        CHECK(e.find("workers disagree on the sparta configuration") != std::string::npos);
        CHECK(e.find("fraction: rank 0 has 0.0050000000000000001, rank 2 has 0.01") != std::string::npos);
        CHECK(e.find("seed") == std::string::npos);
    }
}

TEST_CASE("agree: one rank's validation error is raised on every rank") {
    const auto errors = trickle_test::run_collect_errors(4, [](comm::local& c) {
        agree(c, make(0.005, 42, c.rank() == 1 ? "fraction must be in (0, 1], got 1.5" : ""));
    });
    for (const auto& e : errors) CHECK(e == "rank 1: fraction must be in (0, 1], got 1.5");
}

TEST_CASE("agree: different algorithms and missing fields are reported") {
    const auto errors = trickle_test::run_collect_errors(2, [](comm::local& c) {
        config_record r(c.rank() == 0 ? "sparta" : "diloco");
        r.add("seed", 1);
        if (c.rank() == 1) r.add("outer_lr", 0.7);
        agree(c, r);
    });
    for (const auto& e : errors) {
        CHECK(e.find("algorithm: rank 0 has 'sparta', rank 1 has 'diloco'") != std::string::npos);
        CHECK(e.find("outer_lr: rank 1 has 0.69999999999999996, rank 0 does not set it") != std::string::npos);
    }
}
