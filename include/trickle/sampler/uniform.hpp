// trickle/sampler/uniform.hpp: round(p·n) positions drawn uniformly over the whole group.
#pragma once

#include <trickle/config.hpp>
#include <trickle/core/philox.hpp>
#include <trickle/sampler/random_batch.hpp>
#include <trickle/sampler/sampler.hpp>

#include <cstddef>
#include <cstdint>

TRICKLE_NAMESPACE_BEGIN

namespace sampler {

// SPARTA-random: at each exchange, round(p·n) positions (at least one), each drawn
// independently and uniformly from all n positions of the group (all tensors as one
// index space), from Philox(seed, step, k). Positions are drawn with replacement: a
// position drawn twice travels twice and receives the same average twice, which is
// harmless and costs about p/2 of the payload, in exchange for needing no coordination.
struct uniform {
    static constexpr const char* name = "uniform";

    struct selection_type {
        std::uint64_t seed;
        std::uint64_t stream;
        std::size_t n;
        std::size_t size;

        TRICKLE_HOST_DEVICE std::size_t count() const { return size; }
        TRICKLE_HOST_DEVICE std::size_t operator()(std::size_t k) const {
            return static_cast<std::size_t>(bounded(random_u64(seed, stream, k), n));
        }
        // The same positions, with the Philox rounds of consecutive k in SIMD lanes.
        void positions(std::size_t k0, std::size_t m, std::uint64_t* out) const {
            detail::random_u64_run(seed, stream, k0, m, out);
            for (std::size_t j = 0; j < m; ++j) out[j] = bounded(out[j], n);
        }
    };

    selection_type select(const sampler_context& ctx) const {
        const std::size_t n = ctx.layout.total;
        return selection_type{ctx.seed, detail::stream_id(detail::stream_tag::uniform, ctx.step), n,
                              detail::fraction_count(ctx.fraction, n)};
    }

    void describe(config_record& rec) const { rec.add("sampler", name); }
};

} // namespace sampler

TRICKLE_NAMESPACE_END
