// trickle/outer/average.hpp: outer::average, plain averaging of the workers' parameters (FedAvg).
//
// Update, with g the averaged outer gradient (snapshot minus the workers' parameters):
//     p <- p - g
// Since every worker starts the round from the same snapshot, this sets the parameters to
// the (weighted) mean of the workers' parameters. It equals outer::sgd{.lr = 1} bit for
// bit (torch.optim.SGD(lr=1), whose p + (-1) * g is the same rounding), but has no field
// to get wrong and no learning rate in its configuration record. No state.
#pragma once

#include <trickle/core/config_record.hpp>
#include <trickle/config.hpp>
#include <trickle/outer/outer_optimizer.hpp>
#include <trickle/kernels/outer_rule.hpp>

#include <cstdint>

TRICKLE_NAMESPACE_BEGIN

namespace outer {

struct average_rule {
    static constexpr int state_slots = 0;

    TRICKLE_HOST_DEVICE void apply(float& p, float g, float* /*state*/) const { p = p - g; }
};

struct average {
    static constexpr const char* name = "average";
    static constexpr int state_slots = 0;

    void describe(config_record& rec) const { rec.add("outer", name); }

    average_rule prepare(std::uint64_t t) const {
        detail::check_outer_step(name, t);
        return {};
    }
};

} // namespace outer

static_assert(outer_optimizer<outer::average>);

TRICKLE_NAMESPACE_END
