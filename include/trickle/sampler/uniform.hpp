// trickle/sampler/uniform.hpp: round(p·n) distinct positions drawn uniformly over the whole group.
#pragma once

#include <trickle/config.hpp>
#include <trickle/core/feistel.hpp>
#include <trickle/core/philox.hpp>
#include <trickle/sampler/sampler.hpp>

#include <cstddef>
#include <cstdint>

TRICKLE_NAMESPACE_BEGIN

namespace sampler {

// SPARTA-random: at each exchange, round(p·n) positions (at least one), drawn uniformly
// from all n positions of the group (all tensors as one index space) without replacement:
// the first round(p·n) images of a Feistel permutation of [0, n) keyed by (seed, step).
// Why without replacement: determinism on the device. A position selected twice would
// occupy two slots of the exchanged buffer; a ring all-reduce (NCCL) sums the two slots in
// different orders, so they may differ in the last bit, and the GPU scatter's racing
// threads would leave either one, so replicas could diverge. With distinct positions every
// position is written exactly once. The price is one Feistel evaluation per position (four
// rounds; cycle walking takes fewer than four passes on average) instead of one Philox
// draw. Stateless: the positions depend on (seed, step) only. The selection is
// sampler::permutation's (feistel_range), starting at image 0 of a fresh permutation.
struct uniform {
    static constexpr const char* name = "uniform";

    using selection_type = feistel_range;

    selection_type select(const sampler_context& ctx) const {
        const std::size_t n = ctx.layout.total;
        selection_type sel{feistel_permutation(n, 0), 0, detail::fraction_count(ctx.fraction, n)};
        rekey(sel, ctx.seed, ctx.step);
        return sel;
    }

    // The selection of another step with the same fraction: only the permutation's key
    // depends on the step (the device re-keys from a step counter in device memory, which
    // lets a captured CUDA graph advance by itself).
    TRICKLE_HOST_DEVICE static void rekey(selection_type& sel, std::uint64_t seed, std::uint64_t step) {
        sel.perm = feistel_permutation(sel.perm.n, mix64(seed ^ detail::stream_id(detail::stream_tag::uniform, step)));
    }

    // The most values an exchange at a fraction up to p of n positions moves.
    std::size_t max_count(double p, std::size_t n) const { return detail::fraction_count(p, n); }

    void describe(config_record& rec) const { rec.add("sampler", name); }
};

} // namespace sampler

TRICKLE_NAMESPACE_END
