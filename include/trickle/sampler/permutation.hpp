// trickle/sampler/permutation.hpp: walks a seeded permutation so every position is exchanged once per cycle.
#pragma once

#include <trickle/config.hpp>
#include <trickle/core/feistel.hpp>
#include <trickle/error.hpp>
#include <trickle/sampler/sampler.hpp>

#include <cstddef>
#include <cstdint>
#include <istream>
#include <ostream>

TRICKLE_NAMESPACE_BEGIN

namespace sampler {

// Full coverage without repeats: a cycle is one pseudo-random permutation of the n
// positions (a Feistel bijection keyed by the seed and the cycle number), and each
// exchange takes the next ceil(p·n) positions of it. The exchange that reaches the end
// of the permutation takes only what is left, so every position is exchanged exactly
// once per cycle, and a cycle lasts ceil(n / ceil(p·n)) <= ceil(1/p) exchanges at a
// constant fraction. The cursor is state: it is saved in checkpoints.
struct permutation {
    static constexpr const char* name = "permutation";

    std::uint64_t cycle = 0;  // how many full permutations have been walked
    std::uint64_t cursor = 0; // position reached in the current one

    using selection_type = feistel_range;

    selection_type select(const sampler_context& ctx) {
        const std::size_t n = ctx.layout.total;
        std::size_t c = p_count(ctx.fraction, n);
        if (cursor >= n) { // the group shrank since the state was saved: start a new cycle
            cursor = 0;
            ++cycle;
        }
        if (cursor + c > n) c = n - cursor;
        const selection_type sel{
            feistel_permutation(n, mix64(ctx.seed ^ detail::stream_id(detail::stream_tag::permutation, cycle))),
            cursor, c};
        cursor += c;
        if (cursor == n) {
            cursor = 0;
            ++cycle;
        }
        return sel;
    }

    // The most values an exchange at a fraction up to p of n positions moves.
    std::size_t max_count(double p, std::size_t n) const { return p_count(p, n); }

    void describe(config_record& rec) const {
        rec.add("sampler", name);
        rec.add("sampler_cycle", cycle);
        rec.add("sampler_cursor", cursor);
    }

    void save(std::ostream& os) const {
        os.write(reinterpret_cast<const char*>(&cycle), sizeof cycle);
        os.write(reinterpret_cast<const char*>(&cursor), sizeof cursor);
    }

    void load(std::istream& is) {
        std::uint64_t c = 0, u = 0;
        is.read(reinterpret_cast<char*>(&c), sizeof c);
        is.read(reinterpret_cast<char*>(&u), sizeof u);
        if (!is) throw invalid_argument("checkpoint: truncated permutation sampler state");
        cycle = c;
        cursor = u;
    }

private:
    static std::size_t p_count(double p, std::size_t n) {
        const double c = p * static_cast<double>(n);
        std::size_t k = static_cast<std::size_t>(c);
        if (static_cast<double>(k) < c) ++k; // ceil
        if (k > n) k = n;
        return k == 0 ? 1 : k;
    }
};

} // namespace sampler

TRICKLE_NAMESPACE_END
