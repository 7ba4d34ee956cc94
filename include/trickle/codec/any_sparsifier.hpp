// trickle/codec/any_sparsifier.hpp: the sparsifiers a run-time choice can name, and
// codec::any_sparsifier, one of them chosen at run time.
//
// The sparsifier family's counterpart of codec/registry.hpp + codec/any.hpp, for DiLoCo's
// outer gradient (Python's outer_sparsifier=, trickle-sim's --outer-topk / --outer-randk):
//
//   sparsifier_registry        the sparsifiers by the names they declare, each over
//                              codec::any values, in the order the front ends list them;
//   any_sparsifier             a variant of them (and of their fp32-valued forms, so a
//                              sparsifier with plain fp32 values runs exactly the code of
//                              chunk_topk<> or random_k<>); the exchange route finds
//                              sparse_all_reduce and sparse_all_reduce_parts for it by ADL,
//                              so one engine instantiation serves every sparsifier;
//   sparsifier_settings        the fields a front end may set, each used by the
//                              sparsifiers that have it (core/fields.hpp says which);
//   any_sparsifier::from_name  the named sparsifier with those settings.
//
// Adding a sparsifier is its header (the concept codec::sparsifier_policy, a
// sparse_all_reduce and a sparse_all_reduce_parts overload) and one line in the registry
// (docs/extending.md, "A sparsifier").
#pragma once

#include <trickle/codec/any.hpp>
#include <trickle/codec/codec.hpp>
#include <trickle/codec/sparse.hpp>
#include <trickle/codec/sparsifier.hpp>
#include <trickle/config.hpp>
#include <trickle/core/config_record.hpp>
#include <trickle/core/fields.hpp>
#include <trickle/core/type_list.hpp>
#include <trickle/error.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>
#include <variant>

TRICKLE_NAMESPACE_BEGIN

namespace codec {

using sparsifier_registry = type_list<chunk_topk<any>, random_k<any>>;

// The fields a front end sets on a sparsifier by name: each applies to the sparsifiers
// that have a field of that name (core/fields.hpp; chunk_topk: chunk and k; random_k:
// fraction); values is every sparsifier's value codec.
struct sparsifier_settings {
    std::size_t chunk = 64;
    std::size_t k = 4;
    double fraction = 0.01;
    any values{};
};

namespace detail {

// S<any> as S<fp32>: the same sparsifier with plain fp32 values (every registered
// sparsifier names itself over another value codec as S::with_values<W>).
template <class S>
using with_fp32_values_t = typename S::template with_values<fp32>;

template <class... S>
std::variant<with_fp32_values_t<S>..., S...> any_sparsifier_variant(type_list<S...>*);

} // namespace detail

// One of the registered sparsifiers, chosen at run time. describe() writes exactly the
// held sparsifier's fields, so a worker holding any_sparsifier{chunk_topk<>{...}} agrees
// with one built with chunk_topk<>{...}.
struct any_sparsifier {
    using variant_type = decltype(detail::any_sparsifier_variant(static_cast<sparsifier_registry*>(nullptr)));
    static constexpr const char* name = "sparsifier";
    variant_type held{};

    any_sparsifier() = default;
    template <class S>
        requires std::is_constructible_v<variant_type, S>
    any_sparsifier(S s) : held(std::move(s)) {} // NOLINT(google-explicit-constructor): a sparsifier is one

    // The registered sparsifier of that name, with the settings it has; where the values'
    // codec is fp32, the sparsifier's fp32-valued form (chunk_topk<>, random_k<>), whose
    // bits are those of the C++ default. Throws invalid_argument naming the registered
    // sparsifiers for any other name (`what` names the option in that message).
    static any_sparsifier from_name(std::string_view sparsifier_name, const sparsifier_settings& s,
                                    std::string_view what = "sparsifier") {
        const bool fp32_values = std::holds_alternative<fp32>(s.values.held);
        return visit_name<sparsifier_registry>(sparsifier_name, what, [&](auto t) -> any_sparsifier {
            using S = typename decltype(t)::type;
            S sp{};
            sp.values = s.values;
            if constexpr (fields::has_chunk_k<S>) {
                sp.chunk = s.chunk;
                sp.k = s.k;
            }
            if constexpr (fields::has_fraction<S>) sp.fraction = s.fraction;
            if (!fp32_values) return sp;
            detail::with_fp32_values_t<S> plain{};
            if constexpr (fields::has_chunk_k<S>) {
                plain.chunk = sp.chunk;
                plain.k = sp.k;
            }
            if constexpr (fields::has_fraction<S>) plain.fraction = sp.fraction;
            return plain;
        });
    }
    // The registered names, in the registry's order.
    static constexpr const auto& names() { return names_of<sparsifier_registry>(); }

    const char* held_name() const {
        return std::visit([](const auto& s) -> const char* { return std::remove_cvref_t<decltype(s)>::name; }, held);
    }
    std::size_t payload_bytes(std::size_t n) const {
        return std::visit([&](const auto& s) -> std::size_t { return s.payload_bytes(n); }, held);
    }
    std::size_t kept(std::size_t n) const {
        return std::visit([&](const auto& s) -> std::size_t { return s.kept(n); }, held);
    }
    std::string error() const {
        return std::visit([](const auto& s) -> std::string { return s.error(); }, held);
    }
    void describe(config_record& rec) const {
        std::visit([&](const auto& s) { s.describe(rec); }, held);
    }
    void reserve_scratch(sparse_scratch& scratch, std::size_t n, int ranks) const {
        std::visit([&](const auto& s) { s.reserve_scratch(scratch, n, ranks); }, held);
    }
};

// The held sparsifier's sparse all-reduce (codec/sparse.hpp), and what it sends by part.
template <byte_communicator Comm>
int sparse_all_reduce(const any_sparsifier& sp, Comm& comm, float* buf, std::size_t n, sparse_scratch& scratch,
                      float* residual = nullptr, float beta = 0.0f, std::uint64_t seed = 0, std::uint64_t round = 0) {
    return std::visit(
        [&](const auto& s) { return sparse_all_reduce(s, comm, buf, n, scratch, residual, beta, seed, round); },
        sp.held);
}

inline wire_parts sparse_all_reduce_parts(const any_sparsifier& sp, std::size_t n, int N, int me) {
    return std::visit([&](const auto& s) { return sparse_all_reduce_parts(s, n, N, me); }, sp.held);
}

static_assert(names_unique<sparsifier_registry>(), "codec::sparsifier_registry: two sparsifiers share a name");
static_assert([]<class... S>(type_list<S...>*) { return (sparsifier_policy<S> && ...); }(
                  static_cast<sparsifier_registry*>(nullptr)),
              "codec::sparsifier_registry: every entry must satisfy sparsifier_policy");
static_assert(sparsifier_policy<any_sparsifier> && !codec_policy<any_sparsifier>);

} // namespace codec

TRICKLE_NAMESPACE_END
