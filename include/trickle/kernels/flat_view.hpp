// trickle/kernels/flat_view.hpp: a kernel's view of a parameter group as one flat array.
#pragma once

#include <trickle/config.hpp>
#include <trickle/core/dtype.hpp>
#include <trickle/core/search.hpp>

#include <cstddef>
#include <cstdint>
#include <type_traits>

TRICKLE_NAMESPACE_BEGIN

// One non-empty tensor of a group, as kernels see it: flat indices
// [offset, offset + size) live at data[0 .. size).
template <class T>
struct segment {
    T* data;
    std::size_t offset;
    std::size_t size;
};

// The tensors' first flat indices, for code that needs the layout but not the values
// (samplers). offsets[0..count] lives in the kernels' memory space; offsets[count] == total.
struct layout_view {
    const std::size_t* offsets = nullptr; // count + 1 entries
    std::uint32_t count = 0;
    std::size_t total = 0;

    // Index of the tensor holding flat index i (i < total): the last s with offsets[s] <= i.
    TRICKLE_HOST_DEVICE std::uint32_t tensor_of(std::size_t i) const {
        return detail::last_where(count, [&](std::uint32_t s) { return offsets[s] <= i; });
    }
};

// Visits flat indices [i0, i1) tensor by tensor, starting in segment s, which holds i0 (the
// segments after it must cover the rest): f(p, i, m) for each maximal piece of m >= 1
// consecutive indices starting at i that lie in one segment, with p pointing at index i.
template <class T, class F>
TRICKLE_HOST_DEVICE void for_each_piece_from(const segment<T>* s, std::size_t i0, std::size_t i1, F&& f) {
    while (i0 < i1) {
        const std::size_t end = s->offset + s->size < i1 ? s->offset + s->size : i1;
        f(s->data + (i0 - s->offset), i0, end - i0);
        i0 = end;
        ++s;
    }
}

// A parameter group as one array of `total` elements spread over `count` segments (the
// group's non-empty tensors, in order). Trivially copyable; the segment table lives in
// the kernels' memory space.
template <class T>
struct flat_view {
    const segment<T>* segments = nullptr;
    std::uint32_t count = 0;
    std::size_t total = 0;

    // Index of the segment holding flat index i (i < total).
    TRICKLE_HOST_DEVICE std::uint32_t segment_of(std::size_t i) const {
        return detail::last_where(count, [&](std::uint32_t s) { return segments[s].offset <= i; });
    }

    // The segment holding flat index i (i < total).
    TRICKLE_HOST_DEVICE const segment<T>* segment_holding(std::size_t i) const { return segments + segment_of(i); }

    TRICKLE_HOST_DEVICE T& operator[](std::size_t i) const {
        const segment<T>& s = segments[segment_of(i)];
        return s.data[i - s.offset];
    }

    // for_each_piece_from over [i0, i1) (i1 <= total): one segment lookup in all, then
    // contiguous loops.
    template <class F>
    TRICKLE_HOST_DEVICE void for_each_piece(std::size_t i0, std::size_t i1, F&& f) const {
        if (i0 < i1) for_each_piece_from(segments + segment_of(i0), i0, i1, f);
    }
};

static_assert(std::is_trivially_copyable_v<flat_view<float>>);
static_assert(std::is_trivially_copyable_v<layout_view>);

TRICKLE_NAMESPACE_END
