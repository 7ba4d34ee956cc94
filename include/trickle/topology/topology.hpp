// trickle/topology/topology.hpp: the topology concept: who averages with whom.
//
// A topology combines each worker's packed buffer with its peers' through a
// communicator, written once against the communicator concept:
//   template <class Exec, class Comm, class Space>
//   int reduce(const Exec& ex, Comm& comm, float* buf, std::size_t n, workspace<float, Space, 4>& ws)
// It may use workspace slots 2 and 3 (and 1) as scratch of n floats; a topology that says
// how many with `static constexpr int scratch_buffers` gets exactly those reserved at the
// algorithm's construction (slots 2, 3, ...), others get all three, so no step allocates.
// On return buf holds the sum of buf over the worker's averaging group, and the result
// is the group's size (so buf / size is the group's mean). Every worker calls it at once.
// The averaging must preserve the mean over all workers (a doubly stochastic mixing),
// so that repeated exchanges drive replicas to consensus rather than drift.
//
// A topology whose groups change from one exchange to the next (gossip, exponential,
// islands) takes one more argument, the exchange's context:
//   int reduce(const Exec& ex, Comm& comm, float* buf, std::size_t n, workspace<float, Space, 4>& ws,
//              const reduce_context& ctx)
// The algorithms pass it whenever the topology accepts it (detail::topology_reduce picks
// the overload with a requires-expression), so topologies without it keep working. A
// topology whose validity depends on the number of workers may also define
//   void describe(config_record& rec, int workers) const
// which the algorithms call instead of describe(rec) (detail::describe_topology).
#pragma once

#include <trickle/core/config_record.hpp>
#include <trickle/config.hpp>
#include <trickle/exec/workspace.hpp>

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <variant>

TRICKLE_NAMESPACE_BEGIN

// A topology policy: a copyable object with a name, describe(config_record&) and the
// reduce() member template described above (a member template cannot be named in a
// concept without fixing its arguments; algorithms check it at instantiation).
template <class T>
concept topology_policy = std::copy_constructible<T> && requires(const T& t, config_record& rec) {
    { T::name } -> std::convertible_to<const char*>;
    t.describe(rec);
};

// What an exchange is, for topologies that draw their groups per exchange: the same on
// every worker, so every worker derives the same groups without sending anything.
struct reduce_context {
    std::uint64_t seed = 0;     // the algorithm's shared seed (sparta_options::seed, diloco_options::seed)
    std::uint64_t exchange = 0; // SPARTA: the exchange's index (0, 1, ...; exchange_stats::exchanges before it);
                                // DiLoCo: the outer round's index (applied and skipped rounds alike)
};

namespace detail {

// The topology's kind, as a type trait: whether it sums over the whole world in one
// all-reduce (a topology says so with `static constexpr bool whole_world = true`). The
// algorithms take their encoded all-reduce for such a topology, and the elastic protocol
// (whose world changes between rounds) needs one. A type-erased topology (topology::any)
// answers for the topology it holds.
template <class Top>
inline constexpr bool whole_world_v = requires { requires Top::whole_world; };

template <class Top>
bool is_all_reduce(const Top& t) {
    if constexpr (requires { t.held(); })
        return std::visit([](const auto& h) { return is_all_reduce(h); }, t.held());
    else
        return whole_world_v<Top>;
}

// Whether topology Top's reduce() takes a reduce_context for these argument types.
template <class Top, class Exec, class Comm, class Space>
inline constexpr bool reduce_takes_context =
    requires(const Top& t, const Exec& ex, Comm& c, float* b, std::size_t n, workspace<float, Space, 4>& w,
             const reduce_context& x) { t.reduce(ex, c, b, n, w, x); };

// Calls top.reduce(), with the context when the topology takes one.
template <class Top, class Exec, class Comm, class Space>
int topology_reduce(const Top& top, const Exec& ex, Comm& comm, float* buf, std::size_t n,
                    workspace<float, Space, 4>& ws, const reduce_context& ctx) {
    if constexpr (reduce_takes_context<Top, Exec, Comm, Space>)
        return top.reduce(ex, comm, buf, n, ws, ctx);
    else
        return top.reduce(ex, comm, buf, n, ws);
}

// Whether topology Top's reduce() takes a link (topology/link.hpp) after the context.
template <class Top, class Exec, class Comm, class Space, class Link>
inline constexpr bool reduce_takes_link =
    requires(const Top& t, const Exec& ex, Comm& c, float* b, std::size_t n, workspace<float, Space, 4>& w,
             const reduce_context& x, Link& l) { t.reduce(ex, c, b, n, w, x, l); };

// The same through a link: a topology that takes one gets it; one that does not (a user's
// topology written before links) can only carry plain fp32 values.
template <class Top, class Exec, class Comm, class Space, class Link>
int topology_reduce(const Top& top, const Exec& ex, Comm& comm, float* buf, std::size_t n,
                    workspace<float, Space, 4>& ws, const reduce_context& ctx, Link& link) {
    if constexpr (reduce_takes_link<Top, Exec, Comm, Space, Link>) {
        return top.reduce(ex, comm, buf, n, ws, ctx, link);
    } else {
        static_assert(Link::lossless, "this topology's reduce() takes no link, so it cannot carry encoded values");
        return topology_reduce(top, ex, comm, buf, n, ws, ctx);
    }
}

// Adds the topology's fields to rec, checked against the number of workers when it can.
template <class Top>
void describe_topology(const Top& top, config_record& rec, int workers) {
    if constexpr (requires { top.describe(rec, workers); })
        top.describe(rec, workers);
    else
        top.describe(rec);
}

// Reserves, at construction, the workspace slots topology Top's reduce() uses for n values.
template <class Top, class Workspace>
void reserve_topology_scratch(Workspace& ws, std::size_t n) {
    if constexpr (requires { Top::scratch_buffers; }) {
        for (int s = 0; s < Top::scratch_buffers; ++s) ws.reserve(static_cast<std::size_t>(2 + s), n);
    } else {
        for (std::size_t s = 1; s < 4; ++s) ws.reserve(s, n);
    }
}

} // namespace detail

TRICKLE_NAMESPACE_END
