// agree(): workers that disagree on a configuration all throw, naming what differs.
#include <trickle/algorithm/agreement.hpp>
#include <trickle/comm/local.hpp>
#include <trickle/schedule/schedule.hpp>

#include "test_support.hpp"

#include <doctest/doctest.h>

#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

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
        CHECK(e.find("fraction: rank 0 has 0.005, rank 2 has 0.01") != std::string::npos);
        CHECK(e.find("seed") == std::string::npos);
    }
}

TEST_CASE("agree: a detail list names its first differing item instead of the field it explains, and is not hashed") {
    auto with_list = [](std::vector<std::string> items, const std::string& hash) {
        config_record r("sparta");
        r.add("fraction", 0.5).add("layout_hash", hash);
        r.add_detail("tensors", std::move(items), "layout_hash");
        return r;
    };
    // The list travels in wire() but not in serialize() (what checkpoints hash).
    const auto a = with_list({"w (4)", "b\nx (2)"}, "aa");
    CHECK(a.serialize() == config_record("sparta").add("fraction", 0.5).add("layout_hash", "aa").serialize());
    const auto back = config_record::from_wire(a.wire());
    REQUIRE(back.details().size() == 1);
    CHECK(back.details()[0].name == "tensors");
    CHECK(back.details()[0].explains == "layout_hash");
    CHECK(back.details()[0].items == std::vector<std::string>{"w (4)", "b?x (2)"}); // a line break made '?'
    CHECK(back.fields() == a.fields());

    const auto errors = trickle_test::run_collect_errors(3, [&](comm::local& c) {
        if (c.rank() == 2)
            agree(c, with_list({"w (4)", "b (3)", "c (1)"}, "bb"));
        else
            agree(c, with_list({"w (4)", "b (2)", "c (1)"}, "aa"));
    });
    for (const auto& e : errors) {
        CHECK(e == "workers disagree on the sparta configuration: tensors: rank 0 has 3, rank 2 has 3; the first that "
                   "differs is number 1: rank 0 has 'b (2)', rank 2 has 'b (3)'");
    }
    // A shorter list: the first missing item is named; a field nothing explains is listed as before.
    const auto shorter = trickle_test::run_collect_errors(2, [&](comm::local& c) {
        auto r = with_list(c.rank() == 1 ? std::vector<std::string>{"w (4)"} : std::vector<std::string>{"w (4)", "b (2)"},
                           c.rank() == 1 ? "bb" : "aa");
        if (c.rank() == 1) r.add("seed", 3);
        agree(c, r);
    });
    for (const auto& e : shorter) {
        CHECK(e.find("tensors: rank 0 has 2, rank 1 has 1; the first that differs is number 1: rank 0 has 'b (2)', "
                     "rank 1 has none (its list ends there)") != std::string::npos);
        CHECK(e.find("layout_hash") == std::string::npos);
        CHECK(e.find("seed: rank 1 has 3, rank 0 does not set it") != std::string::npos);
    }
    // Equal lists and a differing hash (say, another dtype): the hash is named.
    const auto hash_only = trickle_test::run_collect_errors(
        2, [&](comm::local& c) { agree(c, with_list({"w (4)"}, c.rank() == 1 ? "bb" : "aa")); });
    for (const auto& e : hash_only) CHECK(e.find("layout_hash: rank 0 has aa, rank 1 has bb") != std::string::npos);
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
        CHECK(e.find("outer_lr: rank 1 has 0.7, rank 0 does not set it") != std::string::npos);
    }
}

TEST_CASE("config_record: the value text keeps 17 digits (checkpoints hash it); shown() is the shortest form") {
    config_record r("sparta");
    r.add("fraction", 0.005).add("weight", 0.1f).add("steps", std::uint64_t{12}).add("name", "uniform").add("half", 0.5);
    // What serialize() (and so every checkpoint's configuration hash) sees: unchanged.
    CHECK(r.serialize() == "sparta\nfraction=0.0050000000000000001\nweight=0.10000000149011612\nsteps=12\nname=uniform\n"
                           "half=0.5\n!");
    // What messages print: the shortest text that reads back as the value, float as float.
    CHECK(r.shown(0) == "0.005");
    CHECK(r.shown(1) == "0.1");
    CHECK(r.shown(2) == "12");
    CHECK(r.shown(3) == "uniform");
    CHECK(r.shown(4) == "0.5");
    // A policy describing a policy it holds keeps the inner shown texts.
    config_record outer("diloco");
    outer.add_fields("outer.lr_", r);
    CHECK(outer.fields()[0] == std::pair<std::string, std::string>{"outer.lr_fraction", "0.0050000000000000001"});
    CHECK(outer.shown(0) == "0.005");
    CHECK(outer.shown(1) == "0.1");
    // A piecewise schedule's points: "step:fraction", hashed with 17 digits, shown short.
    config_record p("sparta");
    schedule::piecewise{.points = {{4, 0.3}}}.describe(p);
    CHECK(p.fields()[1].second == "4:0.29999999999999999");
    CHECK(p.shown(1) == "4:0.3");
}

TEST_CASE("config_record: wire() carries the shown texts; serialize() text reads back without them") {
    config_record r = make(0.005, 42, "an error");
    r.add("weight", 0.1f);
    const config_record w = config_record::from_wire(r.wire());
    CHECK(w.serialize() == r.serialize());
    CHECK(w.fields() == r.fields());
    CHECK(w.error() == "an error");
    CHECK(w.shown(0) == "0.005");
    CHECK(w.shown(3) == "0.1");
    // Text in serialize()'s form (a worker that sends no shown texts) reads as parse() does.
    const config_record plain = config_record::from_wire(r.serialize());
    CHECK(plain.fields() == r.fields());
    CHECK(plain.shown(0) == "0.0050000000000000001");
}

TEST_CASE("agree: numbers in mismatch messages are in their shortest form, float as float") {
    const auto errors = trickle_test::run_collect_errors(2, [](comm::local& c) {
        config_record r("diloco");
        r.add("weight", c.rank() == 0 ? 0.1f : 0.2f).add("lr", c.rank() == 0 ? 0.7 : 0.07);
        agree(c, r);
    });
    for (const auto& e : errors) {
        CHECK(e == "workers disagree on the diloco configuration: weight: rank 0 has 0.1, rank 1 has 0.2; "
                   "lr: rank 0 has 0.7, rank 1 has 0.07");
    }
    // Two values that differ but whose shown texts are alike are printed in full.
    const auto alike = trickle_test::run_collect_errors(2, [](comm::local& c) {
        config_record r("diloco");
        r.add_text("x", c.rank() == 0 ? "0.10000000000000001" : "0.10000000000000002", "0.1");
        agree(c, r);
    });
    for (const auto& e : alike) CHECK(e.find("x: rank 0 has 0.10000000000000001, rank 1 has 0.10000000000000002") != std::string::npos);
}

TEST_CASE("concat: numbers in messages are in their shortest round-trip form") {
    CHECK(detail::concat("fraction ", 0.005, ", weight ", 0.1f, ", lr ", 0.7) == "fraction 0.005, weight 0.1, lr 0.7");
    CHECK(detail::concat(1.0 / 3.0) == "0.3333333333333333");
    CHECK(detail::concat(1.0f / 3.0f) == "0.33333334");
    CHECK(detail::concat(-2.5, ' ', 1e-8, ' ', 3.0, ' ', std::uint64_t{18446744073709551615ull}) ==
          "-2.5 1e-08 3 18446744073709551615");
    CHECK(detail::concat(std::numeric_limits<double>::infinity()) == "inf");
    CHECK(detail::concat(-std::numeric_limits<float>::infinity()) == "-inf");
    CHECK(detail::concat(std::numeric_limits<double>::quiet_NaN()) == "nan");
    // A plain decimal from 1e-4 up to 1e16, scientific notation outside.
    CHECK(detail::concat(0.0001, ' ', 100000.0, ' ', 0.0, ' ', -0.0f, ' ', 1e15, ' ', 1e16, ' ', 1e20, ' ', 9.5e-5) ==
          "0.0001 100000 0 -0 1000000000000000 1e+16 1e+20 9.5e-05");
    CHECK(detail::concat(std::numeric_limits<double>::max()) == "1.7976931348623157e+308");
    CHECK(detail::concat(std::numeric_limits<double>::denorm_min()) == "5e-324");
    CHECK(detail::concat(std::numeric_limits<float>::max()) == "3.4028235e+38");
}
