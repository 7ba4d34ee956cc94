// examples/sim/strategies_diloco.cpp: builds trickle::diloco for any outer optimizer and topology chosen at run time.
#include "strategies.hpp"

namespace trickle_sim {

std::unique_ptr<exchanger> make_diloco_exchanger(const sim_config& c, const trickle::param_group<float>& group,
                                                 trickle::comm::local& comm, float weight) {
    const topology_choice top = make_topology(c);
    return std::visit(
        [&](auto out, auto wire) -> std::unique_ptr<exchanger> {
            using algorithm = trickle::diloco<decltype(out), topology_choice, decltype(wire)>;
            return std::make_unique<algorithm_exchanger<algorithm>>(group, comm, make_diloco_options(c, weight), out,
                                                                    top, wire);
        },
        make_outer(c), make_outer_wire(c));
}

} // namespace trickle_sim
