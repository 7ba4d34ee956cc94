// examples/sim/strategies_sparta_diloco_overlap.cpp: sparta-diloco with --overlap over comm::async<comm::local>.
#include "strategies_impl.hpp"

namespace trickle_sim {

std::unique_ptr<exchanger> make_sparta_diloco_exchanger_async(const sim_config& c,
                                                              const trickle::param_group<float>& group,
                                                              trickle::comm::local& comm, float weight) {
    return detail::sparta_diloco_exchanger<true>(c, group, comm, make_sparta_options(c),
                                                 make_diloco_options(c, weight));
}

} // namespace trickle_sim
