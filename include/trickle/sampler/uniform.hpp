// trickle/sampler/uniform.hpp: round(p·n) distinct positions drawn uniformly over the whole group.
#pragma once

#include <trickle/config.hpp>
#include <trickle/core/philox.hpp>
#include <trickle/sampler/feistel.hpp>
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
        return selection_type{
            feistel_permutation(n, mix64(ctx.seed ^ detail::stream_id(detail::stream_tag::uniform, ctx.step))), 0,
            detail::fraction_count(ctx.fraction, n)};
    }

    void describe(config_record& rec) const { rec.add("sampler", name); }
};

} // namespace sampler

TRICKLE_NAMESPACE_END
