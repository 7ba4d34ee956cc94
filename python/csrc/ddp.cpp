// python/csrc/ddp.cpp: trickle.DDP, the dense baseline (trickle::torch::ddp over CPU parameters).
#include "common.hpp"

namespace trickle_py {

std::unique_ptr<bound_algorithm> make_ddp(process_group_ptr pg, const named_tensors& params, const py::dict& opts) {
    trickle::ddp_options o;
    o.interval = get<std::uint64_t>(opts, "interval");
    o.broadcast_initial = get<bool>(opts, "broadcast_initial");
    // Always over host memory: CUDA parameters are refused by the wrapper on every rank
    // alike (their group does not match the communicator), after the Python layer's check.
    auto out = std::make_unique<bound_algorithm>("DDP", std::move(pg));
    py::gil_scoped_release release;
    out->set(out->with_host_comm([&](auto& comm) -> std::unique_ptr<algorithm_base> {
        return std::make_unique<algorithm_impl<trickle::torch::ddp>>(params, comm, o);
    }));
    return out;
}

} // namespace trickle_py
