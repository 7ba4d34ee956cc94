// trickle/kernels/exchange/body.hpp: kernel bodies of one sparse exchange: gather, scatter, neighbour sums.
//
// Two shapes of the same gather and scatter:
//   gather_body / scatter_body              one position per index: the reference form,
//                                           which every faster path is checked against;
//   gather_range_body / scatter_range_body  run(k0, k1) over consecutive values, chunked by
//                                           range_body (kernels/chunking.hpp), which lets a
//                                           host call use what the selection knows:
//     - contiguous runs (block, rotating window): one sampler lookup and one segment
//       lookup per run, then a loop the compiler vectorizes like a copy;
//     - random positions: positions computed in bulk (Feistel permutations in SIMD
//       lanes), then each address resolved (a bucket table, not a binary search) and
//       prefetched a fixed distance ahead of its load or store, so a few dozen cache misses
//       stay in flight instead of the one or two an out-of-order core overlaps while it is
//       busy with the arithmetic of the next position.
// Both shapes write the same values to the same places. The CUDA path moves the same values
// its own way (the agents of kernels/exchange/agent.hpp, launched by
// kernels/exchange/dispatch.hpp), from the same selections and segment tables.
#pragma once

#include <trickle/config.hpp>
#include <trickle/core/dtype.hpp>
#include <trickle/core/memory_space.hpp>
#include <trickle/kernels/chunking.hpp>
#include <trickle/kernels/outer_rule.hpp>
#include <trickle/kernels/flat_view.hpp>

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <utility>

TRICKLE_NAMESPACE_BEGIN

namespace detail {

template <class T>
TRICKLE_HOST_DEVICE T* element_address(const flat_view<T>& v, std::size_t i) {
    const segment<T>* s = v.segment_holding(i);
    return s->data + (i - s->offset);
}

template <class S>
concept run_selection = requires(const S& s, std::size_t k) {
    { s.runs() } -> std::convertible_to<bool>;
    { s.run_at(k).pos } -> std::convertible_to<std::size_t>;
    { s.run_at(k).len } -> std::convertible_to<std::size_t>;
};

template <class S>
concept bulk_selection = requires(const S& s, std::size_t k, std::size_t m, std::uint64_t* out) {
    s.positions(k, m, out);
};

// Run selections whose runs are whole blocks of a permutation: their run starts can be
// computed for many blocks at once.
template <class S>
concept block_run_selection = run_selection<S> && requires(const S& s, std::size_t b, std::uint64_t* out) {
    { s.block_size } -> std::convertible_to<std::size_t>;
    s.block_images(b, b, out);
    { s.run_in_block(std::uint64_t{}, b) } -> std::same_as<decltype(s.run_at(b))>;
};

// Host only: the runs of a selection from value k on, in order, each clipped to end by
// k1. Block selections look their blocks up `batch` at a time (one SIMD Feistel pass
// instead of one scalar permutation per run); the runs are those of sel.run_at.
template <class S>
class host_run_cursor {
public:
    static constexpr std::size_t batch = 32;

    host_run_cursor(const S& sel, std::size_t k1) : sel_(sel), k1_(k1) {}

    using run_type = decltype(std::declval<const S&>().run_at(std::size_t{}));

    run_type next(std::size_t k) {
        run_type r;
        if constexpr (block_run_selection<S>) {
            const std::size_t bs = sel_.block_size;
            const std::size_t b = k / bs;
            if (b < b0_ || b - b0_ >= have_) {
                const std::size_t last = (k1_ - 1) / bs; // blocks b .. last hold values below k1
                have_ = last - b + 1 < batch ? last - b + 1 : batch;
                b0_ = b;
                sel_.block_images(b, have_, images_);
            }
            r = sel_.run_in_block(images_[b - b0_], k % bs);
        } else {
            r = sel_.run_at(k);
        }
        if (r.len > k1_ - k) r.len = k1_ - k;
        return r;
    }

private:
    const S& sel_;
    std::size_t k1_;
    std::size_t b0_ = 0, have_ = 0;
    std::uint64_t images_[batch];
};

template <class S>
TRICKLE_HOST_DEVICE bool uses_runs(const S& sel) {
    if constexpr (run_selection<S>)
        return sel.runs();
    else
        return false;
}

// Bulk selections that can carry a walk from one batch to the next (layerwise keeps the
// tensor it reached, so consecutive batches need no new search).
template <class S>
concept walking_bulk_selection = requires(const S& s, std::size_t k, std::size_t m, std::uint64_t* out,
                                          typename S::walk_state& w) { s.positions(k, m, out, w); };

// Host only: out[j] = sel(k + j), in bulk when the selection can.
template <class S>
inline void host_positions(const S& sel, std::size_t k, std::size_t m, std::uint64_t* out) {
    if constexpr (bulk_selection<S>)
        sel.positions(k, m, out);
    else
        for (std::size_t j = 0; j < m; ++j) out[j] = sel(k + j);
}

// Host only: host_positions over batches, carrying the selection's walk between them when
// it has one (batches are best asked for in increasing, adjacent order).
template <class S>
struct walk_state_of {
    struct type {};
};
template <walking_bulk_selection S>
struct walk_state_of<S> {
    using type = typename S::walk_state;
};

template <class S>
class host_position_cursor {
    using walk = typename walk_state_of<S>::type;

public:
    explicit host_position_cursor(const S& sel) : sel_(sel) {}

    void fill(std::size_t k, std::size_t m, std::uint64_t* out) {
        if constexpr (walking_bulk_selection<S>)
            sel_.positions(k, m, out, walk_);
        else
            host_positions(sel_, k, m, out);
    }

private:
    const S& sel_;
    [[no_unique_address]] walk walk_{};
};

// Into L2 rather than L1 (locality 2: prefetcht1), and with read intent even for lines
// that will be written: both measured faster for scattered lines, because L1 prefetches
// (prefetcht0, prefetchw) that find the L1 miss buffers full hold up the instructions
// behind them. A line read from memory with no other holder arrives writable anyway.
template <class T>
inline void prefetch(const T* p) {
#if defined(__GNUC__) || defined(__clang__)
    __builtin_prefetch(p, 0, 2);
#else
    (void)p;
#endif
}

// Host pipeline shape: positions are computed `host_batch` at a time (whole SIMD Philox
// registers), and each value's address is resolved and prefetched `prefetch_distance`
// values before it is loaded or stored. A steady distance keeps about as many misses in
// flight as the core can track, one new prefetch per value; bursts of a whole batch of
// prefetches were measured slower, as were binary segment searches in the loop.
inline constexpr std::size_t host_batch = 32;
inline constexpr std::size_t prefetch_distance = 32;

// Host only: flat position -> address in about two loads, for the random positions of one
// call. Bucket b (positions [b << shift, (b + 1) << shift)) starts at segment first[b];
// a lookup steps forward from there past the segments that begin before the position,
// which is no step at all except in the few buckets where small tensors (biases, norms)
// sit. Built per call in O(buckets + segments) with at most one bucket per four values of
// the call, so the build stays a small share of it; the binary search it replaces costs
// log2(segments) dependent loads per position.
template <class T>
struct segment_index {
    static constexpr std::size_t max_buckets = 1024;
    const segment<T>* segs;
    std::uint32_t count;
    unsigned shift;
    std::uint32_t first[max_buckets];

    segment_index(const flat_view<T>& v, std::size_t values) : segs(v.segments), count(v.count), shift(0) {
        std::size_t buckets = 16;
        while (buckets < max_buckets && buckets * 4 < values) buckets *= 2;
        while (((v.total - 1) >> shift) >= buckets) ++shift;
        std::uint32_t s = 0;
        for (std::size_t b = 0; b < buckets; ++b) {
            const std::size_t start = b << shift;
            while (s + 1 < count && segs[s + 1].offset <= start) ++s;
            first[b] = s;
        }
    }

    const segment<T>* find(std::size_t pos) const {
        std::uint32_t s = first[pos >> shift];
        while (s + 1 < count && segs[s + 1].offset <= pos) ++s;
        return segs + s;
    }

    T* address(std::size_t pos) const {
        const segment<T>* s = find(pos);
        return s->data + (pos - s->offset);
    }
};

// Host only: calls visit(k, address of sel(k)) for k in [k, k1), in order, with every
// address prefetched prefetch_distance values ahead. Padding positions get `pad` (a zero
// to read, or a dummy to write).
template <class T, class Sel, class Visit>
inline void host_random_pass(const flat_view<T>& params, const Sel& sel, std::size_t k, std::size_t k1, T* pad,
                             const Visit& visit) {
    constexpr std::size_t C = host_batch, D = prefetch_distance, R = 64;
    static_assert(R >= C + D && R % C == 0, "the rings hold the positions computed ahead and the addresses in flight");
    const segment_index<T> index(params, k1 - k);
    host_position_cursor<Sel> positions(sel);
    std::uint64_t pos[R];
    T* addr[R];
    const std::size_t base = k;
    std::size_t made = k; // positions computed for [base, made), in chunks of C from base
    auto resolve = [&](std::size_t f) {
        const std::size_t r = (f - base) % R;
        if (f == made) {
            const std::size_t m = k1 - made < C ? k1 - made : C;
            positions.fill(made, m, pos + r); // r is a multiple of C: no wrap inside a chunk
            made += m;
        }
        T* a = pos[r] < params.total ? index.address(pos[r]) : pad;
        prefetch(a);
        addr[r] = a;
    };
    const std::size_t lead = k1 - k < D ? k1 : k + D;
    for (std::size_t f = k; f < lead; ++f) resolve(f);
    for (; k < k1; ++k) {
        if (k + D < k1) resolve(k + D);
        visit(k, addr[(k - base) % R]);
    }
}

// Host only: calls visit(segment of pos, k, pos, m) for the runs covering [k, k1), in
// order (segment nullptr for padding), computing runs ahead and prefetching up to the
// first 64 lines of each about run_lines_ahead lines before its copy. Runs of a few lines
// (small blocks) are otherwise latency-bound: one sampler lookup, one miss, one short copy
// at a time; and the hardware prefetcher needs several misses into each new block before
// it streams. (Measured on the benchmark machine against 8 lines / 32 ahead and no
// prefetch: 1 KB blocks 1.3x, 4 KB blocks 1.1x faster, 128 B blocks unchanged.)
inline constexpr std::size_t run_lines_ahead = 128;

template <class T, class Sel, class Visit>
inline void host_run_pass(const flat_view<T>& params, const Sel& sel, std::size_t k, std::size_t k1,
                          const Visit& visit) {
    struct run {
        const segment<T>* seg;
        std::size_t k, pos, len;
    };
    constexpr std::size_t R = 32;
    constexpr std::size_t line = 64;
    const segment_index<T> index(params, (k1 - k) / 8);
    host_run_cursor<Sel> cursor(sel, k1);
    run ring[R];
    std::size_t made = 0, done = 0, next = k, ahead = 1;
    auto produce = [&] {
        const auto r = cursor.next(next);
        const std::size_t m = r.len;
        const segment<T>* seg = r.pos < params.total ? index.find(r.pos) : nullptr;
        if (seg != nullptr) {
            // Within the run's first tensor only, so no address leaves an allocation.
            const std::size_t in_seg = seg->offset + seg->size - r.pos;
            const std::size_t bytes = (m < in_seg ? m : in_seg) * sizeof(T);
            const char* p = reinterpret_cast<const char*>(seg->data + (r.pos - seg->offset));
            for (std::size_t b = 0; b < bytes && b < 64 * line; b += line) prefetch(p + b);
        }
        ring[made % R] = run{seg, next, r.pos, m};
        if (made == 0) { // runs of one selection have one length: size the lead once
            const std::size_t lines = (m * sizeof(T) + line - 1) / line;
            ahead = run_lines_ahead / (lines == 0 ? 1 : lines);
            ahead = ahead < 1 ? 1 : ahead > R - 1 ? R - 1 : ahead;
        }
        next += m;
        ++made;
    };
    while (next < k1 || done < made) {
        while (next < k1 && made - done <= ahead) produce();
        const run& r = ring[done % R];
        visit(r.seg, r.k, r.pos, r.len);
        ++done;
    }
}

// dst[j] = float(src[j]) and dst[j] = T(src[j] * scale), written so the compiler sees
// plain non-aliasing loops it can vectorize.
template <class T>
TRICKLE_HOST_DEVICE void load_run(float* TRICKLE_RESTRICT dst, const T* TRICKLE_RESTRICT src, std::size_t m) {
    for (std::size_t j = 0; j < m; ++j) dst[j] = to_float(src[j]);
}

#if !defined(__CUDACC__) && defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define TRICKLE_BF16_CLONES 1
// The host bf16 store, compiled three times and picked once from the CPU's features: at
// SSE2 width (a build without -march) the rounding arithmetic, not memory, held bf16 block
// scatters to about 40% of B_copy; the x86-64-v4 version (AVX-512 with 16-bit packing)
// measured 65-75%, as a -march=native build does. The choice is made by an explicit
// __builtin_cpu_supports test rather than GCC's target_clones: target_clones resolves
// through an ifunc at load time, before sanitizer runtimes start, and crashed every
// ThreadSanitizer build at startup.
#define TRICKLE_BF16_STORE_BODY                                                                  \
    for (std::size_t j = 0; j < m; ++j) dst[j].bits = float_to_bf16_bits(src[j] * scale)
__attribute__((target("arch=x86-64-v4"))) inline void bf16_store_run_v4(
    bfloat16* TRICKLE_RESTRICT dst, const float* TRICKLE_RESTRICT src, float scale, std::size_t m) {
    TRICKLE_BF16_STORE_BODY;
}
__attribute__((target("arch=x86-64-v3"))) inline void bf16_store_run_v3(
    bfloat16* TRICKLE_RESTRICT dst, const float* TRICKLE_RESTRICT src, float scale, std::size_t m) {
    TRICKLE_BF16_STORE_BODY;
}
inline void bf16_store_run_base(bfloat16* TRICKLE_RESTRICT dst, const float* TRICKLE_RESTRICT src, float scale,
                                std::size_t m) {
    TRICKLE_BF16_STORE_BODY;
}
#undef TRICKLE_BF16_STORE_BODY

using bf16_store_fn = void (*)(bfloat16*, const float*, float, std::size_t);

inline bf16_store_fn pick_bf16_store() noexcept {
    __builtin_cpu_init();
    if (__builtin_cpu_supports("x86-64-v4")) return &bf16_store_run_v4;
    if (__builtin_cpu_supports("x86-64-v3")) return &bf16_store_run_v3;
    return &bf16_store_run_base;
}

inline void bf16_store_run(bfloat16* TRICKLE_RESTRICT dst, const float* TRICKLE_RESTRICT src, float scale,
                           std::size_t m) {
    static const bf16_store_fn impl = pick_bf16_store();
    impl(dst, src, scale, m);
}
#else
#define TRICKLE_BF16_CLONES 0
#endif

template <class T>
TRICKLE_HOST_DEVICE void store_run(T* TRICKLE_RESTRICT dst, const float* TRICKLE_RESTRICT src, float scale,
                                   std::size_t m) {
    if constexpr (std::is_same_v<T, bfloat16>) {
#if TRICKLE_BF16_CLONES
        bf16_store_run(dst, src, scale, m);
#else
        for (std::size_t j = 0; j < m; ++j) dst[j].bits = float_to_bf16_bits(src[j] * scale);
#endif
    } else {
        for (std::size_t j = 0; j < m; ++j) dst[j] = from_float<T>(src[j] * scale);
    }
}

} // namespace detail

// buf[k] = value at position sel(k), in fp32 (0 for padding). One pass over the
// selection: positions are computed, never read from an index array.
template <class T, class Selection>
struct gather_body {
    flat_view<T> params;
    Selection sel;
    float* buf;

    TRICKLE_HOST_DEVICE void operator()(std::size_t k) const {
        const std::size_t pos = sel(k);
        buf[k] = pos < params.total ? to_float(*detail::element_address(params, pos)) : 0.0f;
    }
};

// value at position sel(k) = buf[k] * scale, rounded to T (padding is skipped). A
// position selected twice receives the same value twice.
template <class T, class Selection>
struct scatter_body {
    flat_view<T> params;
    Selection sel;
    const float* buf;
    float scale;

    TRICKLE_HOST_DEVICE void operator()(std::size_t k) const {
        const std::size_t pos = sel(k);
        if (pos < params.total) *detail::element_address(params, pos) = from_float<T>(buf[k] * scale);
    }
};

// gather_body over values [k0, k1) in one call, moving them the fastest way the selection
// allows (see the top of this file); chunked by range_body (kernels/chunking.hpp).
template <class T, class Selection>
struct gather_range_body {
    flat_view<T> params;
    Selection sel;
    float* buf;

    TRICKLE_HOST_DEVICE void run(std::size_t k0, std::size_t k1) const {
        if (detail::uses_runs(sel)) {
            if constexpr (detail::run_selection<Selection>) gather_runs(k0, k1);
            return;
        }
#if TRICKLE_ON_DEVICE
        for (std::size_t k = k0; k < k1; ++k) gather_body<T, Selection>{params, sel, buf}(k);
#else
        gather_pipelined(k0, k1);
#endif
    }

private:
    // Values k .. k+m-1 from positions pos .. pos+m-1, starting in segment s (a run may
    // cross into the next tensors); zeros when s is nullptr (padding).
    TRICKLE_HOST_DEVICE void gather_run(const segment<T>* s, std::size_t k, std::size_t pos, std::size_t m) const {
        if (s == nullptr) {
            for (std::size_t j = 0; j < m; ++j) buf[k + j] = 0.0f;
            return;
        }
        for_each_piece_from(s, pos, pos + m, [&](const T* p, std::size_t i, std::size_t n) {
            detail::load_run(buf + k + (i - pos), p, n);
        });
    }

    struct run_loader {
        const gather_range_body* body;
        TRICKLE_HOST_DEVICE void operator()(const segment<T>* s, std::size_t k, std::size_t pos, std::size_t m) const {
            body->gather_run(s, k, pos, m);
        }
    };

    TRICKLE_HOST_DEVICE void gather_runs(std::size_t k, std::size_t k1) const {
#if TRICKLE_ON_DEVICE
        while (k < k1) {
            const auto r = sel.run_at(k);
            const std::size_t m = r.len < k1 - k ? r.len : k1 - k;
            gather_run(r.pos < params.total ? params.segment_holding(r.pos) : nullptr, k, r.pos, m);
            k += m;
        }
#else
        detail::host_run_pass(params, sel, k, k1, run_loader{this});
#endif
    }

#if !TRICKLE_ON_DEVICE
    struct load_value {
        float* buf;
        void operator()(std::size_t k, const T* a) const { buf[k] = to_float(*a); }
    };

    void gather_pipelined(std::size_t k, std::size_t k1) const {
        T zero = from_float<T>(0.0f);
        detail::host_random_pass(params, sel, k, k1, &zero, load_value{buf});
    }
#endif
};

// scatter_body over values [k0, k1) in one call, as gather_range_body.
template <class T, class Selection>
struct scatter_range_body {
    flat_view<T> params;
    Selection sel;
    const float* buf;
    float scale;

    TRICKLE_HOST_DEVICE void run(std::size_t k0, std::size_t k1) const {
        if (detail::uses_runs(sel)) {
            if constexpr (detail::run_selection<Selection>) scatter_runs(k0, k1);
            return;
        }
#if TRICKLE_ON_DEVICE
        for (std::size_t k = k0; k < k1; ++k) scatter_body<T, Selection>{params, sel, buf, scale}(k);
#else
        scatter_pipelined(k0, k1);
#endif
    }

private:
    // Positions pos .. pos+m-1 = values k .. k+m-1, starting in segment s; nothing when
    // s is nullptr (padding).
    TRICKLE_HOST_DEVICE void scatter_run(const segment<T>* s, std::size_t k, std::size_t pos, std::size_t m) const {
        if (s == nullptr) return;
        for_each_piece_from(s, pos, pos + m, [&](T* p, std::size_t i, std::size_t n) {
            detail::store_run(p, buf + k + (i - pos), scale, n);
        });
    }

    struct run_storer {
        const scatter_range_body* body;
        TRICKLE_HOST_DEVICE void operator()(const segment<T>* s, std::size_t k, std::size_t pos, std::size_t m) const {
            body->scatter_run(s, k, pos, m);
        }
    };

    TRICKLE_HOST_DEVICE void scatter_runs(std::size_t k, std::size_t k1) const {
#if TRICKLE_ON_DEVICE
        while (k < k1) {
            const auto r = sel.run_at(k);
            const std::size_t m = r.len < k1 - k ? r.len : k1 - k;
            scatter_run(r.pos < params.total ? params.segment_holding(r.pos) : nullptr, k, r.pos, m);
            k += m;
        }
#else
        detail::host_run_pass(params, sel, k, k1, run_storer{this});
#endif
    }

#if !TRICKLE_ON_DEVICE
    struct store_value {
        const float* buf;
        float scale;
        void operator()(std::size_t k, T* a) const { *a = from_float<T>(buf[k] * scale); }
    };

    // Stores stay in k order, so a position selected twice ends with the value of its
    // last k, as with scatter_body.
    void scatter_pipelined(std::size_t k, std::size_t k1) const {
        T dummy{};
        detail::host_random_pass(params, sel, k, k1, &dummy, store_value{buf, scale});
    }
#endif
};

// The chunked range bodies a host exchange launches: call c of for_each_index moves values
// [c·range, (c+1)·range) of the selection.
template <class T, class Selection>
range_body<gather_range_body<T, Selection>> make_gather(const flat_view<T>& params, const Selection& sel, float* buf) {
    return ranges<host_space>(gather_range_body<T, Selection>{params, sel, buf}, sel.count(), chunk_use::exchange);
}

template <class T, class Selection>
range_body<scatter_range_body<T, Selection>> make_scatter(const flat_view<T>& params, const Selection& sel,
                                                          const float* buf, float scale) {
    return ranges<host_space>(scatter_range_body<T, Selection>{params, sel, buf, scale}, sel.count(),
                              chunk_use::exchange);
}

// Overlapped SPARTA's late average: the group's mean of the values gathered one step
// earlier, plus what this worker changed at those positions since (now - gathered):
//   buf[k] = buf[k] * scale + (now[k] - gathered[k])
struct overlap_correction_body {
    float* buf;
    const float* now;
    const float* gathered;
    float scale;
    TRICKLE_HOST_DEVICE void operator()(std::size_t k) const {
        buf[k] = add_rn(mul_rn(buf[k], scale), sub_rn(now[k], gathered[k]));
    }
};

// buf[k] += other[k]
struct add_body {
    float* buf;
    const float* other;
    TRICKLE_HOST_DEVICE void operator()(std::size_t k) const { buf[k] += other[k]; }
};

// buf[k] = left[k] + buf[k] + right[k]
struct add_neighbours_body {
    float* buf;
    const float* left;
    const float* right;
    TRICKLE_HOST_DEVICE void operator()(std::size_t k) const { buf[k] = left[k] + buf[k] + right[k]; }
};

TRICKLE_NAMESPACE_END
