// trickle/core/fields.hpp: which settable fields a policy has, by name.
//
// Front ends that build policies from run-time names (Python's keyword arguments,
// trickle-sim's flags, the outer optimizer and sparsifier factories of the library) set a
// field on the policies that have it and refuse an option the chosen policy has no use
// for. They ask these traits, so a policy added to a registry takes exactly the options
// its fields name, in every front end, with no table to update. Each trait is a
// std::bool_constant over the policy type P (usable as a template template argument:
// `kind_has<codec_kind, fields::block_size>`), with a variable template beside it.
//
// Structural only (does P have a public field of that name and type?), so core knows no
// policy family.
#pragma once

#include <trickle/config.hpp>

#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <utility>
#include <vector>

TRICKLE_NAMESPACE_BEGIN

namespace fields {

// Values per scale of a block codec (codec::int8_block, ...), or a block sampler's block.
template <class P>
struct block_size : std::bool_constant<requires(P p) { p.block_size = std::size_t{1}; }> {};
// A grouped topology's group size (topology::islands, groups).
template <class P>
struct group_size : std::bool_constant<requires(P p) { p.size = 1; }> {};
// A decaying schedule's end fraction and length (schedule::linear, cosine).
template <class P>
struct decay : std::bool_constant<requires(P p) {
    p.end_fraction = 0.5;
    p.steps = std::uint64_t{1};
}> {};
// A schedule given by (step, fraction) points (schedule::piecewise).
template <class P>
struct points : std::bool_constant<requires(P p) { p.points = std::vector<std::pair<std::uint64_t, double>>{}; }> {};
// An outer optimizer's learning rate, momentum, Adam's betas and eps.
template <class P>
struct lr : std::bool_constant<requires(P p) { p.lr = 0.5; }> {};
template <class P>
struct momentum : std::bool_constant<requires(P p) { p.momentum = 0.5; }> {};
template <class P>
struct betas : std::bool_constant<requires(P p) {
    p.beta1 = 0.5;
    p.beta2 = 0.5;
}> {};
template <class P>
struct eps : std::bool_constant<requires(P p) { p.eps = 0.5; }> {};
// A sparsifier's chunk and kept values per chunk (codec::chunk_topk), or its fraction
// (codec::random_k).
template <class P>
struct chunk_k : std::bool_constant<requires(P p) {
    p.chunk = std::size_t{1};
    p.k = std::size_t{1};
}> {};
template <class P>
struct fraction : std::bool_constant<requires(P p) { p.fraction = 0.5; }> {};

template <class P>
inline constexpr bool has_block_size = block_size<P>::value;
template <class P>
inline constexpr bool has_group_size = group_size<P>::value;
template <class P>
inline constexpr bool has_decay = decay<P>::value;
template <class P>
inline constexpr bool has_points = points<P>::value;
template <class P>
inline constexpr bool has_lr = lr<P>::value;
template <class P>
inline constexpr bool has_momentum = momentum<P>::value;
template <class P>
inline constexpr bool has_betas = betas<P>::value;
template <class P>
inline constexpr bool has_eps = eps<P>::value;
template <class P>
inline constexpr bool has_chunk_k = chunk_k<P>::value;
template <class P>
inline constexpr bool has_fraction = fraction<P>::value;

} // namespace fields

TRICKLE_NAMESPACE_END
