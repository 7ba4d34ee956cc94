// python/csrc/sparta_diloco_sparse.cpp: trickle.SPARTADiLoCo with the outer gradient
// through a sparsifier (outer_sparsifier=), one instantiation per sampler
// (outer::any holds the outer optimizer).
#include "common.hpp"

namespace trickle_py {

std::unique_ptr<algorithm_base> sparta_diloco_sparsified(bound_algorithm& out, const named_tensors& params,
                                                         const sparta_config& sc, const diloco_config& c) {
    return out.with_comm([&](auto& comm) { return build_sparta_diloco(comm, params, sc, c, *c.wire.sparse); });
}

} // namespace trickle_py
