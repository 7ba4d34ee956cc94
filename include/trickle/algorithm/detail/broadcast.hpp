// trickle/algorithm/detail/broadcast.hpp: the initial broadcast that starts every replica from rank 0's parameters.
//
// One home for SPARTA, DiLoCo and SPARTA + DiLoCo: the group is copied into an fp32
// staging array (the kernels' snapshot bodies, so fp16 and bf16 parameters travel as the
// exact fp32 images of their values and come back unchanged), broadcast from rank 0 in one
// call, and copied back. Every worker then holds rank 0's bits. The traffic is returned
// so that the algorithms report it as exchange_stats::initial.
#pragma once

#include <trickle/comm/communicator.hpp>
#include <trickle/config.hpp>
#include <trickle/exec/execution_space.hpp>
#include <trickle/kernels/chunking.hpp>
#include <trickle/kernels/flat_view.hpp>
#include <trickle/kernels/stream/body.hpp>

#if TRICKLE_CUDA_COMPILER
#include <trickle/kernels/stream/dispatch.hpp>
#endif

#include <cstddef>
#include <cstdint>

TRICKLE_NAMESPACE_BEGIN

namespace detail {

// Host parameters: staging holds n floats. Leaves staging equal to the broadcast values.
template <class Comm, class T>
traffic_counters broadcast_group_host(Comm& comm, const flat_view<T>& params, std::size_t n, float* staging) {
    const traffic_counters before = comm.traffic();
    if (comm.size() <= 1 || n == 0) return {};
    const exec::host ex{};
    const auto out = ranges<host_space>(snapshot_copy_body<T>{params, staging, 0}, n);
    for_each_index(ex, out.calls(), out);
    comm.broadcast(staging, n, 0);
    const auto back = ranges<host_space>(params_from_snapshot_body<T>{params, staging, 0}, n);
    for_each_index(ex, back.calls(), back);
    comm.synchronize();
    return comm.traffic() - before;
}

#if TRICKLE_CUDA_COMPILER
// Device parameters: staging holds n floats in device memory; tile_seg is the group's
// tile -> segment table (tile_segments). Enqueued on ex's stream.
template <class Comm, class T>
traffic_counters broadcast_group_device(const exec::cuda& ex, Comm& comm, const flat_view<T>& params,
                                        const std::uint32_t* tile_seg, std::size_t n, float* staging) {
    const traffic_counters before = comm.traffic();
    if (comm.size() <= 1 || n == 0) return {};
    device_stream(ex, params, tile_seg, 0, n, snapshot_piece<T>{staging});
    comm.broadcast(staging, n, 0);
    device_stream(ex, params, tile_seg, 0, n, restore_piece<T>{staging});
    return comm.traffic() - before;
}
#endif

} // namespace detail

TRICKLE_NAMESPACE_END
