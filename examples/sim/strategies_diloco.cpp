// examples/sim/strategies_diloco.cpp: builds trickle::diloco for any outer optimizer and topology chosen at run time.
#include "strategies.hpp"

namespace trickle_sim {

std::unique_ptr<exchanger> make_diloco_exchanger(const sim_config& c, const trickle::param_group<float>& group,
                                                 trickle::comm::local& comm, float weight) {
    return std::visit(
        [&](auto out, auto top) -> std::unique_ptr<exchanger> {
            using algorithm = trickle::diloco<decltype(out), decltype(top)>;
            return std::make_unique<algorithm_exchanger<algorithm>>(group, comm, make_diloco_options(c, weight), out,
                                                                    top);
        },
        make_outer(c), make_topology(c));
}

} // namespace trickle_sim
