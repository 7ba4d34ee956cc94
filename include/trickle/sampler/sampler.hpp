// trickle/sampler/sampler.hpp: the sampler and selection concepts shared by every sampler.
//
// A sampler decides which flat positions of a parameter group one exchange averages. It
// never communicates: every worker derives the same positions from the shared seed and
// the step, so no index list or mask crosses the network. Its output is a selection, a
// small trivially copyable object that kernels call on the host or the device:
//   sel.count()   number of values the exchange moves
//   sel(k)        flat position of value k (k < count); a position >= the group's size
//                 means "padding": the value travels (as 0) but is never written back
// and, optionally, shortcuts that host kernels use to move memory faster (each must agree
// with sel(k) exactly; see kernels/exchange/body.hpp):
//   sel.positions(k0, m, out)   out[j] = sel(k0 + j) for j < m, computed in bulk
//   sel.runs()                  true when run_at pays off for this selection
//   sel.run_at(k)               a selection_run: the positions of k, k+1, ... that follow
//                               each other in the flat space
#pragma once

#include <trickle/core/config_record.hpp>
#include <trickle/config.hpp>
#include <trickle/core/fraction.hpp>
#include <trickle/core/philox.hpp>
#include <trickle/core/stream.hpp> // stream_tag, stream_id: the samplers' streams (moved to core; still reached from here)
#include <trickle/kernels/flat_view.hpp>

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <type_traits>

TRICKLE_NAMESPACE_BEGIN

// What a sampler knows when it selects: identical on every worker.
struct sampler_context {
    std::uint64_t seed = 0;     // shared by all workers
    std::uint64_t step = 0;     // 0-based index of the training step that exchanges
    std::uint64_t exchange = 0; // 0-based index of this exchange among all exchanges
    double fraction = 0;        // this exchange's fraction of the group, in (0, 1]
    layout_view layout;         // tensor offsets in the kernels' memory space
    layout_view host_layout;    // the same offsets in host memory
};

// Values k .. k+len-1 of a selection sit at flat positions pos .. pos+len-1 (len >= 1, and
// k + len <= count). When pos >= the group's size, all len values are padding.
struct selection_run {
    std::size_t pos;
    std::size_t len;
};

template <class S>
concept selection = std::is_trivially_copyable_v<S> && requires(const S& s, std::size_t k) {
    { s.count() } -> std::convertible_to<std::size_t>;
    { s(k) } -> std::convertible_to<std::size_t>;
};

// A sampler policy (concept sampler_policy; the namespace trickle::sampler holds the
// policies): a copyable object with
//   static constexpr const char* name
//   selection auto select(const sampler_context&)    may update the sampler's own state
//   void describe(config_record&) const              its parameters, and set_error() for bad ones
// and, when it keeps state between exchanges, save(std::ostream&) const / load(std::istream&).
// Optional members that the CUDA path uses:
//   std::size_t max_count(double p, std::size_t n) const   the most values an exchange at a
//       fraction up to p moves (buffers are sized with it at construction; without it, n);
//   static TRICKLE_HOST_DEVICE void rekey(selection&, seed, step)   the selection of another
//       step at the same fraction, for stateless samplers: lets the device derive each
//       step's selection from a step counter in device memory (CUDA graph replay).
template <class S>
concept sampler_policy = std::copy_constructible<S> &&
                  requires(S& s, const S& cs, const sampler_context& ctx, config_record& rec) {
                      { S::name } -> std::convertible_to<const char*>;
                      { s.select(ctx) } -> selection;
                      cs.describe(rec);
                  };

namespace detail {

// Values a buffer needs for any exchange of sampler s at a fraction up to p of n positions.
template <class S>
std::size_t selection_capacity(const S& s, double p, std::size_t n) {
    if constexpr (requires { { s.max_count(p, n) } -> std::convertible_to<std::size_t>; })
        return s.max_count(p, n);
    else
        return n;
}

} // namespace detail

TRICKLE_NAMESPACE_END
