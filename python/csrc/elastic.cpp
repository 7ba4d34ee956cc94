// python/csrc/elastic.cpp: trickle.DiLoCo(..., elastic=trickle.Elastic(...)), DiLoCo over
// comm::elastic_group (the view in a torch.distributed store, each epoch over Gloo), one
// instantiation per outer optimizer.
#include "common.hpp"

namespace trickle_py {

std::unique_ptr<bound_algorithm> make_diloco_elastic(store_ptr store, int id, int initial, std::int64_t timeout_ms,
                                                     std::int64_t liveness_ms, const std::string& job,
                                                     const named_tensors& params, const py::dict& opts) {
    const outer_values outer = outer_values::from(opts);
    trickle::diloco_options options = diloco_opts(opts);
    options.min_workers = get<int>(opts, "min_workers");
    const trickle::topology::any topology = make_topology(opts);
    const trickle::codec::any codec = make_codec(opts, "outer_codec");
    // (trickle.Elastic checks its arguments; elastic_group checks them again, in its words.)
    trickle::comm::elastic_group_options eo;
    eo.initial = initial;
    eo.timeout = std::chrono::milliseconds(timeout_ms);
    eo.job = job;
    eo.liveness = std::chrono::milliseconds(liveness_ms);
    py::gil_scoped_release release;
    auto out = std::make_unique<bound_algorithm>("DiLoCo", std::move(store), id, eo);
    options.join = !out->elastic().member();
    out->set(with_outer(outer, [&](auto o) -> std::unique_ptr<algorithm_base> {
        using wrapper = trickle::torch::diloco<decltype(o), trickle::topology::any, trickle::codec::any>;
        return std::make_unique<algorithm_impl<wrapper>>(params, out->elastic(), options, o, topology, codec);
    }));
    return out;
}

} // namespace trickle_py
