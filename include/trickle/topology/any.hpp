// trickle/topology/any.hpp: a topology chosen at run time among the registered ones (topology/registry.hpp).
//
// sparta<Sampler, Schedule, topology::any> (and diloco<Outer, topology::any>) is one
// instantiation that serves every registered topology, so a binding (Python, a command line)
// can pick one by name without compiling every combination of templates. It costs one
// std::variant visit per exchange, never one per value. reduce() is the held topology's,
// bit for bit and byte for byte; describe() emits exactly the held topology's fields, so a
// worker using any{gossip{}} agrees with one using gossip{} directly, and their
// checkpoints carry the same configuration hash.
//
// any always takes the exchange's context (it may hold a per-exchange topology), so on
// CUDA a SPARTA step with any is never replayable from a graph, even holding all_reduce
// or ring: use those directly for graph capture.
#pragma once

#include <trickle/config.hpp>
#include <trickle/core/config_record.hpp>
#include <trickle/core/type_list.hpp>
#include <trickle/exec/workspace.hpp>
#include <trickle/topology/registry.hpp>
#include <trickle/topology/topology.hpp>

#include <algorithm>
#include <cstddef>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>

TRICKLE_NAMESPACE_BEGIN

namespace detail {

template <class T, class Variant>
inline constexpr bool topology_in_variant = false;
template <class T, class... A>
inline constexpr bool topology_in_variant<T, std::variant<A...>> = (std::is_same_v<T, A> || ...);

// The scratch slots reserve_topology_scratch<Top> reserves: Top::scratch_buffers, or 3
// for a topology that does not say (slots 1 to 3, which a count of slots from 2 on cannot
// name: topology::any's static_assert refuses such an alternative at compile time).
template <class Top>
constexpr int topology_scratch_count() {
    if constexpr (requires { Top::scratch_buffers; })
        return Top::scratch_buffers;
    else
        return 3;
}

template <class Variant>
inline constexpr int variant_scratch_count = 0;
template <class... A>
inline constexpr int variant_scratch_count<std::variant<A...>> = std::max({0, topology_scratch_count<A>()...});

} // namespace detail

namespace topology {

// Holds one of the registered topologies (topology/registry.hpp: all_reduce, ring,
// gossip, exponential and islands; all_reduce by default) and forwards reduce() and
// describe() to it:
//   topology::any t = topology::islands{.size = 3};
class any {
public:
    using variant_type = registry::apply<std::variant>;

    // Whether T is one of the topologies any can hold.
    template <class T>
    static constexpr bool holds_type = detail::topology_in_variant<T, variant_type>;

    static constexpr const char* name = "any";

    // The most scratch slots any alternative uses (ring's two), reserved at construction
    // whichever one is held, so that no step allocates.
    static constexpr int scratch_buffers = detail::variant_scratch_count<variant_type>;
    static_assert(scratch_buffers <= 2, "topology::any: a workspace has scratch slots 2 and 3 only");

    any() = default;

    // Implicit, so that a built-in topology converts where an any is expected.
    template <class T>
        requires holds_type<std::remove_cvref_t<T>>
    any(T&& t) : held_(std::forward<T>(t)) {}

    // The registered topology of that name with its default fields: from_name("islands")
    // holds islands{} (islands of 2). Throws invalid_argument listing the registered names
    // for any other.
    static any from_name(std::string_view topology_name) {
        return visit_name<registry>(topology_name, "topology", [](auto t) -> any { return typename decltype(t)::type{}; });
    }
    // The registered names, in the registry's order.
    static constexpr const auto& names() { return names_of<registry>(); }

    // The held topology's reduce(), given the context when it takes one.
    template <class Exec, class Comm, class Space>
    int reduce(const Exec& ex, Comm& comm, float* buf, std::size_t n, workspace<float, Space, 4>& ws,
               const reduce_context& ctx) const {
        return std::visit(
            [&](const auto& t) -> int { return detail::topology_reduce(t, ex, comm, buf, n, ws, ctx); }, held_);
    }

    // The same through a link (every built-in topology takes one).
    template <class Exec, class Comm, class Space, class Link>
    int reduce(const Exec& ex, Comm& comm, float* buf, std::size_t n, workspace<float, Space, 4>& ws,
               const reduce_context& ctx, Link& link) const {
        return std::visit(
            [&](const auto& t) -> int { return detail::topology_reduce(t, ex, comm, buf, n, ws, ctx, link); },
            held_);
    }

    // Exactly the held topology's fields and error.
    void describe(config_record& rec) const {
        std::visit([&](const auto& t) { t.describe(rec); }, held_);
    }

    // The held topology's fields, checked against the number of workers when it can be.
    void describe(config_record& rec, int workers) const {
        std::visit([&](const auto& t) { detail::describe_topology(t, rec, workers); }, held_);
    }

    // The held topology's name ("all_reduce", "ring", "gossip", "exponential", "islands").
    const char* held_name() const {
        return std::visit([](const auto& t) -> const char* { return std::remove_cvref_t<decltype(t)>::name; }, held_);
    }

    // The held topology itself (std::get_if / std::visit on it; fields may be changed).
    const variant_type& held() const { return held_; }
    variant_type& held() { return held_; }

private:
    variant_type held_{};
};

} // namespace topology

static_assert(topology_policy<topology::any>);

TRICKLE_NAMESPACE_END
