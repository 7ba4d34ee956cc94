// examples/sim/strategies_sparta.cpp: builds trickle::sparta for any sampler, fraction schedule and topology chosen at run time.
#include "strategies_impl.hpp"

namespace trickle_sim {

std::unique_ptr<exchanger> make_sparta_exchanger(const sim_config& c, const trickle::param_group<float>& group,
                                                 trickle::comm::local& comm) {
    return detail::sparta_exchanger<false>(c, group, comm, make_sparta_options(c));
}

} // namespace trickle_sim
