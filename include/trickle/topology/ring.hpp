// trickle/topology/ring.hpp: gossip on a ring: each worker averages with its two neighbours.
#pragma once

#include <trickle/core/config_record.hpp>
#include <trickle/config.hpp>
#include <trickle/exec/execution_space.hpp>
#include <trickle/exec/workspace.hpp>
#include <trickle/kernels/exchange/body.hpp>
#include <trickle/topology/link.hpp>
#include <trickle/topology/topology.hpp>

#include <cstddef>

TRICKLE_NAMESPACE_BEGIN

namespace topology {

// Worker r averages with r-1 and r+1 (mod N): buf <- (left + self + right) / 3. The
// mixing matrix is doubly stochastic, so the mean over all workers is preserved and
// repeated exchanges converge to it. Each worker sends its buffer to two neighbours
// and receives two, whatever N: traffic per worker stays constant as workers are added
// (an all-reduce also stays near 2x per worker, but needs every worker in every call).
// With two workers the neighbours coincide and it is the exact pairwise mean; with one,
// nothing moves.
struct ring {
    static constexpr const char* name = "ring";
    static constexpr int scratch_buffers = 2; // workspace slots 2 and 3: the neighbours' buffers

    template <class Exec, class Comm, class Space>
    int reduce(const Exec& ex, Comm& comm, float* buf, std::size_t n, workspace<float, Space, 4>& ws) const {
        plain_link link;
        return reduce(ex, comm, buf, n, ws, reduce_context{}, link);
    }

    // Through a link: buf is prepared once and the same bytes go to both neighbours.
    template <class Exec, class Comm, class Space, class Link>
    int reduce(const Exec& ex, Comm& comm, float* buf, std::size_t n, workspace<float, Space, 4>& ws,
               const reduce_context&, Link& link) const {
        const int N = comm.size();
        if (N == 1) return 1;
        const int r = comm.rank();
        const int right = (r + 1) % N;
        const int left = (r + N - 1) % N;
        float* from_left = ws.get(2, n);
        link.prepare(ex, comm, buf, n);
        link.exchange(ex, comm, right, true, from_left, n, left);
        if (N == 2) {
            for_each_index(ex, n, add_body{buf, from_left});
            return 2;
        }
        float* from_right = ws.get(3, n);
        link.exchange(ex, comm, left, true, from_right, n, right);
        for_each_index(ex, n, add_neighbours_body{buf, from_left, from_right});
        return 3;
    }

    void describe(config_record& rec) const { rec.add("topology", name); }
};

} // namespace topology

TRICKLE_NAMESPACE_END
