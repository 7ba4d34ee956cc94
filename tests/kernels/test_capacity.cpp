// Buffers are sized at construction from the schedule's largest fraction and the
// sampler's max_count, so no step allocates: both bounds must hold at every step.
#include <trickle/algorithm/sparta.hpp>
#include <trickle/comm/local.hpp>
#include <trickle/sampler.hpp>
#include <trickle/schedule.hpp>

#include "sampler_tests.hpp"

#include <doctest/doctest.h>

#include <vector>

using namespace trickle;
using trickle_test::test_layout;

namespace {

template <class Schedule>
void check_schedule(const Schedule& s, double base) {
    const double m = detail::schedule_max_fraction(s, base);
    for (std::uint64_t t = 0; t < 3000; t += 7) CHECK(s.fraction(t, base) <= m);
}

template <class Sampler>
void check_sampler(Sampler s, const std::vector<std::size_t>& sizes, double pmax) {
    test_layout lay(sizes);
    const std::size_t cap = detail::selection_capacity(s, pmax, lay.offsets.back());
    for (std::uint64_t t = 0; t < 200; ++t)
        for (double p : {pmax, pmax * 0.5, pmax * 0.01}) {
            const auto sel = s.select(lay.context(5, t, t, p));
            REQUIRE(sel.count() <= cap);
        }
}

} // namespace

TEST_CASE("schedules: max_fraction bounds every step's fraction") {
    check_schedule(schedule::constant{}, 0.01);
    check_schedule(schedule::linear{.end_fraction = 0.05, .steps = 1000}, 0.01);
    check_schedule(schedule::linear{.end_fraction = 0.001, .steps = 1000}, 0.01);
    check_schedule(schedule::cosine{.end_fraction = 0.2, .steps = 500}, 0.01);
    check_schedule(schedule::piecewise{{{10, 0.3}, {100, 0.02}}}, 0.01);
    check_schedule(schedule::warmup<schedule::cosine>{.steps = 100, .start_fraction = 0.5, .then = {0.001, 1000}}, 0.01);
    CHECK(detail::schedule_max_fraction(schedule::piecewise{{{10, 0.3}}}, 0.01) == 0.3);
    struct opaque {
        double fraction(std::uint64_t, double b) const { return b; }
    };
    CHECK(detail::schedule_max_fraction(opaque{}, 0.01) == 1.0); // cannot say: the whole group
}

TEST_CASE("samplers: max_count bounds every selection at fractions up to p") {
    const std::vector<std::size_t> sizes{1000, 3, 4099, 17, 2048, 777};
    for (double p : {1e-4, 0.003, 0.05, 0.5, 1.0}) {
        check_sampler(sampler::uniform{}, sizes, p);
        check_sampler(sampler::permutation{}, sizes, p);
        check_sampler(sampler::block{.block_size = 64}, sizes, p);
        check_sampler(sampler::block{.block_size = 5000}, sizes, p);
        check_sampler(sampler::layerwise{}, sizes, p);
        check_sampler(sampler::layerwise{.how = sampler::layerwise::mode::rotating}, sizes, p);
    }
}

TEST_CASE("sparta: the exchange buffer is sized at construction for the schedule's largest fraction") {
    std::vector<float> w(10000, 1.0f);
    comm::run_local(1, [&](comm::local& c) {
        param_group<float> g{{"w", w.data(), w.size()}};
        sparta_engine<sampler::uniform, schedule::linear, topology::all_reduce, float, host_space, comm::local> s(
            g, c, {.fraction = 0.01}, {}, schedule::linear{.end_fraction = 0.05, .steps = 10});
        CHECK(s.capacity() == 500);
        for (int t = 0; t < 20; ++t) s.step(exec::host{});
        CHECK(s.capacity() == 500);
        CHECK(s.stats().last_values == 500);
        // Graph replays are a CUDA matter: a host engine refuses to account for them.
        CHECK(!s.replayable());
        const auto before = s.stats();
        CHECK_THROWS_AS(s.replayed(1), invalid_argument);
        CHECK(s.stats().steps == before.steps);
    });
}

namespace {

template <class Sampler>
void check_distinct(Sampler s, const std::vector<std::size_t>& sizes, double p) {
    test_layout lay(sizes);
    const std::size_t n = lay.offsets.back();
    for (std::uint64_t t = 0; t < 30; ++t) {
        const auto sel = s.select(lay.context(9, t, t, p));
        std::vector<char> seen(n + 1, 0);
        for (std::size_t k = 0; k < sel.count(); ++k) {
            const std::size_t pos = sel(k);
            if (pos >= n) continue; // padding (block's partial last block)
            REQUIRE_MESSAGE(!seen[pos], Sampler::name << ": position " << pos << " selected twice at step " << t);
            seen[pos] = 1;
        }
    }
}

} // namespace

TEST_CASE("every sampler selects distinct positions: no position is ever written twice in one exchange") {
    const std::vector<std::size_t> sizes{1000, 3, 4099, 17, 2048, 777, 1, 1};
    for (double p : {0.001, 0.05, 0.5, 0.97, 1.0}) {
        check_distinct(sampler::uniform{}, sizes, p);
        check_distinct(sampler::permutation{}, sizes, p);
        check_distinct(sampler::block{.block_size = 64}, sizes, p);
        check_distinct(sampler::layerwise{}, sizes, p);
        check_distinct(sampler::layerwise{.how = sampler::layerwise::mode::rotating}, sizes, p);
    }
}
