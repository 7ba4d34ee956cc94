// python/csrc/diloco_sparse.cpp: trickle.DiLoCo with the outer gradient through a
// sparsifier (outer_sparsifier=), one instantiation (outer::any).
#include "common.hpp"

namespace trickle_py {

std::unique_ptr<algorithm_base> diloco_sparsified(bound_algorithm& out, const named_tensors& params,
                                                  const diloco_config& c) {
    return out.with_comm([&](auto& comm) { return build_diloco(comm, params, c, *c.wire.sparse); });
}

} // namespace trickle_py
