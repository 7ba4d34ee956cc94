// trickle/algorithm/detail/common.hpp: what every algorithm engine does the same way.
//
// The configuration fields of a parameter group, how a pass over the group is launched
// on an execution space, and the stream check of a step. One home for SPARTA, DiLoCo, the
// dense baseline and every engine made of them.
#pragma once

#include <trickle/comm/communicator.hpp>
#include <trickle/config.hpp>
#include <trickle/core/config_record.hpp>
#include <trickle/core/dtype.hpp>
#include <trickle/core/param_group.hpp>
#include <trickle/error.hpp>
#include <trickle/exec/execution_space.hpp>
#include <trickle/kernels/chunking.hpp>

#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

TRICKLE_NAMESPACE_BEGIN

namespace detail {

// The group's fields in an algorithm's configuration record: dtype, memory space, tensors,
// elements and the layout's hash, and the number of workers (over an elastic communicator
// the world's size changes between rounds: "elastic", given as workers < 0).
template <class T, class Space>
void describe_group(config_record& rec, const param_group<T, Space>& g, int workers) {
    std::ostringstream hash;
    hash << std::hex << g.layout_hash();
    if (workers < 0)
        rec.add("workers", "elastic");
    else
        rec.add("workers", workers);
    rec
        .add("dtype", dtype_traits<T>::name)
        .add("memory_space", Space::name)
        .add("tensors", g.tensor_count())
        .add("elements", g.total_size())
        .add("layout_hash", hash.str());
    // Each tensor's name and size, so that a mismatch names the first tensor that differs.
    std::vector<std::string> tensors;
    tensors.reserve(g.tensor_count());
    for (std::size_t i = 0; i < g.tensor_count(); ++i) tensors.push_back(concat(g[i].name, " (", g[i].view.size(), ")"));
    rec.add_detail("tensors in order", std::move(tensors), "layout_hash");
    if (g.empty()) rec.set_error("the parameter group is empty (no tensor with elements)");
}

// What one fp32 all-reduce of n values sends and receives on this worker, under the
// communicator's cost model: a dense step's bytes (exchange_stats::dense_bytes, per step).
template <class Comm>
std::uint64_t dense_bytes_of(const Comm& comm, std::size_t n) {
    return all_reduce_bytes(n, sizeof(float), comm.size(), comm.rank());
}

// Launches body.run() over [0, n) in chunks sized for the execution space.
template <class Exec, class Body>
void run_ranges(const Exec& ex, std::size_t n, const Body& body) {
    const auto r = ranges<typename Exec::memory_space>(body, n);
    for_each_index(ex, r.calls(), r);
}

// When the communicator is bound to a CUDA stream, kernels must run on that stream so
// the exchange is ordered without a host synchronization.
template <class Comm, class Exec>
void check_same_stream(const Comm& comm, const Exec& ex, const char* kind) {
    if constexpr (requires { comm.stream(); ex.stream; }) {
        if (static_cast<const void*>(comm.stream()) != static_cast<const void*>(ex.stream))
            throw invalid_argument(concat(kind, "::step: exec::cuda's stream differs from the communicator's stream"));
    }
}

} // namespace detail

TRICKLE_NAMESPACE_END
