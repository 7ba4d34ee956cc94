// Policies a user declares in their own code, through the public API only: a sampler
// (every s-th position, shifted by one each step), a fraction schedule (halving every few
// steps) and an outer optimizer (Lion's sign update, with momentum as its state), driving
// trickle::sparta and trickle::diloco over comm::local with four threads. Each run is
// checked against the result worked out by hand. docs/extending.md walks through the same
// code.
#include <trickle/trickle.hpp>

#include <doctest/doctest.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace {

// ---- a sampler: positions offset, offset + stride, offset + 2 stride, ... with offset =
// step mod stride, so that `stride` consecutive steps average every position exactly once.
// It ignores the fraction: it always moves about 1/stride of the group.
struct strided {
    static constexpr const char* name = "strided";
    std::size_t stride = 4;

    // What the kernels call, on the host or the device: trivially copyable.
    struct selection_type {
        std::size_t offset, stride, size;
        TRICKLE_HOST_DEVICE std::size_t count() const { return size; }
        TRICKLE_HOST_DEVICE std::size_t operator()(std::size_t k) const { return offset + k * stride; }
    };

    selection_type select(const trickle::sampler_context& ctx) const {
        const std::size_t n = ctx.layout.total;
        const std::size_t offset = ctx.step % stride;
        return {offset, stride, offset < n ? (n - offset + stride - 1) / stride : 0};
    }
    // The most values one exchange moves, for the buffers allocated at construction.
    std::size_t max_count(double, std::size_t n) const { return (n + stride - 1) / stride; }

    void describe(trickle::config_record& rec) const {
        rec.add("sampler", name).add("stride", stride);
        if (stride == 0) rec.set_error("strided: stride must be >= 1");
    }
};
static_assert(trickle::sampler_policy<strided>);

// ---- a schedule: the base fraction, halved every `period` steps, never below `floor`.
struct halving {
    static constexpr const char* name = "halving";
    std::uint64_t period = 2;
    double floor = 0.01;

    double fraction(std::uint64_t step, double base) const {
        const double p = std::ldexp(base, -static_cast<int>(step / period));
        return p > floor ? p : floor;
    }
    double max_fraction(double base) const { return base > floor ? base : floor; }
    void describe(trickle::config_record& rec) const {
        rec.add("schedule", name).add("period", period).add("floor", floor);
        if (period == 0) rec.set_error("halving: period must be >= 1");
        if (!(floor > 0 && floor <= 1)) rec.set_error("halving: floor must be in (0, 1]");
    }
};
static_assert(trickle::schedule_policy<halving>);

// ---- an outer optimizer: Lion (Chen et al. 2023) on DiLoCo's outer gradient g:
//   c = beta1 m + (1 - beta1) g,   p <- p - lr sign(c),   m <- beta2 m + (1 - beta2) g,
// with m = 0 before the first step. One fp32 state value (m) per parameter.
struct lion_rule {
    static constexpr int state_slots = 1;
    float lr, beta1, beta2;
    bool first; // m is not read at the first step: the state is undefined until then

    TRICKLE_HOST_DEVICE void apply(float& p, float g, float* state) const {
        const float m = first ? 0.0f : state[0];
        const float c = trickle::add_rn(trickle::mul_rn(beta1, m), trickle::mul_rn(1.0f - beta1, g));
        p = p - (c > 0.0f ? lr : c < 0.0f ? -lr : 0.0f);
        state[0] = trickle::add_rn(trickle::mul_rn(beta2, m), trickle::mul_rn(1.0f - beta2, g));
    }
};

struct lion {
    static constexpr const char* name = "lion";
    static constexpr int state_slots = 1;
    double lr = 0.01, beta1 = 0.9, beta2 = 0.99;

    void describe(trickle::config_record& rec) const {
        rec.add("outer", name).add("outer.lr", lr).add("outer.beta1", beta1).add("outer.beta2", beta2);
        if (!(std::isfinite(lr) && lr > 0)) rec.set_error("lion: lr must be finite and > 0");
        if (!(beta1 >= 0 && beta1 < 1 && beta2 >= 0 && beta2 < 1)) rec.set_error("lion: betas must be in [0, 1)");
    }
    lion_rule prepare(std::uint64_t t) const {
        if (t == 0) throw trickle::invalid_argument("lion: outer steps count from 1");
        return {static_cast<float>(lr), static_cast<float>(beta1), static_cast<float>(beta2), t == 1};
    }
};
static_assert(trickle::outer_optimizer<lion>);

constexpr int workers = 4;
constexpr std::size_t n = 103; // not a multiple of the stride: the last positions are in fewer selections

float initial(int r, std::size_t i) { return static_cast<float>(std::cos(0.21 * static_cast<double>(i) + 1.7 * r)) * (r + 1); }

} // namespace

TEST_CASE("user policy: a sampler declared here averages exactly its positions, step by step, through trickle::sparta") {
    std::vector<std::vector<float>> w(workers, std::vector<float>(n));
    for (int r = 0; r < workers; ++r)
        for (std::size_t i = 0; i < n; ++i) w[r][i] = initial(r, i);
    // After each step, every worker's copy of the parameters (compared between steps).
    std::vector<std::vector<std::vector<float>>> after(workers);
    std::vector<trickle::exchange_stats> stats(workers);
    trickle::comm::run_local(workers, [&](trickle::comm::local& c) {
        const int r = c.rank();
        trickle::param_group<float> g;
        g.add("a", w[r].data(), 60).add("b", w[r].data() + 60, n - 60);
        trickle::sparta<strided> s(g, c, {.fraction = 0.25, .seed = 9, .broadcast_initial = false}, strided{.stride = 4});
        for (int t = 0; t < 4; ++t) {
            s.step(trickle::exec::host{});
            after[r].push_back(w[r]);
        }
        stats[r] = s.stats();
    });
    std::vector<std::vector<float>> before(workers, std::vector<float>(n));
    for (int r = 0; r < workers; ++r)
        for (std::size_t i = 0; i < n; ++i) before[r][i] = initial(r, i);
    for (int t = 0; t < 4; ++t) {
        CAPTURE(t);
        for (std::size_t i = 0; i < n; ++i) {
            CAPTURE(i);
            if (i % 4 == static_cast<std::size_t>(t)) {
                // Averaged at this step: the same value on every worker, the mean of theirs.
                double mean = 0;
                for (int r = 0; r < workers; ++r) mean += before[r][i];
                mean /= workers;
                for (int r = 0; r < workers; ++r) {
                    CHECK(after[r][t][i] == after[0][t][i]);
                    CHECK(after[r][t][i] == doctest::Approx(mean).epsilon(1e-6));
                }
            } else {
                // Not selected: every bit as before.
                for (int r = 0; r < workers; ++r) CHECK(after[r][t][i] == before[r][i]);
            }
        }
        for (int r = 0; r < workers; ++r) before[r] = after[r][t];
    }
    // Four steps with stride 4 cover the group once: the replicas are identical now, and
    // the values sent are exactly n (26 + 26 + 26 + 25).
    for (int r = 0; r < workers; ++r) {
        CHECK(w[r] == w[0]);
        CHECK(stats[r].exchanges == 4);
        CHECK(stats[r].values == n);
        CHECK(stats[r].last_values == 25);
    }
}

TEST_CASE("user policy: a schedule declared here sets each exchange's fraction") {
    std::vector<std::vector<float>> w(workers, std::vector<float>(n));
    std::vector<std::vector<std::uint64_t>> counts(workers);
    trickle::comm::run_local(workers, [&](trickle::comm::local& c) {
        const int r = c.rank();
        for (std::size_t i = 0; i < n; ++i) w[r][i] = initial(r, i);
        trickle::param_group<float> g;
        g.add("w", w[r].data(), n);
        trickle::sparta<trickle::sampler::uniform, halving> s(g, c, {.fraction = 0.4, .seed = 3}, {},
                                                              halving{.period = 2, .floor = 0.05});
        for (int t = 0; t < 8; ++t) {
            s.step(trickle::exec::host{});
            counts[r].push_back(s.stats().last_values);
        }
    });
    // 0.4, 0.4, 0.2, 0.2, 0.1, 0.1, then the floor 0.05: round(p n) values each.
    const std::vector<std::uint64_t> want{41, 41, 21, 21, 10, 10, 5, 5};
    for (int r = 0; r < workers; ++r) CHECK(counts[r] == want);
}

TEST_CASE("user policy: an outer optimizer declared here (Lion) steps DiLoCo's snapshot as worked out by hand") {
    constexpr int H = 3, rounds = 4;
    const lion opt{.lr = 0.01, .beta1 = 0.9, .beta2 = 0.99};
    // Worker r's inner training: parameter i moves by drift(r, i) at every inner step, the
    // same sign on every worker, so the outer gradient's sign is never in doubt.
    const auto drift = [](int r, std::size_t i) {
        return 0.001f * static_cast<float>((1 + r) * (1 + i % 5)) * (i % 2 ? 1.0f : -1.0f);
    };
    std::vector<std::vector<float>> w(workers, std::vector<float>(n));
    std::vector<trickle::exchange_stats> stats(workers);
    trickle::comm::run_local(workers, [&](trickle::comm::local& c) {
        const int r = c.rank();
        for (std::size_t i = 0; i < n; ++i) w[r][i] = initial(0, i); // replicas start equal
        trickle::param_group<float> g;
        g.add("w", w[r].data(), n);
        trickle::diloco<lion> d(g, c, {.interval = H}, opt);
        for (int t = 0; t < H * rounds; ++t) {
            for (std::size_t i = 0; i < n; ++i) w[r][i] += drift(r, i);
            d.step(trickle::exec::host{});
        }
        stats[r] = d.stats();
    });
    // By hand: every round each worker ends at snapshot + H drift(r, i), so the outer
    // gradient (snapshot - params, averaged) is -H x the mean drift; Lion then moves the
    // snapshot by lr against its sign, and the parameters restart from it.
    std::vector<float> snapshot(n), m(n, 0.0f);
    for (std::size_t i = 0; i < n; ++i) snapshot[i] = initial(0, i);
    for (int k = 0; k < rounds; ++k) {
        const lion_rule rule = opt.prepare(static_cast<std::uint64_t>(k + 1));
        for (std::size_t i = 0; i < n; ++i) {
            double mean_drift = 0;
            for (int r = 0; r < workers; ++r) mean_drift += drift(r, i);
            const auto g = static_cast<float>(-H * mean_drift / workers);
            rule.apply(snapshot[i], g, &m[i]);
        }
    }
    for (int r = 0; r < workers; ++r) {
        CAPTURE(r);
        CHECK(stats[r].exchanges == rounds);
        for (std::size_t i = 0; i < n; ++i) {
            CAPTURE(i);
            CHECK(w[r][i] == doctest::Approx(snapshot[i]).epsilon(1e-6));
            // A sign update: every round moved the parameter by lr exactly, the same way.
            CHECK(w[r][i] - initial(0, i) ==
                  doctest::Approx((i % 2 ? 1.0 : -1.0) * rounds * opt.lr).epsilon(1e-3));
        }
    }
}

TEST_CASE("user policy: bad fields of a user policy fail on every worker, as the built-in ones do") {
    std::vector<std::string> errors(workers);
    std::vector<std::vector<float>> w(workers, std::vector<float>(n, 1.0f));
    trickle::comm::run_local(workers, [&](trickle::comm::local& c) {
        const int r = c.rank();
        trickle::param_group<float> g;
        g.add("w", w[r].data(), n);
        try {
            trickle::diloco<lion> d(g, c, {.interval = 2}, lion{.lr = r == 2 ? -1.0 : 0.01});
        } catch (const trickle::error& e) {
            errors[r] = e.what();
        }
    });
    for (int r = 0; r < workers; ++r) {
        CAPTURE(errors[r]);
        CHECK(errors[r].find("lion") != std::string::npos);
    }
}
