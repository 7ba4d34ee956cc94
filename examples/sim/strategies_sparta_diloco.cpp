// examples/sim/strategies_sparta_diloco.cpp: builds trickle::sparta_diloco for any sampler, schedule, topology and outer optimizer.
#include "strategies.hpp"

namespace trickle_sim {

std::unique_ptr<exchanger> make_sparta_diloco_exchanger(const sim_config& c, const trickle::param_group<float>& group,
                                                        trickle::comm::local& comm, float weight) {
    const topology_choice top = make_topology(c);
    return std::visit(
        [&](auto sam, auto sch, auto out, auto wire) -> std::unique_ptr<exchanger> {
            using algorithm = trickle::sparta_diloco<decltype(sam), decltype(sch), topology_choice, decltype(out),
                                                     trickle::codec::any, decltype(wire)>;
            return std::make_unique<algorithm_exchanger<algorithm>>(
                group, comm, make_sparta_options(c), make_diloco_options(c, weight), sam, sch, top, out,
                make_codec(c.codec, c.codec_block), wire);
        },
        make_sampler(c), make_schedule(c), make_outer(c), make_outer_wire(c));
}

} // namespace trickle_sim
