// python/csrc/sparta.cpp: trickle.SPARTA, one instantiation per sampler.
#include "common.hpp"

namespace trickle_py {

std::unique_ptr<bound_algorithm> make_sparta(process_group_ptr pg, const named_tensors& params, const py::dict& opts) {
    const sampler_config sampler = sampler_config::from(opts);
    const trickle::sparta_options options = sparta_opts(opts, "interval");
    const trickle::schedule::any schedule = make_schedule(opts);
    const trickle::topology::any topology = make_topology(opts);
    const trickle::codec::any codec = make_codec(opts, "codec");
    auto out = std::make_unique<bound_algorithm>("SPARTA", std::move(pg));
    py::gil_scoped_release release;
    out->set(with_sampler(sampler, [&](auto s) -> std::unique_ptr<algorithm_base> {
        using wrapper =
            trickle::torch::sparta<decltype(s), trickle::schedule::any, trickle::topology::any, trickle::codec::any>;
        return std::make_unique<algorithm_impl<wrapper>>(params, out->comm(), options, s, schedule, topology, codec);
    }));
    return out;
}

} // namespace trickle_py
