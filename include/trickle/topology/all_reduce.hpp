// trickle/topology/all_reduce.hpp: the exact mean over all workers, in one all-reduce call.
#pragma once

#include <trickle/core/config_record.hpp>
#include <trickle/config.hpp>
#include <trickle/error.hpp>
#include <trickle/exec/workspace.hpp>
#include <trickle/topology/topology.hpp>

#include <cstddef>

TRICKLE_NAMESPACE_BEGIN

namespace topology {

// Every worker ends with the sum over all workers: one all_reduce_sum of the packed
// buffer. Each worker sends and receives about 2(N-1)/N of the buffer (ring model).
struct all_reduce {
    static constexpr const char* name = "all_reduce";
    static constexpr int scratch_buffers = 0; // workspace slots reduce() uses beyond the buffer
    static constexpr bool whole_world = true; // one all-reduce over every worker (detail::whole_world_v)

    template <class Exec, class Comm, class Space>
    int reduce(const Exec&, Comm& comm, float* buf, std::size_t n, workspace<float, Space, 4>&) const {
        comm.all_reduce_sum(buf, n);
        return comm.size();
    }

    // Through a link: plain fp32 values only. Encoded values cannot be summed by an
    // all-reduce; the algorithms sum them with codec::encoded_all_reduce instead.
    template <class Exec, class Comm, class Space, class Link>
    int reduce(const Exec& ex, Comm& comm, float* buf, std::size_t n, workspace<float, Space, 4>& ws,
               const reduce_context&, Link&) const {
        if constexpr (!Link::lossless)
            throw invalid_argument("topology::all_reduce: encoded values are summed by codec::encoded_all_reduce, "
                                   "not through a link");
        return reduce(ex, comm, buf, n, ws);
    }

    void describe(config_record& rec) const { rec.add("topology", name); }
};

} // namespace topology

TRICKLE_NAMESPACE_END
