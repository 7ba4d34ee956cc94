// trickle/outer/sgd.hpp: outer::sgd, plain gradient descent on the outer gradient.
//
// Update, with g the averaged outer gradient and lr rounded to float:
//     p <- p - lr * g
// torch equivalent: torch.optim.SGD(params, lr=lr) (momentum 0, weight_decay 0), whose
// param.add_(grad, alpha=-lr) computes p + (-lr) * g, the same rounding. lr = 1 is plain
// averaging (outer::average); lr < 1 moves only part of the way to the workers' mean. The
// default lr = 1 is that FedAvg point, the DiLoCo paper's outer-SGD baseline. No state.
#pragma once

#include <trickle/core/config_record.hpp>
#include <trickle/config.hpp>
#include <trickle/error.hpp>
#include <trickle/outer/outer_optimizer.hpp>
#include <trickle/kernels/outer_rule.hpp>

#include <cstdint>
#include <string>

TRICKLE_NAMESPACE_BEGIN

namespace outer {

struct sgd_rule {
    static constexpr int state_slots = 0;
    float lr = 1.0f;

    TRICKLE_HOST_DEVICE void apply(float& p, float g, float* /*state*/) const { p = p - mul_rn(lr, g); }
};

struct sgd {
    static constexpr const char* name = "sgd";
    static constexpr int state_slots = 0;

    double lr = 1.0;

    // "" when every field is valid, else the first problem.
    std::string validate() const { return detail::check_learning_rate(name, lr); }

    void describe(config_record& rec) const {
        rec.add("outer", name);
        rec.add("outer.lr", lr);
        if (auto e = validate(); !e.empty()) rec.set_error(std::move(e));
    }

    sgd_rule prepare(std::uint64_t t) const {
        detail::check_outer_step(name, t);
        if (auto e = validate(); !e.empty()) throw invalid_argument(e);
        return sgd_rule{static_cast<float>(lr)};
    }
};

} // namespace outer

static_assert(outer_optimizer<outer::sgd>);

TRICKLE_NAMESPACE_END
