// examples/sim/strategies_sparta.cpp: builds trickle::sparta for any sampler, fraction schedule and topology chosen at run time.
#include "strategies.hpp"

namespace trickle_sim {

std::unique_ptr<exchanger> make_sparta_exchanger(const sim_config& c, const trickle::param_group<float>& group,
                                                 trickle::comm::local& comm) {
    const topology_choice top = make_topology(c);
    return std::visit(
        [&](auto sam, auto sch) -> std::unique_ptr<exchanger> {
            using algorithm = trickle::sparta<decltype(sam), decltype(sch), topology_choice, trickle::codec::any>;
            return std::make_unique<algorithm_exchanger<algorithm>>(group, comm, make_sparta_options(c), sam, sch, top,
                                                                    make_codec(c.codec, c.codec_block));
        },
        make_sampler(c), make_schedule(c));
}

} // namespace trickle_sim
