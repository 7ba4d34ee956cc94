// python/csrc/diloco.cpp: trickle.DiLoCo, one instantiation per outer optimizer.
#include "common.hpp"

namespace trickle_py {

std::unique_ptr<bound_algorithm> make_diloco(process_group_ptr pg, const named_tensors& params, const py::dict& opts) {
    const outer_values outer = outer_values::from(opts);
    const trickle::diloco_options options = diloco_opts(opts);
    const trickle::topology::any topology = make_topology(opts);
    const trickle::codec::any codec = make_codec(opts, "outer_codec");
    auto out = std::make_unique<bound_algorithm>("DiLoCo", std::move(pg));
    py::gil_scoped_release release;
    out->set(with_outer(outer, [&](auto o) -> std::unique_ptr<algorithm_base> {
        using wrapper = trickle::torch::diloco<decltype(o), trickle::topology::any, trickle::codec::any>;
        return std::make_unique<algorithm_impl<wrapper>>(params, out->comm(), options, o, topology, codec);
    }));
    return out;
}

} // namespace trickle_py
