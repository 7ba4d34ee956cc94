// Fraction schedules: values at given steps and validation of their parameters.
#include <trickle/schedule.hpp>

#include <doctest/doctest.h>

#include <cmath>

using namespace trickle;

TEST_CASE("constant, linear and cosine schedules") {
    CHECK(schedule::constant{}.fraction(12345, 0.005) == 0.005);
    const schedule::linear lin{.end_fraction = 0.001, .steps = 100};
    CHECK(lin.fraction(0, 0.011) == doctest::Approx(0.011));
    CHECK(lin.fraction(50, 0.011) == doctest::Approx(0.006));
    CHECK(lin.fraction(100, 0.011) == doctest::Approx(0.001));
    CHECK(lin.fraction(1000, 0.011) == doctest::Approx(0.001));
    const schedule::cosine cosd{.end_fraction = 0.001, .steps = 100};
    CHECK(cosd.fraction(0, 0.011) == doctest::Approx(0.011));
    CHECK(cosd.fraction(50, 0.011) == doctest::Approx(0.006));
    CHECK(cosd.fraction(25, 0.011) == doctest::Approx(0.001 + 0.01 * 0.5 * (1 + std::cos(M_PI / 4))));
    CHECK(cosd.fraction(100, 0.011) == doctest::Approx(0.001));
}

TEST_CASE("piecewise and warmup schedules") {
    const schedule::piecewise pw{.points = {{10, 0.02}, {20, 0.01}}};
    CHECK(pw.fraction(0, 0.05) == 0.05);
    CHECK(pw.fraction(9, 0.05) == 0.05);
    CHECK(pw.fraction(10, 0.05) == 0.02);
    CHECK(pw.fraction(25, 0.05) == 0.01);
    const schedule::warmup<schedule::linear> wu{.steps = 10, .start_fraction = 0.1, .then = {.end_fraction = 0.01, .steps = 110}};
    CHECK(wu.fraction(0, 0.05) == doctest::Approx(0.1));
    const double at10 = wu.then.fraction(10, 0.05);
    CHECK(wu.fraction(5, 0.05) == doctest::Approx(0.1 + (at10 - 0.1) * 0.5));
    CHECK(wu.fraction(10, 0.05) == doctest::Approx(at10));
    CHECK(wu.fraction(60, 0.05) == doctest::Approx(wu.then.fraction(60, 0.05)));
}

TEST_CASE("schedules reject bad parameters through describe()") {
    auto error_of = [](const auto& s) {
        config_record r;
        s.describe(r);
        return r.error();
    };
    CHECK(error_of(schedule::constant{}).empty());
    CHECK(error_of(schedule::linear{.end_fraction = 0.0, .steps = 10}).find("end_fraction") != std::string::npos);
    CHECK(error_of(schedule::linear{.end_fraction = 1.5, .steps = 10}).find("(0, 1]") != std::string::npos);
    CHECK(error_of(schedule::cosine{.end_fraction = 0.1, .steps = 0}).find("steps") != std::string::npos);
    CHECK(error_of(schedule::cosine{.end_fraction = NAN, .steps = 5}).find("end_fraction") != std::string::npos);
    CHECK(error_of(schedule::piecewise{.points = {{5, 0.1}, {5, 0.2}}}).find("increasing") != std::string::npos);
    CHECK(error_of(schedule::piecewise{.points = {{5, -0.1}}}).find("point 0") != std::string::npos);
    CHECK(error_of(schedule::warmup<>{.steps = 3, .start_fraction = 2.0}).find("start_fraction") != std::string::npos);
    CHECK(error_of(schedule::warmup<schedule::linear>{.steps = 3, .start_fraction = 0.5, .then = {.end_fraction = 0, .steps = 3}})
              .find("end_fraction") != std::string::npos);
    static_assert(schedule_policy<schedule::piecewise>);
}
