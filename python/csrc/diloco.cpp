// python/csrc/diloco.cpp: trickle.DiLoCo with the outer gradient through a codec, one
// instantiation (outer::any holds the outer optimizer; through a sparsifier: diloco_sparse.cpp).
#include "common.hpp"

namespace trickle_py {

std::unique_ptr<bound_algorithm> make_diloco(process_group_ptr pg, const named_tensors& params, const py::dict& opts) {
    const diloco_config config = diloco_config::from(opts);
    auto out = bind_group("DiLoCo", std::move(pg), params);
    py::gil_scoped_release release;
    if (config.wire.sparse)
        out->set(diloco_sparsified(*out, params, config));
    else
        out->set(out->with_comm([&](auto& comm) { return build_diloco(comm, params, config, config.wire.codec); }));
    return out;
}

} // namespace trickle_py
