// trickle/sampler/layerwise.hpp: sampling within tensors: each tensor's share every exchange, or a rotating window.
#pragma once

#include <trickle/config.hpp>
#include <trickle/core/feistel.hpp>
#include <trickle/core/philox.hpp>
#include <trickle/core/search.hpp>
#include <trickle/error.hpp>
#include <trickle/sampler/sampler.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <istream>
#include <ostream>

TRICKLE_NAMESPACE_BEGIN

namespace sampler {

// Two ways to respect the model's layers, which the SPARTA authors report doing better
// than sampling the whole group at random:
//
// per_tensor (stratified): every exchange gives each tensor its own share of the
//   positions: tensor i, holding flat indices [o_i, o_{i+1}), receives
//   floor(p·o_{i+1} + u) - floor(p·o_i + u) distinct positions, drawn uniformly inside it
//   without replacement (the first images of a Feistel permutation of the tensor keyed by
//   seed, step and tensor, feistel32_permutation, so no position is ever written twice on
//   any backend), where
//   u in [0, 1) is a shared random phase per exchange. Each tensor gets p times its size
//   (within one) every exchange, and a tensor smaller than 1/p gets a position with
//   probability p·size, so no layer is starved or favoured. The cumulative counts come
//   from the offsets in closed form, so no per-tensor table is built.
// rotating: each exchange takes the next contiguous window of round(p·n) positions of
//   the flat space, wrapping around, so tensors are averaged whole, one after another, and
//   every position is covered every ceil(1/p) exchanges. The window start is state.
struct layerwise {
    static constexpr const char* name = "layerwise";

    enum class mode : int { per_tensor = 0, rotating = 1 };

    mode how = mode::per_tensor;
    std::uint64_t cursor = 0; // rotating: start of the next window

    struct selection_type {
        layout_view layout;
        std::uint64_t seed;
        std::uint64_t stream;
        double p;
        double phase;
        std::size_t size;
        std::size_t start; // rotating
        int how;

        TRICKLE_HOST_DEVICE std::size_t count() const { return size; }

        TRICKLE_HOST_DEVICE std::size_t cumulative(std::uint32_t i) const {
            // The product is rounded on its own, as on the host: nvcc would otherwise fuse it
            // with the addition (a DFMA), and a tensor's share could differ by one there.
#if TRICKLE_ON_DEVICE
            const double scaled = __dmul_rn(p, static_cast<double>(layout.offsets[i]));
#else
            const double scaled = p * static_cast<double>(layout.offsets[i]);
#endif
            return static_cast<std::size_t>(floor(scaled + phase));
        }

        // The tensor whose cumulative range holds k: the last i with cumulative(i) <= k, that
        // is with p * offsets[i] + phase < k + 1. The search compares integer offsets with
        // that bound (a floor per step made it the costliest part of a host gather); the
        // walks then settle what rounding in the bound got wrong, by cumulative() itself,
        // which is monotone, so the answer is exact. They rarely take a step.
        TRICKLE_HOST_DEVICE std::uint32_t tensor_holding(std::size_t k) const {
            const double bound = (static_cast<double>(k) + 1.0 - phase) / p;
            std::uint32_t lo = detail::last_where(
                layout.count, [&](std::uint32_t s) { return static_cast<double>(layout.offsets[s]) < bound; });
            while (lo + 1 < layout.count && cumulative(lo + 1) <= k) ++lo;
            while (lo > 0 && cumulative(lo) > k) --lo;
            return lo;
        }

        // Tensor t's positions at this exchange are the first images of a permutation of
        // [0, extent) keyed by (seed, step, t): a feistel32_permutation (16 SIMD lanes on the
        // host), or for a tensor of more than 2^32 elements a feistel_permutation. A tensor's
        // share never exceeds its size (p <= 1), so its values take distinct images.
        static constexpr std::uint64_t narrow_limit = std::uint64_t{1} << 32;
        TRICKLE_HOST_DEVICE std::uint64_t tensor_key(std::uint32_t t) const { return mix64(seed ^ mix64(stream + t)); }
        TRICKLE_HOST_DEVICE std::size_t tensor_image(std::uint32_t t, std::size_t extent, std::size_t j) const {
            if (extent <= narrow_limit) return static_cast<std::size_t>(feistel32_permutation(extent, tensor_key(t))(j));
            return static_cast<std::size_t>(feistel_permutation(extent, tensor_key(t))(j));
        }

        TRICKLE_HOST_DEVICE std::size_t operator()(std::size_t k) const {
            if (how == static_cast<int>(mode::rotating)) {
                const std::size_t j = start + k;
                return j < layout.total ? j : j - layout.total;
            }
            const std::uint32_t lo = tensor_holding(k);
            const std::size_t begin = layout.offsets[lo];
            const std::size_t extent = layout.offsets[lo + 1] - begin;
            return begin + tensor_image(lo, extent, k - cumulative(lo));
        }

        // The rotating window is one contiguous run (two where it wraps).
        TRICKLE_HOST_DEVICE bool runs() const { return how == static_cast<int>(mode::rotating); }
        TRICKLE_HOST_DEVICE selection_run run_at(std::size_t k) const {
            if (how != static_cast<int>(mode::rotating)) return selection_run{(*this)(k), 1};
            const std::size_t j = start + k;
            const std::size_t left = size - k;
            if (j < layout.total) return selection_run{j, left < layout.total - j ? left : layout.total - j};
            return selection_run{j - layout.total, left};
        }

        // Where a walk over consecutive batches stands: the tensor holding value
        // resume_at - 1, and the last tensor permutation built (batches of one tensor reuse it).
        // A walk belongs to one selection.
        struct walk_state {
            std::uint32_t tensor = 0;
            std::size_t resume_at = ~std::size_t{0};
            std::uint32_t perm_tensor = ~std::uint32_t{0};
            feistel32_permutation perm{};
        };

        // The same positions in bulk: consecutive k fall in the same or the next tensors,
        // so the tensor search runs once and then walks forward, and each tensor's share is
        // a run of consecutive images of its permutation, computed in SIMD lanes. (Host
        // only: it reads layout.offsets, which must be host memory.)
        void positions(std::size_t k0, std::size_t m, std::uint64_t* out) const {
            walk_state w;
            positions(k0, m, out, w);
        }

        // As above, continuing the walk of the previous batch when this one starts where it
        // ended (k0 == w.resume_at), so a pass over consecutive batches searches once.
        void positions(std::size_t k0, std::size_t m, std::uint64_t* out, walk_state& w) const {
            if (m == 0) return;
            if (how == static_cast<int>(mode::rotating)) {
                for (std::size_t j = 0; j < m; ++j) out[j] = (*this)(k0 + j);
                return;
            }
            // The tensor holding k0 - 1 is at or before the one holding k0: walk on from it.
            std::uint32_t lo = k0 == w.resume_at ? w.tensor : tensor_holding(k0);
            std::size_t j = 0;
            while (j < m) {
                const std::size_t k = k0 + j;
                // Tensors whose share is empty have cumulative(i + 1) == cumulative(i): skip them
                // too, as the binary search (last i with cumulative(i) <= k) would.
                std::size_t next = lo + 1 < layout.count ? cumulative(lo + 1) : ~std::size_t{0};
                while (next <= k) {
                    ++lo;
                    next = lo + 1 < layout.count ? cumulative(lo + 1) : ~std::size_t{0};
                }
                const std::size_t begin = layout.offsets[lo];
                const std::size_t extent = layout.offsets[lo + 1] - begin;
                const std::size_t run = next - k < m - j ? next - k : m - j;
                if (extent <= narrow_limit) {
                    if (w.perm_tensor != lo) {
                        w.perm = feistel32_permutation(extent, tensor_key(lo));
                        w.perm_tensor = lo;
                    }
                    w.perm.images(k - cumulative(lo), run, out + j);
                } else {
                    feistel_permutation(extent, tensor_key(lo)).images(k - cumulative(lo), run, out + j);
                }
                for (std::size_t r = 0; r < run; ++r) out[j + r] += begin;
                j += run;
            }
            w.tensor = lo;
            w.resume_at = k0 + m;
        }
    };

    selection_type select(const sampler_context& ctx) {
        const std::size_t n = ctx.layout.total;
        selection_type sel{ctx.layout, ctx.seed, detail::stream_id(detail::stream_tag::layerwise, ctx.step),
                           ctx.fraction, 0.0, 0, 0, static_cast<int>(how)};
        if (how == mode::rotating) {
            if (cursor >= n) cursor = 0;
            sel.size = detail::fraction_count(ctx.fraction, n);
            sel.start = static_cast<std::size_t>(cursor);
            cursor = (cursor + sel.size) % n;
        } else {
            const std::uint64_t w = random_u64(ctx.seed, sel.stream, ~0ull);
            sel.phase = uniform01_d(w);
            sel.size = static_cast<std::size_t>(std::floor(ctx.fraction * static_cast<double>(n) + sel.phase));
        }
        return sel;
    }

    // The most values an exchange at a fraction up to p of n positions moves: round(p·n)
    // for a window, floor(p·n + phase) <= floor(p·n) + 1 per tensor.
    std::size_t max_count(double p, std::size_t n) const {
        if (how == mode::rotating) return detail::fraction_count(p, n);
        const auto c = static_cast<std::size_t>(std::floor(p * static_cast<double>(n))) + 1;
        return c < n ? c : n;
    }

    void describe(config_record& rec) const {
        rec.add("sampler", name);
        rec.add("layerwise_mode", how == mode::rotating ? "rotating" : "per_tensor");
        rec.add("sampler_cursor", cursor);
        if (how != mode::per_tensor && how != mode::rotating) rec.set_error("sampler::layerwise: unknown mode");
    }

    void save(std::ostream& os) const { os.write(reinterpret_cast<const char*>(&cursor), sizeof cursor); }

    void load(std::istream& is) {
        std::uint64_t c = 0;
        is.read(reinterpret_cast<char*>(&c), sizeof c);
        if (!is) throw invalid_argument("checkpoint: truncated layerwise sampler state");
        cursor = c;
    }
};

} // namespace sampler

TRICKLE_NAMESPACE_END
