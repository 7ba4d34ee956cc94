// schedule::any, a schedule chosen at run time: it converts from every built-in schedule,
// gives the held schedule's fractions and largest fraction bit for bit, and describes
// itself with exactly the held schedule's fields and errors (so that a worker using it
// agrees with one using the schedule directly).
#include <trickle/schedule.hpp>

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <variant>

using namespace trickle;

namespace {

template <class S>
config_record record_of(const S& s) {
    config_record rec("sparta");
    rec.add("fraction", 0.01);
    s.describe(rec);
    return rec;
}

// any{s} behaves as s: fractions at many steps and bases, max_fraction, describe, name.
template <class S>
void check_same(const S& s) {
    const schedule::any a = s;
    CAPTURE(S::name);
    CHECK(std::string(a.held_name()) == S::name);
    CHECK(std::holds_alternative<S>(a.held()));
    for (double base : {0.001, 0.005, 0.05, 0.3, 1.0}) {
        for (std::uint64_t t = 0; t < 400; ++t) {
            const double want = s.fraction(t, base);
            const double got = a.fraction(t, base);
            // Bit for bit: the same arithmetic on the same operands.
            if (std::memcmp(&got, &want, sizeof got) != 0) {
                FAIL_CHECK("step " << t << " base " << base << ": " << got << " != " << want);
            }
        }
        for (std::uint64_t t : {std::uint64_t{1} << 20, std::uint64_t{1} << 40, ~std::uint64_t{0}})
            CHECK(a.fraction(t, base) == s.fraction(t, base));
        CHECK(a.max_fraction(base) == detail::schedule_max_fraction(s, base));
        CHECK(detail::schedule_max_fraction(a, base) == detail::schedule_max_fraction(s, base));
    }
    CHECK(record_of(a).serialize() == record_of(s).serialize());
    CHECK(record_of(a).fields() == record_of(s).fields());
}

} // namespace

TEST_CASE("schedule::any: a schedule policy that converts implicitly from every built-in schedule") {
    static_assert(schedule_policy<schedule::any>);
    CHECK(std::string(schedule::any::name) == "any");
    static_assert(std::is_convertible_v<schedule::constant, schedule::any>);
    static_assert(std::is_convertible_v<schedule::linear, schedule::any>);
    static_assert(std::is_convertible_v<schedule::cosine, schedule::any>);
    static_assert(std::is_convertible_v<schedule::piecewise, schedule::any>);
    static_assert(std::is_convertible_v<schedule::warmup<schedule::constant>, schedule::any>);
    static_assert(std::is_convertible_v<schedule::warmup<schedule::linear>, schedule::any>);
    static_assert(std::is_convertible_v<schedule::warmup<schedule::cosine>, schedule::any>);
    static_assert(std::is_convertible_v<const schedule::cosine&, schedule::any>);
    // Only those: a warmup of a piecewise schedule, or of another any, is not held.
    static_assert(!std::is_convertible_v<schedule::warmup<schedule::piecewise>, schedule::any>);
    static_assert(!std::is_convertible_v<schedule::warmup<schedule::any>, schedule::any>);
    static_assert(!std::is_convertible_v<double, schedule::any>);

    // The default holds constant.
    const schedule::any d;
    CHECK(std::string(d.held_name()) == "constant");
    CHECK(d.fraction(17, 0.005) == 0.005);

    schedule::any s = schedule::cosine{.end_fraction = 0.001, .steps = 100};
    CHECK(std::string(s.held_name()) == "cosine");
    CHECK(std::get<schedule::cosine>(s.held()).steps == 100);
    // Copies and reassignment keep (or change) the held schedule.
    const schedule::any copy = s;
    s = schedule::linear{.end_fraction = 0.002, .steps = 10};
    CHECK(std::string(copy.held_name()) == "cosine");
    CHECK(std::string(s.held_name()) == "linear");
    // The held schedule's fields can be changed in place.
    std::get<schedule::linear>(s.held()).steps = 20;
    CHECK(s.fraction(10, 0.012) == schedule::linear{.end_fraction = 0.002, .steps = 20}.fraction(10, 0.012));
    const schedule::any w = schedule::warmup<schedule::cosine>{.steps = 5};
    CHECK(std::string(w.held_name()) == "warmup");
}

TEST_CASE("schedule::any: the held schedule's fractions, largest fraction and record, for every alternative") {
    check_same(schedule::constant{});
    check_same(schedule::linear{.end_fraction = 0.002, .steps = 50});
    check_same(schedule::linear{.end_fraction = 0.4, .steps = 333});
    check_same(schedule::cosine{.end_fraction = 0.001, .steps = 100});
    check_same(schedule::cosine{.end_fraction = 0.9, .steps = 7});
    check_same(schedule::piecewise{});
    check_same(schedule::piecewise{.points = {{10, 0.02}, {20, 0.01}, {150, 0.6}}});
    check_same(schedule::warmup<schedule::constant>{.steps = 10, .start_fraction = 0.1});
    check_same(schedule::warmup<schedule::linear>{
        .steps = 25, .start_fraction = 0.2, .then = {.end_fraction = 0.01, .steps = 210}});
    check_same(schedule::warmup<schedule::cosine>{
        .steps = 40, .start_fraction = 0.001, .then = {.end_fraction = 0.003, .steps = 300}});
}

TEST_CASE("schedule::any: invalid parameters give the held schedule's error text") {
    auto same_error = [](const auto& s, const std::string& what) {
        const schedule::any a = s;
        const config_record direct = record_of(s);
        const config_record via = record_of(a);
        CHECK_MESSAGE(direct.error().find(what) != std::string::npos, direct.error());
        CHECK(via.error() == direct.error());
        CHECK(via.serialize() == direct.serialize());
    };
    same_error(schedule::cosine{.end_fraction = 1.5, .steps = 100},
               "schedule::cosine: end_fraction must be in (0, 1], got 1.5");
    same_error(schedule::cosine{.end_fraction = 0.1, .steps = 0}, "schedule::cosine: steps must be >= 1");
    same_error(schedule::linear{.end_fraction = 0.0, .steps = 10}, "schedule::linear: end_fraction");
    same_error(schedule::linear{.end_fraction = NAN, .steps = 10}, "end_fraction must be in (0, 1]");
    same_error(schedule::piecewise{.points = {{5, 0.1}, {5, 0.2}}}, "steps must be strictly increasing");
    same_error(schedule::piecewise{.points = {{5, -0.1}}}, "fraction of point 0");
    same_error(schedule::warmup<>{.steps = 3, .start_fraction = 2.0}, "schedule::warmup: start_fraction");
    same_error(schedule::warmup<schedule::constant>{.steps = 0}, "schedule::warmup: steps must be >= 1");
    same_error(schedule::warmup<schedule::linear>{.steps = 3, .start_fraction = 0.5, .then = {.end_fraction = 0, .steps = 3}},
               "schedule::linear: end_fraction");
    same_error(schedule::warmup<schedule::cosine>{.steps = 3, .start_fraction = 0.5, .then = {.end_fraction = 3, .steps = 3}},
               "schedule::cosine: end_fraction must be in (0, 1], got 3");
    // A valid schedule has no error either way.
    CHECK(record_of(schedule::any{schedule::cosine{}}).error().empty());
    // The largest fraction of an invalid schedule is clipped as the algorithms clip it.
    const schedule::cosine bad{.end_fraction = 1.5, .steps = 100};
    CHECK(schedule::any{bad}.max_fraction(0.01) == detail::schedule_max_fraction(bad, 0.01));
    CHECK(schedule::any{bad}.max_fraction(0.01) == 1.0);
}
