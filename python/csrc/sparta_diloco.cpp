// python/csrc/sparta_diloco.cpp: trickle.SPARTADiLoCo, one instantiation per (sampler, outer optimizer).
#include "common.hpp"

namespace trickle_py {

std::unique_ptr<bound_algorithm> make_sparta_diloco(process_group_ptr pg, const named_tensors& params,
                                                    const py::dict& opts) {
    const sampler_config sampler = sampler_config::from(opts);
    const outer_values outer = outer_values::from(opts);
    const trickle::sparta_options sparse = sparta_opts(opts, "sparta_interval");
    const trickle::diloco_options outer_options = diloco_opts(opts);
    const trickle::schedule::any schedule = make_schedule(opts);
    const trickle::topology::any topology = make_topology(opts);
    const trickle::codec::any codec = make_codec(opts, "codec");
    const trickle::codec::any outer_codec = make_codec(opts, "outer_codec");
    auto out = std::make_unique<bound_algorithm>("SPARTADiLoCo", std::move(pg));
    py::gil_scoped_release release;
    out->set(with_sampler(sampler, [&](auto s) -> std::unique_ptr<algorithm_base> {
        return with_outer(outer, [&](auto o) -> std::unique_ptr<algorithm_base> {
            using wrapper = trickle::torch::sparta_diloco<decltype(s), trickle::schedule::any, trickle::topology::any,
                                                          decltype(o), trickle::codec::any, trickle::codec::any>;
            return std::make_unique<algorithm_impl<wrapper>>(params, out->comm(), sparse, outer_options, s, schedule,
                                                             topology, o, codec, outer_codec);
        });
    }));
    return out;
}

} // namespace trickle_py
