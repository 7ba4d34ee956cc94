// trickle/kernels/sparse_exchange.hpp: kernel bodies of one sparse exchange: gather, scatter, neighbour sums.
//
// Two shapes of the same gather and scatter:
//   gather_body / scatter_body              one position per index: the simplest form, and
//                                           what a CUDA thread runs for random positions;
//   gather_range_body / scatter_range_body  `range` consecutive values per index, which
//                                           lets a call use what the selection knows:
//     - contiguous runs (block, rotating window): one sampler lookup and one segment
//       lookup per run, then a loop the compiler vectorizes like a copy;
//     - random positions on the host: positions computed in bulk (SIMD Philox), then
//       addresses resolved and prefetched one batch ahead of the loads and stores, so
//       dozens of cache misses are in flight instead of the one or two an out-of-order
//       core overlaps while it is busy with the arithmetic of the next position.
// Both shapes write the same values to the same places, in the same order within a call.
#pragma once

#include <trickle/config.hpp>
#include <trickle/core/dtype.hpp>
#include <trickle/core/memory_space.hpp>
#include <trickle/kernels/flat_view.hpp>

#include <cstddef>
#include <cstdint>
#include <type_traits>

TRICKLE_NAMESPACE_BEGIN

namespace detail {

// The segment holding flat index i (i < total), as flat_view::segment_of, but without
// data-dependent branches: the loop count depends on the segment count only, so random
// positions cost no mispredictions (each of which would also flush the misses in flight).
template <class T>
TRICKLE_HOST_DEVICE const segment<T>* find_segment(const flat_view<T>& v, std::size_t i) {
    const segment<T>* base = v.segments;
    std::uint32_t len = v.count;
    while (len > 1) {
        const std::uint32_t half = len / 2;
        base = base[half].offset <= i ? base + half : base;
        len -= half;
    }
    return base;
}

template <class T>
TRICKLE_HOST_DEVICE T* element_address(const flat_view<T>& v, std::size_t i) {
    const segment<T>* s = find_segment(v, i);
    return s->data + (i - s->offset);
}

template <class S>
concept run_selection = requires(const S& s, std::size_t k) {
    { s.runs() } -> std::convertible_to<bool>;
    { s.run_at(k).pos } -> std::convertible_to<std::size_t>;
    { s.run_at(k).len } -> std::convertible_to<std::size_t>;
};

template <class S>
concept bulk_selection = requires(const S& s, std::size_t k, std::uint64_t* out) { s.positions(k, k, out); };

template <class S>
TRICKLE_HOST_DEVICE bool uses_runs(const S& sel) {
    if constexpr (run_selection<S>)
        return sel.runs();
    else
        return false;
}

// Host only: out[j] = sel(k + j), in bulk when the selection can.
template <class S>
inline void host_positions(const S& sel, std::size_t k, std::size_t m, std::uint64_t* out) {
    if constexpr (bulk_selection<S>)
        sel.positions(k, m, out);
    else
        for (std::size_t j = 0; j < m; ++j) out[j] = sel(k + j);
}

template <class T>
inline void prefetch_read(const T* p) {
#if defined(__GNUC__) || defined(__clang__)
    __builtin_prefetch(p, 0, 3);
#else
    (void)p;
#endif
}

template <class T>
inline void prefetch_write(const T* p) {
#if defined(__GNUC__) || defined(__clang__)
    __builtin_prefetch(p, 1, 3);
#else
    (void)p;
#endif
}

// Values per batch of the host pipeline: enough misses in flight to cover the memory
// latency, few enough that the addresses stay in registers and L1.
inline constexpr std::size_t host_batch = 32;

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

    T* address(std::size_t pos) const {
        std::uint32_t s = first[pos >> shift];
        while (s + 1 < count && segs[s + 1].offset <= pos) ++s;
        return segs[s].data + (pos - segs[s].offset);
    }
};

// dst[j] = float(src[j]) and dst[j] = T(src[j] * scale), written so the compiler sees
// plain non-aliasing loops it can vectorize.
template <class T>
TRICKLE_HOST_DEVICE void load_run(float* TRICKLE_RESTRICT dst, const T* TRICKLE_RESTRICT src, std::size_t m) {
    for (std::size_t j = 0; j < m; ++j) dst[j] = to_float(src[j]);
}

template <class T>
TRICKLE_HOST_DEVICE void store_run(T* TRICKLE_RESTRICT dst, const float* TRICKLE_RESTRICT src, float scale,
                                   std::size_t m) {
    for (std::size_t j = 0; j < m; ++j) dst[j] = from_float<T>(src[j] * scale);
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

// Values per call of a range body in memory space Space for a selection of type S: large
// on the host (per-call set-up is amortized, and OpenMP threads still get many calls);
// on a GPU one value per thread for random positions, and a few for runs, so one block
// lookup serves several adjacent loads.
template <class Space, class S>
constexpr std::size_t exchange_range() {
    if constexpr (std::is_same_v<Space, host_space>)
        return 4096;
    else if constexpr (detail::run_selection<S>)
        return 4;
    else
        return 1;
}

// gather_body over values [c·range, (c+1)·range) ∩ [0, count) per call c; launch it for
// c < calls(). count must be sel.count().
template <class T, class Selection>
struct gather_range_body {
    flat_view<T> params;
    Selection sel;
    float* buf;
    std::size_t count;
    std::size_t range;

    TRICKLE_HOST_DEVICE std::size_t calls() const { return (count + range - 1) / range; }

    TRICKLE_HOST_DEVICE void operator()(std::size_t c) const {
        const std::size_t k0 = c * range;
        const std::size_t k1 = count - k0 < range ? count : k0 + range;
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
    TRICKLE_HOST_DEVICE void gather_runs(std::size_t k, std::size_t k1) const {
        while (k < k1) {
            const auto r = sel.run_at(k);
            std::size_t m = r.len < k1 - k ? r.len : k1 - k;
            if (r.pos >= params.total) {
                for (std::size_t j = 0; j < m; ++j) buf[k + j] = 0.0f;
                k += m;
                continue;
            }
            // A run may cross from one tensor into the next.
            std::size_t pos = r.pos;
            const segment<T>* s = detail::find_segment(params, pos);
            while (m > 0) {
                const std::size_t left = s->offset + s->size - pos;
                const std::size_t n = m < left ? m : left;
                detail::load_run(buf + k, s->data + (pos - s->offset), n);
                k += n;
                pos += n;
                m -= n;
                ++s;
            }
        }
    }

#if !TRICKLE_ON_DEVICE
    // Addresses of values k .. k+m-1, prefetched; padding reads a zero instead.
    void stage(const detail::segment_index<T>& index, std::size_t k, std::size_t m, const T** addr,
               const T* zero) const {
        std::uint64_t pos[detail::host_batch];
        detail::host_positions(sel, k, m, pos);
        for (std::size_t j = 0; j < m; ++j) {
            addr[j] = pos[j] < params.total ? index.address(pos[j]) : zero;
            detail::prefetch_read(addr[j]);
        }
    }

    // Addresses are resolved and prefetched one batch ahead of the loads, so the misses
    // of a whole batch overlap each other and the position arithmetic of the next one.
    void gather_pipelined(std::size_t k, std::size_t k1) const {
        constexpr std::size_t B = detail::host_batch;
        const detail::segment_index<T> index(params, k1 - k);
        const T zero = from_float<T>(0.0f);
        const T* addr[2][B];
        int cur = 0;
        stage(index, k, k1 - k < B ? k1 - k : B, addr[0], &zero);
        while (k < k1) {
            const std::size_t m = k1 - k < B ? k1 - k : B;
            const std::size_t next = k + m;
            if (next < k1) stage(index, next, k1 - next < B ? k1 - next : B, addr[cur ^ 1], &zero);
            const T* const* a = addr[cur];
            for (std::size_t j = 0; j < m; ++j) buf[k + j] = to_float(*a[j]);
            k = next;
            cur ^= 1;
        }
    }
#endif
};

// scatter_body over values [c·range, (c+1)·range) ∩ [0, count) per call c; launch it for
// c < calls(). count must be sel.count().
template <class T, class Selection>
struct scatter_range_body {
    flat_view<T> params;
    Selection sel;
    const float* buf;
    float scale;
    std::size_t count;
    std::size_t range;

    TRICKLE_HOST_DEVICE std::size_t calls() const { return (count + range - 1) / range; }

    TRICKLE_HOST_DEVICE void operator()(std::size_t c) const {
        const std::size_t k0 = c * range;
        const std::size_t k1 = count - k0 < range ? count : k0 + range;
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
    TRICKLE_HOST_DEVICE void scatter_runs(std::size_t k, std::size_t k1) const {
        while (k < k1) {
            const auto r = sel.run_at(k);
            std::size_t m = r.len < k1 - k ? r.len : k1 - k;
            if (r.pos >= params.total) {
                k += m;
                continue;
            }
            std::size_t pos = r.pos;
            const segment<T>* s = detail::find_segment(params, pos);
            while (m > 0) {
                const std::size_t left = s->offset + s->size - pos;
                const std::size_t n = m < left ? m : left;
                detail::store_run(s->data + (pos - s->offset), buf + k, scale, n);
                k += n;
                pos += n;
                m -= n;
                ++s;
            }
        }
    }

#if !TRICKLE_ON_DEVICE
    // Addresses of values k .. k+m-1, prefetched for writing; padding writes to a dummy.
    void stage(const detail::segment_index<T>& index, std::size_t k, std::size_t m, T** addr, T* dummy) const {
        std::uint64_t pos[detail::host_batch];
        detail::host_positions(sel, k, m, pos);
        for (std::size_t j = 0; j < m; ++j) {
            addr[j] = pos[j] < params.total ? index.address(pos[j]) : dummy;
            detail::prefetch_write(addr[j]);
        }
    }

    // As gather_pipelined. Stores stay in k order, so a position selected twice ends with
    // the value of its last k, as in scatter_body.
    void scatter_pipelined(std::size_t k, std::size_t k1) const {
        constexpr std::size_t B = detail::host_batch;
        const detail::segment_index<T> index(params, k1 - k);
        T dummy{};
        T* addr[2][B];
        int cur = 0;
        stage(index, k, k1 - k < B ? k1 - k : B, addr[0], &dummy);
        while (k < k1) {
            const std::size_t m = k1 - k < B ? k1 - k : B;
            const std::size_t next = k + m;
            if (next < k1) stage(index, next, k1 - next < B ? k1 - next : B, addr[cur ^ 1], &dummy);
            T* const* a = addr[cur];
            for (std::size_t j = 0; j < m; ++j) *a[j] = from_float<T>(buf[k + j] * scale);
            k = next;
            cur ^= 1;
        }
    }
#endif
};

// The range bodies exchange() launches for parameters in memory space Space.
template <class Space, class T, class Selection>
gather_range_body<T, Selection> make_gather(const flat_view<T>& params, const Selection& sel, float* buf) {
    return {params, sel, buf, static_cast<std::size_t>(sel.count()), exchange_range<Space, Selection>()};
}

template <class Space, class T, class Selection>
scatter_range_body<T, Selection> make_scatter(const flat_view<T>& params, const Selection& sel, const float* buf,
                                              float scale) {
    return {params, sel, buf, scale, static_cast<std::size_t>(sel.count()), exchange_range<Space, Selection>()};
}

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
