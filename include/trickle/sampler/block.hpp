// trickle/sampler/block.hpp: aligned contiguous blocks chosen at random, for coalesced memory access.
#pragma once

#include <trickle/config.hpp>
#include <trickle/core/feistel.hpp>
#include <trickle/sampler/sampler.hpp>

#include <cstddef>
#include <cstdint>

TRICKLE_NAMESPACE_BEGIN

namespace sampler {

// The flat index space is cut into blocks of block_size positions aligned at multiples
// of block_size (the last block may be partial). Each exchange takes
// m = round(p·n / block_size) distinct blocks (at least one; every block for p = 1), the first m of a
// permutation of the blocks keyed by (seed, step): the same randomness as uniform at
// block granularity, with reads and writes that stream like a copy. Positions of a
// partial last block beyond n travel as padding and are counted as sent.
struct block {
    static constexpr const char* name = "block";

    std::size_t block_size = 256;

    struct selection_type {
        feistel_permutation blocks;
        std::size_t n;
        std::size_t block_size;
        std::size_t size;

        TRICKLE_HOST_DEVICE std::size_t count() const { return size; }
        TRICKLE_HOST_DEVICE std::size_t operator()(std::size_t k) const {
            const std::size_t b = static_cast<std::size_t>(blocks(k / block_size));
            const std::size_t pos = b * block_size + k % block_size;
            return pos < n ? pos : n;
        }
        // One permutation lookup per block instead of one per position.
        TRICKLE_HOST_DEVICE bool runs() const { return true; }
        TRICKLE_HOST_DEVICE selection_run run_at(std::size_t k) const {
            return run_in_block(blocks(k / block_size), k % block_size);
        }
        // The run from offset j of the block whose permuted index is `image`.
        TRICKLE_HOST_DEVICE selection_run run_in_block(std::uint64_t image, std::size_t j) const {
            const std::size_t pos = static_cast<std::size_t>(image) * block_size + j;
            const std::size_t rest = block_size - j;
            if (pos >= n) return selection_run{n, rest};
            return selection_run{pos, rest < n - pos ? rest : n - pos};
        }
        // Host only: out[i] = the permuted index of block b0 + i, for m blocks at once
        // (SIMD Feistel rounds where the CPU has them).
        void block_images(std::size_t b0, std::size_t m, std::uint64_t* out) const { blocks.images(b0, m, out); }
    };

    selection_type select(const sampler_context& ctx) const {
        const std::size_t n = ctx.layout.total;
        const std::size_t nblocks = (n + block_size - 1) / block_size;
        selection_type sel{feistel_permutation{}, n, block_size, blocks_for(ctx.fraction, n) * block_size};
        sel.blocks = feistel_permutation(nblocks, 0);
        rekey(sel, ctx.seed, ctx.step);
        return sel;
    }

    // The selection of another step with the same fraction: only the permutation's key
    // depends on the step, so the device can re-key a selection from a step counter in
    // device memory (what lets a captured CUDA graph advance by itself).
    TRICKLE_HOST_DEVICE static void rekey(selection_type& sel, std::uint64_t seed, std::uint64_t step) {
        sel.blocks = feistel_permutation(sel.blocks.n, mix64(seed ^ detail::stream_id(detail::stream_tag::block, step)));
    }

    // Values of a selection at fraction p of n positions (padding included): the most any
    // exchange at a fraction up to p moves.
    std::size_t max_count(double p, std::size_t n) const { return blocks_for(p, n) * block_size; }

private:
    std::size_t blocks_for(double p, std::size_t n) const {
        const std::size_t nblocks = (n + block_size - 1) / block_size;
        // p = 1 is every position, the partial last block's included (round(n / block_size)
        // alone would leave out a last block less than half full).
        if (p >= 1.0) return nblocks;
        return detail::fraction_count(
            p * static_cast<double>(n) / (static_cast<double>(nblocks) * static_cast<double>(block_size)), nblocks);
    }

public:

    void describe(config_record& rec) const {
        rec.add("sampler", name);
        rec.add("block_size", block_size);
        if (block_size == 0) rec.set_error("sampler::block: block_size must be >= 1");
    }
};

} // namespace sampler

TRICKLE_NAMESPACE_END
