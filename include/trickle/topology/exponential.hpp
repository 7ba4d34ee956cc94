// trickle/topology/exponential.hpp: one-peer exponential graph (hypercube dimension exchange).
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

// The one-peer exponential graph in its symmetric form: with tau = ceil(log2 N), exchange
// t pairs worker r with r XOR 2^k, k = t mod tau (the peer at distance 2^k along dimension
// k of the hypercube); a worker whose peer r XOR 2^k is >= N (N not a power of two) sits
// the exchange out. Each pair ends with the exact sum of its two buffers, identical bits
// on both. One exchange mixes with W_k = (I + P_k)/2, P_k the involution r -> r XOR 2^k
// (identity where the peer is missing): symmetric, each row and column sums to 1 (doubly
// stochastic), so the mean over all workers is preserved. When N is a power of two the
// product of tau consecutive exchanges is J/N: every worker holds the exact global mean
// after log2 N exchanges (and the gap of the expected matrix is 1/tau). For other N the
// union of the tau matchings is connected (clearing r's bits from the top stays below N),
// so repeated exchanges still converge to the mean. No randomness: the seed is unused.
// Traffic: a paired worker sends and receives its buffer once per exchange.
struct exponential {
    static constexpr const char* name = "exponential";
    static constexpr int scratch_buffers = 1; // workspace slot 2: the partner's buffer

    // ceil(log2 workers): the number of dimensions the exchanges cycle through (0 for one worker).
    static int dimensions(int workers) {
        int tau = 0;
        while ((1LL << tau) < static_cast<long long>(workers)) ++tau;
        return tau;
    }

    // rank's partner at exchange `exchange` among `workers`, or -1 when it sits out.
    static int partner(int rank, int workers, std::uint64_t exchange) {
        const int tau = dimensions(workers);
        if (tau == 0) return -1;
        const int peer = rank ^ (1 << static_cast<int>(exchange % static_cast<std::uint64_t>(tau)));
        return peer < workers ? peer : -1;
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
        const int peer = partner(comm.rank(), N, ctx.exchange);
        detail::pair_sum(ex, comm, buf, ws.get(2, n), n, peer, link);
        return peer < 0 ? 1 : 2;
    }

    void describe(config_record& rec) const { rec.add("topology", name); }
};

} // namespace topology

TRICKLE_NAMESPACE_END
