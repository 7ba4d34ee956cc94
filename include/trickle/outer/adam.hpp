// trickle/outer/adam.hpp: outer::adam, Adam on the outer gradient (torch.optim.Adam, no weight decay).
//
// With g the averaged outer gradient, m and v the first and second moments (two state
// slots, read as 0 at t == 1), at outer step t:
//     m <- m + w * (g - m)              w = 1 - beta1: torch's exp_avg.lerp_(grad, w)
//                                       (for w >= 0.5 torch's lerp is g - (g - m) * (1 - w))
//     v <- v * beta2 + (1 - beta2) * g * g
//     step_size = lr / (1 - beta1^t)
//     denom     = sqrt(v) / sqrt(1 - beta2^t) + eps
//     p <- p + (-step_size) * m / denom
// torch equivalent: torch.optim.Adam(params, lr, betas=(beta1, beta2), eps), weight_decay 0,
// amsgrad False, maximize False, following the single-tensor (foreach=False) code: the
// per-step scalars (1 - beta1, 1 - beta2, the bias corrections, step_size and
// sqrt(1 - beta2^t)) are computed in double from the double-precision fields and rounded
// to float once; every elementwise operation is one fp32 rounding in torch's order. The
// foreach and fused CUDA kernels of torch associate some products differently and agree
// with this to a few ulps.
//
// Defaults are torch's: lr 1e-3, betas (0.9, 0.999), eps 1e-8. Adam's step is about lr per
// element per outer round whatever the size of the outer gradient, so for DiLoCo choose lr
// near the distance a parameter moves in one round (the DiLoCo paper ranks outer Adam
// behind Nesterov: 15.45 against 15.02 perplexity).
#pragma once

#include <trickle/core/config_record.hpp>
#include <trickle/config.hpp>
#include <trickle/error.hpp>
#include <trickle/outer/outer_optimizer.hpp>
#include <trickle/kernels/outer_rule.hpp>

#include <cmath>
#include <cstdint>
#include <string>

TRICKLE_NAMESPACE_BEGIN

namespace outer {

struct adam_rule {
    static constexpr int state_slots = 2; // 0: exp_avg (m), 1: exp_avg_sq (v)

    float lerp_weight = 0.0f;        // float(1 - beta1)
    float lerp_complement = 0.0f;    // 1 - lerp_weight, in float as torch's lerp computes it
    bool lerp_small = true;          // |lerp_weight| < 0.5 selects torch's m + w * (g - m) form
    float beta2 = 0.0f;              // float(beta2)
    float one_minus_beta2 = 0.0f;    // float(1 - beta2)
    float bias_correction2_sqrt = 1; // float(sqrt(1 - beta2^t))
    float eps = 0.0f;
    float neg_step_size = 0.0f;      // float(-(lr / (1 - beta1^t)))
    bool first = true;               // t == 1: the moments start at zero; stored values are not read

    TRICKLE_HOST_DEVICE void apply(float& p, float g, float* state) const {
        const float m0 = first ? 0.0f : state[0];
        const float v0 = first ? 0.0f : state[1];
        const float m = lerp_small ? m0 + mul_rn(lerp_weight, g - m0) : g - mul_rn(g - m0, lerp_complement);
        const float v = mul_rn(v0, beta2) + mul_rn(mul_rn(one_minus_beta2, g), g);
        state[0] = m;
        state[1] = v;
        const float denom = sqrtf(v) / bias_correction2_sqrt + eps;
        p = p + mul_rn(neg_step_size, m) / denom;
    }
};

struct adam {
    static constexpr const char* name = "adam";
    static constexpr int state_slots = 2;

    double lr = 1e-3;
    double beta1 = 0.9;
    double beta2 = 0.999;
    double eps = 1e-8;

    // "" when every field is valid, else the first problem.
    std::string validate() const {
        return trickle::detail::first_error(trickle::detail::check_learning_rate(name, lr),
                                            trickle::detail::check_decay(name, "beta1", beta1),
                                            trickle::detail::check_decay(name, "beta2", beta2),
                                            trickle::detail::check_epsilon(name, eps));
    }

    void describe(config_record& rec) const {
        rec.add("outer", name);
        rec.add("outer.lr", lr);
        rec.add("outer.beta1", beta1);
        rec.add("outer.beta2", beta2);
        rec.add("outer.eps", eps);
        if (auto e = validate(); !e.empty()) rec.set_error(std::move(e));
    }

    adam_rule prepare(std::uint64_t t) const {
        trickle::detail::check_outer_step(name, t);
        if (auto e = validate(); !e.empty()) throw invalid_argument(e);
        // torch: step is a float, beta ** step is C pow on doubles.
        const double step = static_cast<double>(t);
        const double bias_correction1 = 1.0 - std::pow(beta1, step);
        const double bias_correction2 = 1.0 - std::pow(beta2, step);
        adam_rule r;
        r.lerp_weight = static_cast<float>(1.0 - beta1);
        r.lerp_complement = 1.0f - r.lerp_weight;
        r.lerp_small = std::fabs(r.lerp_weight) < 0.5f;
        r.beta2 = static_cast<float>(beta2);
        r.one_minus_beta2 = static_cast<float>(1.0 - beta2);
        r.bias_correction2_sqrt = static_cast<float>(std::sqrt(bias_correction2));
        r.eps = static_cast<float>(eps);
        r.neg_step_size = static_cast<float>(-(lr / bias_correction1));
        r.first = t == 1;
        return r;
    }
};

} // namespace outer

static_assert(outer_optimizer<outer::adam>);

TRICKLE_NAMESPACE_END
