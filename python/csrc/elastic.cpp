// python/csrc/elastic.cpp: trickle.DiLoCo(..., elastic=trickle.Elastic(...)), DiLoCo over
// comm::elastic_group (the view in a torch.distributed store, each epoch over Gloo), one
// instantiation per outer optimizer and outer-gradient route (codec or sparsifier).
#include "common.hpp"

namespace trickle_py {

std::unique_ptr<bound_algorithm> make_diloco_elastic(store_ptr store, int id, int initial, std::int64_t timeout_ms,
                                                     std::int64_t liveness_ms, const std::string& job,
                                                     std::int64_t start_timeout_ms, std::int64_t join_timeout_ms,
                                                     const std::string& hostname, const named_tensors& params,
                                                     const py::dict& opts) {
    diloco_config config = diloco_config::from(opts);
    config.options.min_workers = get<int>(opts, "min_workers");
    // (trickle.Elastic checks its arguments; elastic_group checks them again, in its words.)
    trickle::comm::elastic_group_options eo;
    eo.initial = initial;
    eo.timeout = std::chrono::milliseconds(timeout_ms);
    eo.job = job;
    eo.liveness = std::chrono::milliseconds(liveness_ms);
    eo.start_timeout = std::chrono::milliseconds(start_timeout_ms);
    eo.join_timeout = std::chrono::milliseconds(join_timeout_ms);
    eo.hostname = hostname;
    py::gil_scoped_release release;
    auto out = std::make_unique<bound_algorithm>("DiLoCo", std::move(store), id, eo);
    config.options.join = !out->elastic().member();
    if (config.wire.sparse)
        out->set(build_diloco(out->elastic(), params, config, *config.wire.sparse));
    else
        out->set(build_diloco(out->elastic(), params, config, config.wire.codec));
    return out;
}

} // namespace trickle_py
