// examples/sim/strategies_diloco.cpp: builds trickle::diloco for any outer optimizer and topology chosen at run time.
#include "strategies_impl.hpp"

namespace trickle_sim {

std::unique_ptr<exchanger> make_diloco_exchanger(const sim_config& c, const trickle::param_group<float>& group,
                                                 trickle::comm::local& comm, const trickle::diloco_options& options) {
    return detail::diloco_exchanger<false>(c, group, comm, options);
}

} // namespace trickle_sim
