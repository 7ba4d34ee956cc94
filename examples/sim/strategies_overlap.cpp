// examples/sim/strategies_overlap.cpp: SPARTA with --overlap and streaming DiLoCo (tau > 0) over comm::async<comm::local>.
#include "strategies_impl.hpp"

namespace trickle_sim {

std::unique_ptr<exchanger> make_sparta_exchanger_async(const sim_config& c, const trickle::param_group<float>& group,
                                                       trickle::comm::local& comm) {
    return detail::sparta_exchanger<true>(c, group, comm, make_sparta_options(c));
}

std::unique_ptr<exchanger> make_diloco_exchanger_async(const sim_config& c, const trickle::param_group<float>& group,
                                                       trickle::comm::local& comm,
                                                       const trickle::diloco_options& options) {
    return detail::diloco_exchanger<true>(c, group, comm, options);
}

} // namespace trickle_sim
