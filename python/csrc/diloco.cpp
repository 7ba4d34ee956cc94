// python/csrc/diloco.cpp: trickle.DiLoCo with the outer gradient through a codec, one
// instantiation per outer optimizer (through a sparsifier: diloco_sparse.cpp).
#include "common.hpp"

namespace trickle_py {

std::unique_ptr<bound_algorithm> make_diloco(process_group_ptr pg, const named_tensors& params, const py::dict& opts) {
    const diloco_config config = diloco_config::from(opts);
    auto out = std::make_unique<bound_algorithm>("DiLoCo", std::move(pg));
    py::gil_scoped_release release;
    if (config.wire.sparse)
        out->set(diloco_sparsified(out->comm(), params, config));
    else
        out->set(build_diloco(out->comm(), params, config, config.wire.codec));
    return out;
}

} // namespace trickle_py
