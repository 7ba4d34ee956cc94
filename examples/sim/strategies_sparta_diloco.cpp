// examples/sim/strategies_sparta_diloco.cpp: builds trickle::sparta_diloco for any sampler, schedule, topology and outer optimizer.
#include "strategies_impl.hpp"

namespace trickle_sim {

std::unique_ptr<exchanger> make_sparta_diloco_exchanger(const sim_config& c, const trickle::param_group<float>& group,
                                                        trickle::comm::local& comm, float weight) {
    return detail::sparta_diloco_exchanger<false>(c, group, comm, make_sparta_options(c),
                                                  make_diloco_options(c, weight));
}

} // namespace trickle_sim
