// python/csrc/sparta_diloco.cpp: trickle.SPARTADiLoCo with the outer gradient through a
// codec, one instantiation per sampler (outer::any holds the outer optimizer) (through a sparsifier:
// sparta_diloco_sparse.cpp).
#include "common.hpp"

namespace trickle_py {

std::unique_ptr<bound_algorithm> make_sparta_diloco(process_group_ptr pg, const named_tensors& params,
                                                    const py::dict& opts) {
    const sparta_config sparse = sparta_config::from(opts, "sparta_interval");
    const diloco_config config = diloco_config::from(opts);
    auto out = bind_group("SPARTADiLoCo", std::move(pg), params);
    py::gil_scoped_release release;
    if (config.wire.sparse)
        out->set(sparta_diloco_sparsified(*out, params, sparse, config));
    else
        out->set(out->with_comm(
            [&](auto& comm) { return build_sparta_diloco(comm, params, sparse, config, config.wire.codec); }));
    return out;
}

} // namespace trickle_py
