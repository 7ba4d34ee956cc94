// trickle/kernels/chunking.hpp: the one chunking scheme: a body's run(k0, k1) over [0, count), cut into calls.
#pragma once

#include <trickle/config.hpp>
#include <trickle/core/memory_space.hpp>

#include <cstddef>
#include <type_traits>

TRICKLE_NAMESPACE_BEGIN

// A body with run(k0, k1) over indices [0, count), as for_each_index launches it: call c
// runs [c * range, (c + 1) * range) clipped to count; launch it for c < calls().
template <class Body>
struct range_body {
    Body body;
    std::size_t count = 0;
    std::size_t range = 1;

    TRICKLE_HOST_DEVICE std::size_t calls() const { return (count + range - 1) / range; }

    TRICKLE_HOST_DEVICE void operator()(std::size_t c) const {
        const std::size_t k0 = c * range;
        body.run(k0, count - k0 < range ? count : k0 + range);
    }
};

// What a chunk holds, which sets its size on the host:
//   stream    a pass over whole tensors (the DiLoCo passes): 16384 values, so per-call set-up
//             (one segment lookup) is noise and OpenMP threads still get many calls;
//   exchange  a sparse exchange's values: 4096, as each call also builds a segment index
//             and pipelines its own prefetches, and selections are often small.
// One value per call elsewhere: a generic CUDA grid-stride launch gives adjacent threads
// adjacent values. (The CUDA dispatch of kernels/stream/ and kernels/exchange/ does not chunk by calls.)
enum class chunk_use { stream, exchange };

template <class Space>
constexpr std::size_t chunk_values(chunk_use use) {
    if constexpr (std::is_same_v<Space, host_space>)
        return use == chunk_use::stream ? std::size_t{16384} : std::size_t{4096};
    else
        return 1;
}

// body over [0, count) in chunks sized for memory space Space.
template <class Space, class Body>
range_body<Body> ranges(const Body& body, std::size_t count, chunk_use use = chunk_use::stream) {
    return {body, count, chunk_values<Space>(use)};
}

TRICKLE_NAMESPACE_END
