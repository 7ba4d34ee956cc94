// trickle/topology/islands.hpp: exact means within random groups of g workers (EXO Gym's islands).
#pragma once

#include <trickle/config.hpp>
#include <trickle/core/config_record.hpp>
#include <trickle/error.hpp>
#include <trickle/exec/workspace.hpp>
#include <trickle/topology/groups.hpp>
#include <trickle/topology/topology.hpp>

#include <cstddef>
#include <cstdint>

TRICKLE_NAMESPACE_BEGIN

namespace topology {

// Every exchange cuts a random order of the workers (drawn from the shared seed and the
// exchange index, detail::shuffled_ranks) into islands of `size` consecutive positions;
// the last island holds the remainder (N mod size workers) when size does not divide N.
// Each island ends with the exact sum of its members' buffers, added in the island's
// order (one chain, so every member holds identical bits). One exchange mixes with the
// block-averaging matrix W (1/|island| within each island): symmetric, doubly stochastic
// and a projection; the expected squared distance to consensus shrinks by
// lambda_2(E[W]) = 1 - (N - islands)/(N - 1) per exchange, islands = ceil(N / size).
// size == 1 moves nothing; size == N is the exact global mean (one all-reduce);
// size == 2 is topology::gossip. size must be in [1, N] (checked at construction).
// Traffic (2 <= size < N): size == 2, the buffer once each way per paired worker;
// size >= 3, a chain of 2 (size - 1) rounds in which the first and last member of an
// island send and receive the buffer once, the others twice.
struct islands {
    int size = 2; // g: workers per island

    static constexpr const char* name = "islands";
    static constexpr int scratch_buffers = 1; // workspace slot 2: the received running sum

    // rank's place in its island at exchange `exchange` (index, island size, neighbours).
    detail::group_place place(int rank, int workers, std::uint64_t seed, std::uint64_t exchange) const {
        if (size >= workers) {
            detail::group_place all;
            all.index = rank;
            all.size = workers;
            all.prev = rank > 0 ? rank - 1 : -1;
            all.next = rank + 1 < workers ? rank + 1 : -1;
            return all;
        }
        return detail::island_place(seed, exchange, workers, size, rank);
    }

    template <class Exec, class Comm, class Space>
    int reduce(const Exec& ex, Comm& comm, float* buf, std::size_t n, workspace<float, Space, 4>& ws,
               const reduce_context& ctx) const {
        plain_link link;
        return reduce(ex, comm, buf, n, ws, ctx, link);
    }

    // Through a lossy link, size == N is one chain in rank order (the all-reduce cannot
    // carry encoded values).
    template <class Exec, class Comm, class Space, class Link>
    int reduce(const Exec& ex, Comm& comm, float* buf, std::size_t n, workspace<float, Space, 4>& ws,
               const reduce_context& ctx, Link& link) const {
        const int N = comm.size();
        require(size >= 1 && size <= N, "topology::islands: size must be in [1, ", N, "] (the workers), got ", size);
        if (N == 1 || size == 1) return 1;
        if (size == N && Link::lossless) {
            comm.all_reduce_sum(buf, n);
            return N;
        }
        const detail::group_place me = place(comm.rank(), N, ctx.seed, ctx.exchange);
        float* scratch = ws.get(2, n);
        if (size == 2)
            detail::pair_sum(ex, comm, buf, scratch, n, me.index == 0 ? me.next : me.prev, link);
        else
            detail::chain_sum(ex, comm, buf, scratch, n, me, size, link);
        return me.size;
    }

    void describe(config_record& rec) const {
        rec.add("topology", name).add("island_size", size);
        if (size < 1) rec.set_error(detail::concat("topology::islands: size must be >= 1, got ", size));
    }

    void describe(config_record& rec, int workers) const {
        describe(rec);
        if (size > workers)
            rec.set_error(detail::concat("topology::islands: size ", size, " is larger than the ", workers,
                                         " worker", workers == 1 ? "" : "s"));
    }
};

} // namespace topology

TRICKLE_NAMESPACE_END
