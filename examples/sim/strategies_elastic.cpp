// examples/sim/strategies_elastic.cpp: builds trickle::diloco and trickle::sparta over comm::elastic_local (--fail, --join, --min-workers).
#include "strategies_impl.hpp"

namespace trickle_sim {

std::unique_ptr<exchanger> make_diloco_exchanger_elastic(const sim_config& c, const trickle::param_group<float>& group,
                                                         trickle::comm::elastic_local& comm,
                                                         const trickle::diloco_options& options) {
    return detail::diloco_exchanger<false>(c, group, comm, options);
}

std::unique_ptr<exchanger> make_sparta_exchanger_elastic(const sim_config& c, const trickle::param_group<float>& group,
                                                         trickle::comm::elastic_local& comm,
                                                         const trickle::sparta_options& options) {
    return detail::sparta_exchanger<false>(c, group, comm, options);
}

} // namespace trickle_sim
