// python/csrc/elastic_sparta.cpp: trickle.SPARTA(elastic=...), SPARTA over
// comm::elastic_group, one instantiation per sampler (make_elastic, elastic.cpp, builds it).
#include "common.hpp"

namespace trickle_py {

std::unique_ptr<algorithm_base> sparta_on_elastic(trickle::comm::elastic_group& comm, const named_tensors& params,
                                                  const sparta_config& c, const trickle::topology::any& topology) {
    return with_sampler(c.sampler, [&](const auto& s) -> std::unique_ptr<algorithm_base> {
        using wrapper = model_sparta<std::remove_cvref_t<decltype(s)>>;
        return std::make_unique<algorithm_impl<wrapper>>(params, comm, c, s, topology);
    });
}

} // namespace trickle_py
