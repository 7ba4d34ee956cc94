// trickle/kernels/pass.hpp: one pass of a body over a flat parameter group, run the way
// the execution space moves bytes best.
//
// The engines write each pass once, as a body of kernels/diloco.hpp (what each element
// computes), and call stream_pass with the step's execution space: a host space runs the
// body's range form in chunks (kernels/chunking.hpp), exec::cuda runs its vector agent
// through the tiled dispatch of kernels/device_stream.hpp (defined for nvcc). `first` is
// where the pass starts in the group; the body carries the same offset.
#pragma once

#include <trickle/config.hpp>
#include <trickle/exec/execution_space.hpp>
#include <trickle/kernels/chunking.hpp>
#include <trickle/kernels/device_stream.hpp>
#include <trickle/kernels/flat_view.hpp>

#include <cstddef>
#include <cstdint>

TRICKLE_NAMESPACE_BEGIN

namespace detail {

template <class Exec, class T, class Body>
void stream_pass(const Exec& ex, const flat_view<T>&, const std::uint32_t*, std::size_t, std::size_t count,
                 const Body& body) {
    const auto r = ranges<typename Exec::memory_space>(body, count);
    for_each_index(ex, r.calls(), r);
}

} // namespace detail

TRICKLE_NAMESPACE_END
