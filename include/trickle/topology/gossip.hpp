// trickle/topology/gossip.hpp: each exchange averages every worker with one random peer.
#pragma once

#include <trickle/config.hpp>
#include <trickle/core/config_record.hpp>
#include <trickle/exec/workspace.hpp>
#include <trickle/topology/groups.hpp>
#include <trickle/topology/topology.hpp>

#include <cstddef>
#include <cstdint>

TRICKLE_NAMESPACE_BEGIN

namespace topology {

// Random pairwise gossip (NoLoCo-style): every exchange draws a random perfect matching of
// the workers from the shared seed and the exchange index (detail::shuffled_ranks: the
// ranks in a random order, positions 2i and 2i+1 paired), so no coordination is sent.
// Each pair ends with the exact sum of its two buffers, identical bits on both; with odd
// N the worker drawn last sits the exchange out (group of 1). The mixing matrix of one
// exchange, W = (I + P)/2 with P the matching's involution (P = I on the lone worker),
// is symmetric and doubly stochastic, so the mean over all workers is preserved; W is a
// projection (W^T W = W), and the expected squared distance to consensus shrinks by
// lambda_2(E[W]) = 1 - floor(N/2)/(N - 1) per exchange (docs/policies.md).
// Traffic: a paired worker sends and receives its buffer once; the lone worker nothing.
// gossip is islands{.size = 2}: the same draws give the same pairs.
struct gossip {
    static constexpr const char* name = "gossip";
    static constexpr int scratch_buffers = 1; // workspace slot 2: the partner's buffer

    // rank's partner at exchange `exchange` among `workers`, or -1 when it sits out.
    static int partner(int rank, int workers, std::uint64_t seed, std::uint64_t exchange) {
        if (workers <= 1) return -1;
        const detail::shuffled_ranks order(seed, exchange, workers);
        const int p = order.position(rank);
        if (p % 2 == 1) return order.prev(rank);
        return p + 1 < workers ? order.next(rank) : -1;
    }

    template <class Exec, class Comm, class Space>
    int reduce(const Exec& ex, Comm& comm, float* buf, std::size_t n, workspace<float, Space, 4>& ws,
               const reduce_context& ctx) const {
        plain_link link;
        return reduce(ex, comm, buf, n, ws, ctx, link);
    }

    template <class Exec, class Comm, class Space, class Link>
    int reduce(const Exec& ex, Comm& comm, float* buf, std::size_t n, workspace<float, Space, 4>& ws,
               const reduce_context& ctx, Link& link) const {
        const int N = comm.size();
        if (N == 1) return 1;
        const int peer = partner(comm.rank(), N, ctx.seed, ctx.exchange);
        detail::pair_sum(ex, comm, buf, ws.get(2, n), n, peer, link);
        return peer < 0 ? 1 : 2;
    }

    void describe(config_record& rec) const { rec.add("topology", name); }
};

} // namespace topology

TRICKLE_NAMESPACE_END
