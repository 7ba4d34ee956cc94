// python/csrc/sparta.cpp: trickle.SPARTA, one instantiation per sampler.
#include "common.hpp"

namespace trickle_py {

std::unique_ptr<bound_algorithm> make_sparta(process_group_ptr pg, const named_tensors& params, const py::dict& opts) {
    const sparta_config config = sparta_config::from(opts, "interval");
    const trickle::topology::any topology = make_topology(opts);
    auto out = bind_group("SPARTA", std::move(pg), params);
    py::gil_scoped_release release;
    out->set(out->with_comm([&](auto& comm) {
        return with_sampler(config.sampler, [&](const auto& s) -> std::unique_ptr<algorithm_base> {
            using wrapper = model_sparta<std::remove_cvref_t<decltype(s)>>;
            return std::make_unique<algorithm_impl<wrapper>>(params, comm, config, s, topology);
        });
    }));
    return out;
}

} // namespace trickle_py
