// trickle/algorithm/detail/device.hpp: where an algorithm's CUDA work runs: the parameters' device and the communicator's stream.
#pragma once

#include <trickle/algorithm/flat_params.hpp>
#include <trickle/config.hpp>
#include <trickle/core/memory_space.hpp>
#include <trickle/core/param_group.hpp>
#include <trickle/error.hpp>
#include <trickle/exec/cuda.hpp>

#include <cstdint>
#include <type_traits>

TRICKLE_NAMESPACE_BEGIN

namespace detail {

// The exec::cuda an algorithm over cuda_space parameters launches with: the
// communicator's stream, on the device every tensor of the group lives on (checked here,
// with the communicator's device where it has one). Throws invalid_argument naming what
// disagrees, or when the stream is the legacy default stream (trickle never enqueues
// there: it would serialize with the whole device).
template <class Comm, class T>
exec::cuda algorithm_exec(Comm& comm, const param_group<T, cuda_space>& group, const char* kind,
                          CUmemPoolHandle_st* pool = nullptr) {
#if TRICKLE_HAS_CUDA
    exec::cuda ex{};
    ex.pool = pool;
    if constexpr (requires { comm.stream(); }) ex.stream = comm.stream();
    require(ex.stream != nullptr, kind,
            ": the communicator's stream is the legacy default stream; CUDA steps need a stream of their own "
            "(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking))");
    int device = -1;
    for (const auto& e : group.entries()) {
        if (e.view.size() == 0) continue;
        cudaPointerAttributes attr{};
        TRICKLE_CUDA_CHECK(cudaPointerGetAttributes(&attr, e.view.data()));
        if (device < 0) device = attr.device;
        require(attr.device == device, kind, ": tensor '", e.name, "' is on device ", attr.device,
                " but the group's first tensor is on device ", device, "; a group lives on one device");
    }
    if constexpr (requires { comm.device(); }) {
        require(device < 0 || comm.device() == device, kind, ": the parameters are on device ", device,
                " but the communicator works on device ", comm.device());
        if (device < 0) device = comm.device();
    }
    const int on_stream = stream_device(ex.stream);
    require(device < 0 || on_stream == device, kind, ": the communicator's stream belongs to device ", on_stream,
            " but the parameters are on device ", device);
    ex.device = device < 0 ? on_stream : device;
    return ex;
#else
    (void)comm, (void)group, (void)pool;
    throw invalid_argument(concat(kind, ": CUDA parameters need the CUDA runtime (link trickle::cuda)"));
#endif
}

// Builds the group's segment and offset tables where its kernels run, and binds the
// workspace: on the communicator's stream for cuda_space (returning that exec::cuda), in
// host memory otherwise (returning an exec::cuda that is never used).
template <class Comm, class T, class Space, class Workspace>
exec::cuda place_group(Comm& comm, const param_group<T, Space>& group, const char* kind, flat_params<T, Space>& flat,
                       Workspace& ws, CUmemPoolHandle_st* pool = nullptr) {
    if constexpr (std::is_same_v<Space, cuda_space>) {
        const exec::cuda ex = algorithm_exec(comm, group, kind, pool);
        flat = flat_params<T, Space>(group, ex);
        ws.bind(ex);
        return ex;
    } else {
        (void)comm, (void)kind, (void)ws, (void)pool;
        flat = flat_params<T, Space>(group);
        return exec::cuda{};
    }
}

// Throws invalid_argument with `message` when work on ex's stream is being captured into a
// CUDA graph (for steps whose host-side state a replay would not advance).
inline void refuse_capture(const exec::cuda& ex, const char* message) {
#if TRICKLE_HAS_CUDA
    if (stream_capturing(ex.stream)) throw invalid_argument(message);
#else
    (void)ex, (void)message;
#endif
}

// Checks that a step's exec::cuda runs where the algorithm was built to run.
inline void check_step_exec(const exec::cuda& step, const exec::cuda& built, const char* kind) {
    require(step.device < 0 || step.device == built.device, kind, "::step: exec::cuda names device ", step.device,
            " but the parameters are on device ", built.device);
}

} // namespace detail

TRICKLE_NAMESPACE_END
