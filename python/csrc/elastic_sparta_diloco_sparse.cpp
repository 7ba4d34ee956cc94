// python/csrc/elastic_sparta_diloco_sparse.cpp: trickle.SPARTADiLoCo(elastic=...,
// outer_sparsifier=...), SPARTA + DiLoCo over comm::elastic_group with the outer gradient
// through a sparsifier, one instantiation per sampler (the outer optimizer is outer::any)
// (make_elastic, elastic.cpp, builds it).
#include "common.hpp"

namespace trickle_py {

std::unique_ptr<algorithm_base> sparta_diloco_sparsified_on_elastic(trickle::comm::elastic_group& comm,
                                                                    const named_tensors& params,
                                                                    const sparta_config& sc, const diloco_config& c) {
    return build_sparta_diloco(comm, params, sc, c, *c.wire.sparse);
}

} // namespace trickle_py
