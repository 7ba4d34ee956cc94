// The outer-optimizer policies: the concept, hand-computed steps of each rule, the per-step
// scalars prepare() computes, and the validation describe() reports.
#include "outer_tests.hpp"
#include "test_support.hpp"

#include <trickle/algorithm/agreement.hpp>
#include <trickle/outer.hpp>
#include <trickle/schedule.hpp>

#include <doctest/doctest.h>

#include <cmath>
#include <bit>
#include <limits>
#include <numbers>
#include <string>
#include <vector>

using namespace trickle;

namespace {

constexpr double nan_v = std::numeric_limits<double>::quiet_NaN();
constexpr double inf_v = std::numeric_limits<double>::infinity();

// Applies one prepared step to a single parameter with its state.
template <class Opt>
void step(const Opt& opt, std::uint64_t t, float& p, float g, std::vector<float>& state) {
    const auto rule = opt.prepare(t);
    rule.apply(p, g, state.empty() ? nullptr : state.data());
}

template <class Opt>
std::string error_of(const Opt& opt) {
    config_record rec("diloco");
    opt.describe(rec);
    return rec.error();
}

// A bad value is reported by describe() and thrown by prepare(), with the same message.
template <class Opt>
void check_rejected(const Opt& opt, const std::string& expected) {
    const std::string e = error_of(opt);
    INFO("expected '", expected, "', got '", e, "'");
    CHECK(e.find(expected) != std::string::npos);
    CHECK_THROWS_WITH_AS(opt.prepare(1), e.c_str(), invalid_argument);
}

// Broken policies the concept must reject.
struct no_slots {
    static constexpr const char* name = "no_slots";
    void describe(config_record&) const {}
    outer::average_rule prepare(std::uint64_t) const { return {}; }
};

struct slots_disagree {
    static constexpr const char* name = "slots_disagree";
    static constexpr int state_slots = 2;
    void describe(config_record&) const {}
    outer::momentum_rule<false> prepare(std::uint64_t) const { return {}; }
};

struct heavy_rule {
    [[maybe_unused]] static constexpr int state_slots = 0;
    std::vector<float> table; // not trivially copyable: cannot travel into a kernel
    void apply(float&, float, float*) const {}
};
struct rule_not_copyable {
    static constexpr const char* name = "rule_not_copyable";
    static constexpr int state_slots = 0;
    void describe(config_record&) const {}
    heavy_rule prepare(std::uint64_t) const { return {}; }
};

struct no_describe {
    static constexpr const char* name = "no_describe";
    [[maybe_unused]] static constexpr int state_slots = 0;
    outer::average_rule prepare(std::uint64_t) const { return {}; }
};

// A user-written optimizer: sign descent, p <- p - lr * sign(g), to show the concept is
// open. Its rule keeps no state.
struct sign_rule {
    static constexpr int state_slots = 0;
    float lr;
    TRICKLE_HOST_DEVICE void apply(float& p, float g, float*) const { p = p - (g > 0.0f ? lr : g < 0.0f ? -lr : 0.0f); }
};
struct sign_descent {
    static constexpr const char* name = "sign_descent";
    static constexpr int state_slots = 0;
    double lr = 0.01;
    void describe(config_record& rec) const {
        rec.add("outer", name);
        rec.add("outer.lr", lr);
        if (!(std::isfinite(lr) && lr > 0)) rec.set_error("sign_descent: lr must be finite and > 0");
    }
    sign_rule prepare(std::uint64_t) const { return {static_cast<float>(lr)}; }
};

} // namespace

TEST_CASE("outer optimizers satisfy the concept; broken policies do not") {
    static_assert(outer_optimizer<outer::average> && outer_optimizer<outer::sgd> && outer_optimizer<outer::momentum> &&
                  outer_optimizer<outer::nesterov> && outer_optimizer<outer::adam>);
    static_assert(outer_optimizer<sign_descent>);
    static_assert(!outer_optimizer<no_slots>);
    static_assert(!outer_optimizer<slots_disagree>);
    static_assert(!outer_optimizer<rule_not_copyable>);
    static_assert(!outer_optimizer<no_describe>);
    static_assert(!outer_rule<heavy_rule>);
    static_assert(outer::average::state_slots == 0 && outer::sgd::state_slots == 0);
    static_assert(outer::momentum::state_slots == 1 && outer::nesterov::state_slots == 1);
    static_assert(outer::adam::state_slots == 2);
    CHECK(std::string(outer::average::name) == "average");
    CHECK(std::string(outer::sgd::name) == "sgd");
    CHECK(std::string(outer::momentum::name) == "momentum");
    CHECK(std::string(outer::nesterov::name) == "nesterov");
    CHECK(std::string(outer::adam::name) == "adam");
}

TEST_CASE("outer optimizers: defaults, and designated initializers with float literals") {
    const outer::nesterov n{};
    CHECK(n.lr == 0.7);
    CHECK(n.momentum == 0.9);
    const outer::momentum m{};
    CHECK(m.lr == 0.7);
    CHECK(m.momentum == 0.9);
    const outer::sgd s{};
    CHECK(s.lr == 1.0);
    const outer::adam a{};
    CHECK(a.lr == 1e-3);
    CHECK(a.beta1 == 0.9);
    CHECK(a.beta2 == 0.999);
    CHECK(a.eps == 1e-8);
    const outer::nesterov f{.lr = 0.7f, .momentum = 0.9f};
    CHECK(f.prepare(1).lr == 0.7f);
    CHECK(f.prepare(1).mu == 0.9f);
}

TEST_CASE("outer_state_floats: slots times parameters, with overflow reported") {
    CHECK(outer_state_floats<outer::average>(1000) == 0);
    CHECK(outer_state_floats<outer::nesterov>(1000) == 1000);
    CHECK(outer_state_floats<outer::adam>(1000) == 2000);
    CHECK(outer_state_floats<outer::average>(std::numeric_limits<std::size_t>::max()) == 0);
    CHECK_THROWS_WITH_AS(outer_state_floats<outer::adam>(std::numeric_limits<std::size_t>::max()),
                         doctest::Contains("overflow"), invalid_argument);
}

TEST_CASE("nesterov: two steps computed by hand") {
    SUBCASE("lr 0.5, momentum 0.5: exact in binary") {
        // t=1: b = g = 1;  d = g + mu b = 1.5;  p = 1 - 0.5 * 1.5 = 0.25
        // t=2: b = 0.5 * 1 + 0.5 = 1;  d = 0.5 + 0.5 * 1 = 1;  p = 0.25 - 0.5 * 1 = -0.25
        const outer::nesterov opt{.lr = 0.5, .momentum = 0.5};
        float p = 1.0f;
        std::vector<float> s{12345.0f}; // never read on the first step
        step(opt, 1, p, 1.0f, s);
        CHECK(p == 0.25f);
        CHECK(s[0] == 1.0f);
        step(opt, 2, p, 0.5f, s);
        CHECK(p == -0.25f);
        CHECK(s[0] == 1.0f);
    }
    SUBCASE("the DiLoCo defaults, lr 0.7 and momentum 0.9, with g = 0.1 twice") {
        // t=1: b = 0.1;  d = 0.1 + 0.09 = 0.19;   p = 1 - 0.133 = 0.867
        // t=2: b = 0.09 + 0.1 = 0.19;  d = 0.1 + 0.171 = 0.271;  p = 0.867 - 0.1897 = 0.6773
        const outer::nesterov opt{};
        float p = 1.0f;
        std::vector<float> s{0.0f};
        step(opt, 1, p, 0.1f, s);
        CHECK(p == doctest::Approx(0.867).epsilon(1e-6));
        step(opt, 2, p, 0.1f, s);
        CHECK(p == doctest::Approx(0.6773).epsilon(1e-6));
        CHECK(s[0] == doctest::Approx(0.19).epsilon(1e-6));
    }
}

TEST_CASE("momentum: two steps computed by hand") {
    // t=1: b = 0.1;  p = 1 - 0.7 * 0.1 = 0.93
    // t=2: b = 0.9 * 0.1 + 0.1 = 0.19;  p = 0.93 - 0.7 * 0.19 = 0.797
    const outer::momentum opt{};
    float p = 1.0f;
    std::vector<float> s{-7.0f};
    step(opt, 1, p, 0.1f, s);
    CHECK(p == doctest::Approx(0.93).epsilon(1e-6));
    CHECK(s[0] == doctest::Approx(0.1).epsilon(1e-6));
    step(opt, 2, p, 0.1f, s);
    CHECK(p == doctest::Approx(0.797).epsilon(1e-6));
    CHECK(s[0] == doctest::Approx(0.19).epsilon(1e-6));
}

TEST_CASE("adam: two steps computed by hand") {
    // lr 0.1, betas (0.9, 0.999), eps 1e-8, p = 1, g = 0.5 then 0.25.
    // t=1: m = 0.1 * 0.5 = 0.05;  v = 0.001 * 0.25 = 0.00025;  bc1 = 0.1;  bc2 = 0.001
    //      step_size = 1;  denom = sqrt(0.00025) / sqrt(0.001) + 1e-8 = 0.5 + 1e-8
    //      p = 1 - 0.05 / 0.50000001 = 0.900000002
    // t=2: m = 0.045 + 0.025 = 0.07;  v = 0.00024975 + 0.0000625 = 0.00031225
    //      bc1 = 0.19;  bc2 = 0.001999;  step_size = 0.1 / 0.19 = 0.5263158
    //      denom = sqrt(0.00031225) / sqrt(0.001999) = 0.0176706 / 0.0447102 = 0.3952264
    //      p = 0.9 - 0.5263158 * 0.07 / 0.3952264 = 0.9 - 0.0932180 = 0.8067820
    const outer::adam opt{.lr = 0.1};
    float p = 1.0f;
    std::vector<float> s{std::nanf(""), std::nanf("")}; // never read on the first step
    step(opt, 1, p, 0.5f, s);
    CHECK(p == doctest::Approx(0.900000002).epsilon(1e-7));
    CHECK(s[0] == doctest::Approx(0.05).epsilon(1e-6));
    CHECK(s[1] == doctest::Approx(0.00025).epsilon(1e-6));
    step(opt, 2, p, 0.25f, s);
    CHECK(p == doctest::Approx(0.806782).epsilon(1e-6));
    CHECK(s[0] == doctest::Approx(0.07).epsilon(1e-6));
    CHECK(s[1] == doctest::Approx(0.00031225).epsilon(1e-6));
}

TEST_CASE("adam: prepare computes the per-step scalars in double, then rounds them once") {
    const outer::adam opt{.lr = 0.01, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-6};
    for (std::uint64_t t : {1u, 2u, 10u, 1000u}) {
        const auto r = opt.prepare(t);
        const double bc1 = 1.0 - std::pow(0.9, static_cast<double>(t));
        const double bc2 = 1.0 - std::pow(0.95, static_cast<double>(t));
        CHECK(r.neg_step_size == static_cast<float>(-(0.01 / bc1)));
        CHECK(r.bias_correction2_sqrt == static_cast<float>(std::sqrt(bc2)));
        CHECK(r.first == (t == 1));
    }
    const auto r = opt.prepare(1);
    // 1 - 0.9 is 0.09999999999999998 in double; torch rounds that to float, giving 0.1f.
    CHECK(r.lerp_weight == 0.1f);
    CHECK(r.lerp_small);
    CHECK(r.beta2 == 0.95f);
    CHECK(r.one_minus_beta2 == static_cast<float>(1.0 - 0.95));
    CHECK(r.eps == 1e-6f);
    // beta1 < 0.5: lerp weight 0.7 takes the g - (g - m)(1 - w) form.
    const auto low = outer::adam{.beta1 = 0.3}.prepare(5);
    CHECK_FALSE(low.lerp_small);
    CHECK(low.lerp_complement == 1.0f - static_cast<float>(1.0 - 0.3));
}

TEST_CASE("adam and momentum: the first step ignores whatever the state holds") {
    const float nan_f = std::numeric_limits<float>::quiet_NaN();
    {
        float a = 0.3f, b = 0.3f;
        std::vector<float> zero{0.0f, 0.0f}, junk{nan_f, -5.0f};
        step(outer::adam{.lr = 0.01}, 1, a, -0.2f, zero);
        step(outer::adam{.lr = 0.01}, 1, b, -0.2f, junk);
        CHECK(trickle_test::same_bits(a, b));
        CHECK(trickle_test::all_same_bits(zero, junk));
    }
    {
        float a = 0.3f, b = 0.3f;
        std::vector<float> zero{0.0f}, junk{nan_f};
        step(outer::nesterov{}, 1, a, -0.2f, zero);
        step(outer::nesterov{}, 1, b, -0.2f, junk);
        CHECK(trickle_test::same_bits(a, b));
        CHECK(junk[0] == -0.2f);
    }
}

TEST_CASE("rules against the double reference over many steps and values") {
    // Each rule's fp32 arithmetic stays within a few ulps of the exact formula.
    const outer::momentum mom{.lr = 0.3, .momentum = 0.95};
    const outer::nesterov nes{.lr = 0.7, .momentum = 0.9};
    const outer::adam ad{.lr = 0.01, .beta1 = 0.8, .beta2 = 0.99, .eps = 1e-8};
    for (int e = 0; e < 50; ++e) {
        float pm = 0.5f, pn = 0.5f, pa = 0.5f;
        double rm = 0.5, rn = 0.5, ra = 0.5, bm = 0, bn = 0, ma = 0, va = 0, unused = 0;
        std::vector<float> sm{0.0f}, sn{0.0f}, sa{0.0f, 0.0f};
        for (std::uint64_t t = 1; t <= 20; ++t) {
            const float g = static_cast<float>(0.1 * std::sin(0.9 * e + 1.7 * static_cast<double>(t)) + 0.01 * e);
            step(mom, t, pm, g, sm);
            step(nes, t, pn, g, sn);
            step(ad, t, pa, g, sa);
            trickle_test::reference_step(mom, t, rm, g, bm, unused);
            trickle_test::reference_step(nes, t, rn, g, bn, unused);
            trickle_test::reference_step(ad, t, ra, g, ma, va);
        }
        CHECK(trickle_test::close(pm, rm, 1e-5));
        CHECK(trickle_test::close(pn, rn, 1e-5));
        CHECK(trickle_test::close(pa, ra, 1e-5));
        CHECK(trickle_test::close_to(sm[0], bm, 1e-5, 1e-7));
        CHECK(trickle_test::close_to(sa[1], va, 1e-5, 1e-10));
    }
}

TEST_CASE("sgd, average and nesterov with momentum 0 agree bit for bit where they should") {
    for (float g : {0.37f, -1.25e-3f, 7.5f, 0.0f}) {
        float a = 0.123f, s1 = 0.123f, n0 = 0.123f, s = 0.123f;
        std::vector<float> none, buf{0.0f};
        step(outer::average{}, 4, a, g, none);
        step(outer::sgd{.lr = 1.0}, 4, s1, g, none);
        CHECK(trickle_test::same_bits(a, s1));
        step(outer::sgd{.lr = 0.25}, 2, s, g, none);
        step(outer::nesterov{.lr = 0.25, .momentum = 0.0}, 2, n0, g, buf);
        CHECK(trickle_test::same_bits(s, n0));
    }
}

TEST_CASE("describe: the configuration fields, and no error for valid values") {
    SUBCASE("average") {
        config_record rec("diloco");
        outer::average{}.describe(rec);
        CHECK(rec.serialize() == "diloco\nouter=average\n!");
    }
    SUBCASE("sgd") {
        config_record rec("diloco");
        outer::sgd{.lr = 0.5}.describe(rec);
        CHECK(rec.serialize() == "diloco\nouter=sgd\nouter.lr=0.5\n!");
    }
    SUBCASE("momentum and nesterov") {
        config_record a("diloco"), b("diloco");
        outer::momentum{.lr = 0.5, .momentum = 0.25}.describe(a);
        outer::nesterov{.lr = 0.5, .momentum = 0.25}.describe(b);
        CHECK(a.serialize() == "diloco\nouter=momentum\nouter.lr=0.5\nouter.momentum=0.25\n!");
        CHECK(b.serialize() == "diloco\nouter=nesterov\nouter.lr=0.5\nouter.momentum=0.25\n!");
    }
    SUBCASE("adam") {
        config_record rec("diloco");
        outer::adam{.lr = 0.25, .beta1 = 0.5, .beta2 = 0.75, .eps = 0.125}.describe(rec);
        CHECK(rec.serialize() ==
              "diloco\nouter=adam\nouter.lr=0.25\nouter.beta1=0.5\nouter.beta2=0.75\nouter.eps=0.125\n!");
    }
    CHECK(error_of(outer::nesterov{}).empty());
    CHECK(error_of(outer::momentum{.momentum = 0.0}).empty());
    CHECK(error_of(outer::adam{.beta1 = 0.0, .beta2 = 0.0}).empty());
}

TEST_CASE("describe: every bad value gives a clear error, and prepare throws it") {
    for (double lr : {0.0, -0.1, nan_v, inf_v, -inf_v}) {
        check_rejected(outer::sgd{.lr = lr}, "outer::sgd: lr must be finite and > 0, got ");
        check_rejected(outer::momentum{.lr = lr}, "outer::momentum: lr must be finite and > 0");
        check_rejected(outer::nesterov{.lr = lr}, "outer::nesterov: lr must be finite and > 0");
        check_rejected(outer::adam{.lr = lr}, "outer::adam: lr must be finite and > 0");
    }
    for (double mu : {-0.1, 1.0, 1.5, nan_v, inf_v}) {
        check_rejected(outer::momentum{.momentum = mu}, "outer::momentum: momentum must be in [0, 1), got ");
        check_rejected(outer::nesterov{.momentum = mu}, "outer::nesterov: momentum must be in [0, 1)");
    }
    for (double beta : {-0.1, 1.0, 2.0, nan_v, -inf_v}) {
        check_rejected(outer::adam{.beta1 = beta}, "outer::adam: beta1 must be in [0, 1), got ");
        check_rejected(outer::adam{.beta2 = beta}, "outer::adam: beta2 must be in [0, 1), got ");
    }
    for (double eps : {0.0, -1e-8, nan_v, inf_v}) check_rejected(outer::adam{.eps = eps}, "outer::adam: eps must be finite and > 0");
    // The value is in the message.
    CHECK(error_of(outer::sgd{.lr = -2.5}) == "outer::sgd: lr must be finite and > 0, got -2.5");
    CHECK(error_of(outer::adam{.beta2 = 1.0}) == "outer::adam: beta2 must be in [0, 1), got 1");
    // The first bad field is the one reported.
    CHECK(error_of(outer::nesterov{.lr = -1.0, .momentum = 2.0}).find("lr") != std::string::npos);
    // Nothing is added to the record after the fields, whatever the values.
    config_record rec("diloco");
    outer::adam{.eps = 0.0}.describe(rec);
    CHECK(rec.fields().size() == 5);
}

TEST_CASE("prepare: outer steps count from 1") {
    CHECK_THROWS_WITH_AS(outer::average{}.prepare(0), doctest::Contains("counted from 1"), invalid_argument);
    CHECK_THROWS_AS(outer::sgd{}.prepare(0), invalid_argument);
    CHECK_THROWS_AS(outer::momentum{}.prepare(0), invalid_argument);
    CHECK_THROWS_AS(outer::nesterov{}.prepare(0), invalid_argument);
    CHECK_THROWS_AS(outer::adam{}.prepare(0), invalid_argument);
    CHECK_NOTHROW(outer::adam{}.prepare(std::numeric_limits<std::uint64_t>::max()));
}

TEST_CASE("describe: workers that disagree on the outer optimizer are caught by agree()") {
    const auto errors = trickle_test::run_collect_errors(3, [](auto& comm) {
        config_record rec("diloco");
        if (comm.rank() == 2)
            outer::nesterov{.lr = 0.5}.describe(rec);
        else
            outer::nesterov{}.describe(rec);
        agree(comm, rec);
    });
    for (const auto& e : errors) CHECK(e.find("outer.lr: rank 0 has 0.7, rank 2 has 0.5") != std::string::npos);

    const auto bad = trickle_test::run_collect_errors(2, [](auto& comm) {
        config_record rec("diloco");
        outer::adam{.beta1 = comm.rank() == 1 ? 1.0 : 0.9}.describe(rec);
        agree(comm, rec);
    });
    for (const auto& e : bad) CHECK(e == "rank 1: outer::adam: beta1 must be in [0, 1), got 1");
}

TEST_CASE("a user-written optimizer runs through the same kernel bodies") {
    trickle_test::diloco_rig<exec::host, float> rig(exec::host{}, 8, 0);
    std::vector<float> init{0.f, 1.f, 2.f, 3.f, 4.f, 5.f, 6.f, 7.f};
    rig.set_params(init);
    rig.copy_snapshot();
    rig.update(sign_descent{.lr = 0.5}.prepare(1), {1.f, -1.f, 0.f, 2.f, -3.f, 0.5f, -0.5f, 0.f}, 1.0f);
    CHECK(rig.params() == std::vector<float>{-0.5f, 1.5f, 2.f, 2.5f, 4.5f, 4.5f, 6.5f, 7.f});
    CHECK(error_of(sign_descent{.lr = -1.0}) == "sign_descent: lr must be finite and > 0");
}

// ---------------------------------------------------------------- outer::lr_scheduled

namespace {

// Two prepared rules act identically: the same bits of the parameter and the state for
// a spread of parameters, gradients and states (rules hold padding, so no memcmp).
template <class Rule>
bool same_rule(const Rule& a, const Rule& b) {
    constexpr int slots = Rule::state_slots;
    for (float p0 : {-1.5f, 0.0f, 0.3f, 7.0f})
        for (float g : {-0.25f, 1e-3f, 0.5f})
            for (float s0 : {-0.1f, 0.02f}) {
                float pa = p0, pb = p0;
                float sa[slots > 0 ? slots : 1], sb[slots > 0 ? slots : 1];
                for (int j = 0; j < slots; ++j) sa[j] = sb[j] = s0 * static_cast<float>(j + 1) + (j == 1 ? 0.2f : 0.0f);
                a.apply(pa, g, slots > 0 ? sa : nullptr);
                b.apply(pb, g, slots > 0 ? sb : nullptr);
                if (std::bit_cast<std::uint32_t>(pa) != std::bit_cast<std::uint32_t>(pb)) return false;
                for (int j = 0; j < slots; ++j)
                    if (std::bit_cast<std::uint32_t>(sa[j]) != std::bit_cast<std::uint32_t>(sb[j])) return false;
            }
    return true;
}

template <class O, class S>
concept can_schedule = requires { typename outer::lr_scheduled<O, S>; };

// lr_scheduled<Opt, S> at step t prepares exactly what Opt with lr * S(t - 1, 1) does.
template <class Opt, class S>
void check_scheduled_rules(const Opt& opt, const S& sched, std::uint64_t steps) {
    const outer::lr_scheduled<Opt, S> wrapped{opt, sched};
    for (std::uint64_t t = 1; t <= steps; ++t) {
        Opt at = opt;
        at.lr = opt.lr * sched.fraction(t - 1, 1.0);
        INFO(Opt::name, " step ", t);
        CHECK(wrapped.lr_factor(t) == sched.fraction(t - 1, 1.0));
        CHECK(same_rule(wrapped.prepare(t), at.prepare(t)));
    }
}

} // namespace

TEST_CASE("lr_scheduled: an outer optimizer wherever the wrapped one has an lr") {
    using cos_nesterov = outer::lr_scheduled<outer::nesterov, schedule::cosine>;
    static_assert(outer_optimizer<cos_nesterov>);
    static_assert(outer_optimizer<outer::lr_scheduled<outer::adam, schedule::warmup<schedule::linear>>>);
    static_assert(cos_nesterov::state_slots == 1);
    static_assert(outer::lr_scheduled<outer::adam, schedule::constant>::state_slots == 2);
    static_assert(outer::has_learning_rate<outer::sgd> && !outer::has_learning_rate<outer::average>);
    static_assert(!can_schedule<outer::average, schedule::constant>);
    static_assert(!can_schedule<outer::sgd, int>);
    static_assert(can_schedule<outer::sgd, schedule::constant>);
    CHECK(std::string(cos_nesterov::name) == "nesterov");
}

TEST_CASE("lr_scheduled: step t runs the wrapped optimizer with lr times the schedule at t - 1") {
    const schedule::cosine cos{.end_fraction = 0.1, .steps = 8};
    check_scheduled_rules(outer::sgd{.lr = 0.9}, cos, 12);
    check_scheduled_rules(outer::nesterov{}, cos, 12);
    check_scheduled_rules(outer::momentum{.lr = 0.3}, schedule::linear{.end_fraction = 0.5, .steps = 4}, 6);
    check_scheduled_rules(outer::adam{.lr = 0.01}, schedule::warmup<schedule::cosine>{.steps = 3, .start_fraction = 0.2,
                                                                                      .then = cos}, 14);
    check_scheduled_rules(outer::sgd{}, schedule::piecewise{.points = {{2, 0.5}, {5, 0.25}}}, 7);
    // The endpoints, computed by hand: full lr at the first outer step, end_fraction from
    // step steps + 1 on; a constant schedule changes nothing.
    const outer::lr_scheduled<outer::nesterov, schedule::cosine> s{.optimizer = {.lr = 0.7}, .schedule = cos};
    CHECK(s.prepare(1).lr == 0.7f);
    CHECK(s.prepare(9).lr == static_cast<float>(0.7 * 0.1));
    CHECK(s.prepare(100).lr == static_cast<float>(0.7 * 0.1));
    CHECK(s.prepare(5).lr == static_cast<float>(0.7 * (0.1 + 0.9 * 0.5 * (1.0 + std::cos(std::numbers::pi * 0.5)))));
    const outer::lr_scheduled<outer::adam, schedule::constant> flat{.optimizer = {.lr = 0.02}};
    for (std::uint64_t t = 1; t < 5; ++t) CHECK(same_rule(flat.prepare(t), outer::adam{.lr = 0.02}.prepare(t)));
}

TEST_CASE("lr_scheduled: a schedule applied over several outer steps through the kernel bodies") {
    // sgd with lr 1, halved from outer step 3: the parameters reach the target, then
    // move half of the remaining way each step.
    using opt = outer::lr_scheduled<outer::sgd, schedule::piecewise>;
    const opt o{.optimizer = {.lr = 1.0}, .schedule = {.points = {{2, 0.5}}}};
    trickle_test::diloco_rig<exec::host, float> rig(exec::host{}, 6, 0);
    rig.set_params({1, 2, 3, 4, 5, 6});
    rig.copy_snapshot();
    std::vector<float> expect{1, 2, 3, 4, 5, 6};
    for (std::uint64_t t = 1; t <= 4; ++t) {
        std::vector<float> g(6);
        for (std::size_t i = 0; i < 6; ++i) g[i] = expect[i] - 10.0f; // always towards 10
        rig.update(o.prepare(t), g, 1.0f);
        const float lr = t <= 2 ? 1.0f : 0.5f;
        for (std::size_t i = 0; i < 6; ++i) expect[i] = expect[i] - lr * g[i];
        const auto snap = trickle_test::download(rig.snapshot);
        for (std::size_t i = 0; i < 6; ++i) CHECK(snap[i] == expect[i]);
    }
    CHECK(expect[0] == 10.0f);
}

TEST_CASE("lr_scheduled: describe adds the schedule's fields; bad ones are reported and thrown") {
    using opt = outer::lr_scheduled<outer::nesterov, schedule::cosine>;
    config_record rec("diloco");
    opt{.schedule = {.end_fraction = 0.2, .steps = 50}}.describe(rec);
    std::string all;
    for (const auto& [k, v] : rec.fields()) all += k + "=" + v + ";";
    CHECK(all == "outer=nesterov;outer.lr=0.69999999999999996;outer.momentum=0.90000000000000002;"
                 "outer.lr_schedule=cosine;outer.lr_end_fraction=0.20000000000000001;outer.lr_schedule_steps=50;");
    CHECK(rec.error().empty());

    check_rejected(opt{.schedule = {.end_fraction = 1.5}},
                   "outer::nesterov lr schedule: schedule::cosine: end_fraction must be in (0, 1], got 1.5");
    check_rejected(opt{.schedule = {.steps = 0}}, "outer::nesterov lr schedule: schedule::cosine: steps must be >= 1");
    check_rejected(outer::lr_scheduled<outer::sgd, schedule::piecewise>{.schedule = {.points = {{3, 0.5}, {3, 0.2}}}},
                   "steps must be strictly increasing");
    check_rejected(outer::lr_scheduled<outer::sgd, schedule::warmup<>>{.schedule = {.start_fraction = 0.0}},
                   "start_fraction must be in (0, 1]");
    // The wrapped optimizer's own fields are checked first.
    check_rejected(opt{.optimizer = {.lr = -1.0}, .schedule = {.end_fraction = 2.0}},
                   "outer::nesterov: lr must be finite and > 0, got -1");
    CHECK_THROWS_WITH_AS(opt{}.prepare(0), doctest::Contains("counted from 1"), invalid_argument);
}

TEST_CASE("lr_scheduled: workers that disagree on the schedule are caught by agree()") {
    using opt = outer::lr_scheduled<outer::adam, schedule::linear>;
    const auto errors = trickle_test::run_collect_errors(3, [](auto& comm) {
        config_record rec("diloco");
        opt{.schedule = {.steps = comm.rank() == 1 ? 99u : 100u}}.describe(rec);
        agree(comm, rec);
    });
    for (const auto& e : errors) CHECK(e.find("outer.lr_schedule_steps: rank 0 has 100, rank 1 has 99") != std::string::npos);
}
