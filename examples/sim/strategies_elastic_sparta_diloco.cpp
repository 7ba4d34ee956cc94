// examples/sim/strategies_elastic_sparta_diloco.cpp: builds trickle::sparta_diloco over comm::elastic_local (--fail, --join, --min-workers).
#include "strategies_impl.hpp"

namespace trickle_sim {

std::unique_ptr<exchanger> make_sparta_diloco_exchanger_elastic(const sim_config& c,
                                                                const trickle::param_group<float>& group,
                                                                trickle::comm::elastic_local& comm,
                                                                const trickle::sparta_options& sparse,
                                                                const trickle::diloco_options& outer_options) {
    return detail::sparta_diloco_exchanger<false>(c, group, comm, sparse, outer_options);
}

} // namespace trickle_sim
