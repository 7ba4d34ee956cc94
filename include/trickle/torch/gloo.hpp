// trickle/torch/gloo.hpp: comm::gloo_group, a c10d Gloo process group made the same way on every torch.
//
// Part of the trickle::torch component; needs USE_C10D_GLOO (torch's CMake targets define
// it; torch.utils.cpp_extension does not: trickle's setup.py does). In torch 1.x
// c10d::ProcessGroupGloo is a c10d::ProcessGroup; from torch 2.0 it is a c10d::Backend that
// a ProcessGroup dispatches to. gloo_group() hides the difference, as torch.distributed's
// new_group does in Python: the same intrusive_ptr<c10d::ProcessGroup> either way, ready
// for comm::process_group.
#pragma once

#include <trickle/config.hpp>

#ifndef USE_C10D_GLOO
#error "trickle/torch/gloo.hpp needs torch's Gloo process group: define USE_C10D_GLOO (torch's CMake targets do)"
#endif

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <memory>
#include <string>
#include <type_traits>

TRICKLE_NAMESPACE_BEGIN

namespace detail {

// Gloo and PG are template parameters only so that the branch a torch version does not
// take is never compiled against it.
template <class Gloo = c10d::ProcessGroupGloo, class PG = c10d::ProcessGroup>
c10::intrusive_ptr<PG> make_gloo_group(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                       const c10::intrusive_ptr<typename Gloo::Options>& options) {
    if constexpr (std::is_base_of_v<PG, Gloo>) {
        return c10::make_intrusive<Gloo>(store, rank, size, options); // torch 1.x
    } else {
        auto group = c10::make_intrusive<PG>(store, rank, size); // torch 2.x: a group over a Gloo backend
        auto backend = c10::make_intrusive<Gloo>(store, rank, size, options);
        group->setDefaultBackend(PG::BackendType::GLOO);
        group->setBackend(c10::DeviceType::CPU, PG::BackendType::GLOO, backend);
        return group;
    }
}

} // namespace detail

namespace comm {

// A Gloo process group of `size` ranks over `store` (every rank passes the same store
// contents, e.g. a c10d::TCPStore or a PrefixStore over one), this process as `rank`.
// `device`: Gloo's transport device (null: createDeviceForHostname(hostname), or Gloo's
// default device when hostname is empty). Collectives that take longer than `timeout` fail.
inline c10::intrusive_ptr<c10d::ProcessGroup>
gloo_group(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
           std::chrono::milliseconds timeout = std::chrono::milliseconds(30 * 60 * 1000),
           const std::string& hostname = "127.0.0.1",
           std::shared_ptr<::gloo::transport::Device> device = nullptr) {
    auto opts = c10d::ProcessGroupGloo::Options::create(timeout);
    if (!device)
        device = hostname.empty() ? c10d::ProcessGroupGloo::createDefaultDevice()
                                  : c10d::ProcessGroupGloo::createDeviceForHostname(hostname);
    opts->devices.push_back(std::move(device));
    return detail::make_gloo_group(store, rank, size, opts);
}

} // namespace comm

TRICKLE_NAMESPACE_END
