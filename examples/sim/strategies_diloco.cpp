// examples/sim/strategies_diloco.cpp: builds trickle::diloco for any outer optimizer and topology chosen at run time.
#include "strategies.hpp"

namespace trickle_sim {

std::unique_ptr<exchanger> make_diloco_exchanger(const sim_config& c, const trickle::param_group<float>& group,
                                                 trickle::comm::local& comm, float weight) {
    const topology_choice top = make_topology(c);
    return std::visit(
        [&](auto out) -> std::unique_ptr<exchanger> {
            using algorithm = trickle::diloco<decltype(out), topology_choice, trickle::codec::any>;
            return std::make_unique<algorithm_exchanger<algorithm>>(group, comm, make_diloco_options(c, weight), out,
                                                                    top, make_codec(c.outer_codec, c.codec_block));
        },
        make_outer(c));
}

} // namespace trickle_sim
