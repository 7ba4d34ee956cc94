// trickle/topology/groups.hpp: averaging within disjoint groups that change every exchange.
//
// The machinery shared by topology::gossip, topology::islands and topology::exponential:
// a random order of the ranks that every worker derives alone from the shared seed and
// the exchange index (nothing is sent to agree on it), and the two ways a group sums its
// buffers with point-to-point calls only, so that every member ends with the same bits:
//   pair_sum    a group of two: one swap, buf = mine + theirs (IEEE addition commutes,
//               so both members hold identical bits);
//   chain_sum   a group of m: the members in the group's order m_0, m_1, ... pass a running
//               sum forward (m_j computes (..((b_0 + b_1) + b_2) .. ) + b_j, one canonical
//               order for the whole group), then the last member's total is handed back
//               down the chain. 2 (g - 1) rounds for islands of g.
// Every communicator's send_recv is collective (every rank calls it at once with a
// pattern that pairs up), so every rank takes part in every round: a rank with nothing
// to move in a round exchanges zero values with itself (no bytes are counted).
#pragma once

#include <trickle/config.hpp>
#include <trickle/core/philox.hpp>
#include <trickle/core/stream.hpp>
#include <trickle/exec/execution_space.hpp>
#include <trickle/kernels/exchange/body.hpp>
#include <trickle/topology/link.hpp>

#include <cstddef>
#include <cstdint>

TRICKLE_NAMESPACE_BEGIN

namespace detail {

// A uniformly random order of the ranks 0..size-1 for one exchange: rank r's key is
// random_u64(seed, stream_id(stream_tag::topology, exchange), r), and ranks are ordered by
// (key, rank). Every query recomputes the keys it needs (O(size) Philox draws, no
// storage), so a step allocates nothing whatever the number of workers.
struct shuffled_ranks {
    std::uint64_t seed = 0;
    std::uint64_t stream = 0;
    int size = 1;

    shuffled_ranks(std::uint64_t seed_, std::uint64_t exchange, int size_)
        : seed(seed_), stream(stream_id(stream_tag::topology, exchange)), size(size_) {}

    std::uint64_t key(int r) const { return random_u64(seed, stream, static_cast<std::uint64_t>(r)); }

    static bool less(std::uint64_t ka, int a, std::uint64_t kb, int b) { return ka < kb || (ka == kb && a < b); }

    // Rank r's position in the order (0-based).
    int position(int r) const {
        const std::uint64_t kr = key(r);
        int p = 0;
        for (int s = 0; s < size; ++s) p += less(key(s), s, kr, r) ? 1 : 0;
        return p;
    }

    // The rank right after r in the order, or -1 when r is last.
    int next(int r) const { return neighbour(r, true); }

    // The rank right before r in the order, or -1 when r is first.
    int prev(int r) const { return neighbour(r, false); }

    // The rank nearest r on one side of it in the order (after it, or before it), or -1.
    int neighbour(int r, bool after) const {
        const std::uint64_t kr = key(r);
        int best = -1;
        std::uint64_t kb = 0;
        for (int s = 0; s < size; ++s) {
            const std::uint64_t ks = key(s);
            const bool beyond = after ? less(kr, r, ks, s) : less(ks, s, kr, r);
            const bool nearer = best < 0 || (after ? less(ks, s, kb, best) : less(kb, best, ks, s));
            if (beyond && nearer) {
                best = s;
                kb = ks;
            }
        }
        return best;
    }
};

// A worker's place in its group: its index in the group's order, the group's size, and
// the members right before and after it (-1 at the ends).
struct group_place {
    int index = 0;
    int size = 1;
    int prev = -1;
    int next = -1;
};

// The island of `rank` when the random order of exchange `exchange` is cut into groups of
// g consecutive positions (the last group holds the remainder, workers mod g, if any).
inline group_place island_place(std::uint64_t seed, std::uint64_t exchange, int workers, int g, int rank) {
    if (workers <= 1 || g <= 1) return {};
    const shuffled_ranks order(seed, exchange, workers);
    const int p = order.position(rank);
    const int first = p / g * g;
    const int last = first + g < workers ? first + g : workers; // one past
    group_place out;
    out.index = p - first;
    out.size = last - first;
    out.prev = out.index > 0 ? order.prev(rank) : -1;
    out.next = p + 1 < last ? order.next(rank) : -1;
    return out;
}

// A round in which this rank moves nothing (every rank must call send_recv in every round).
template <class Exec, class Comm, class Link>
void idle_round(const Exec& ex, Comm& comm, float* scratch, Link& link) {
    const int self = comm.rank();
    link.exchange(ex, comm, self, false, scratch, 0, self);
}

// One round over a matching: buf = buf + partner's buf (partner < 0: sits the round out).
// Both members of a pair compute a + b and b + a, which are the same bits (through a
// lossy link, a and b are the values the link delivered: prepare() gave each sender the
// bits its partner receives).
template <class Exec, class Comm, class Link>
void pair_sum(const Exec& ex, Comm& comm, float* buf, float* scratch, std::size_t n, int partner, Link& link) {
    if (partner < 0) {
        idle_round(ex, comm, scratch, link);
        return;
    }
    link.prepare(ex, comm, buf, n);
    link.exchange(ex, comm, partner, true, scratch, n, partner);
    for_each_index(ex, n, add_body{buf, scratch});
}

// Sums buf over this rank's group (place `me`) in the group's order; groups hold at most g
// members, and every rank runs the same 2 (g - 1) rounds. The first and the last member
// send and receive n values, the others 2n each. Through a lossy link each running sum is
// rounded when it is sent, and the last member's total once on its way back (the others
// relay the bytes they received); every member ends with the bits of that rounding.
template <class Exec, class Comm, class Link>
void chain_sum(const Exec& ex, Comm& comm, float* buf, float* scratch, std::size_t n, const group_place& me, int g,
               Link& link) {
    // Forward: in round j, member j - 1 sends its running sum to member j, which adds its own.
    for (int j = 1; j < g; ++j) {
        if (me.index == j - 1 && me.next >= 0) {
            link.prepare(ex, comm, buf, n);
            link.exchange(ex, comm, me.next, true, scratch, 0, me.next);
        } else if (me.index == j && me.prev >= 0) {
            link.exchange(ex, comm, me.prev, false, scratch, n, me.prev);
            for_each_index(ex, n, add_body{buf, scratch});
        } else {
            idle_round(ex, comm, scratch, link);
        }
    }
    // Backward: in round j, member j hands the group's total (which it holds) to member j - 1.
    for (int j = g - 1; j >= 1; --j) {
        if (me.index == j && me.prev >= 0) {
            // The last member sends its total; the others pass on what they received.
            if (me.next >= 0)
                link.relay(ex, comm, buf, n);
            else
                link.prepare(ex, comm, buf, n);
            link.exchange(ex, comm, me.prev, true, scratch, 0, me.prev);
        } else if (me.index == j - 1 && me.next >= 0) {
            link.exchange(ex, comm, me.next, false, buf, n, me.next);
        } else {
            idle_round(ex, comm, scratch, link);
        }
    }
}

} // namespace detail

TRICKLE_NAMESPACE_END
