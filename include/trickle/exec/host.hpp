// trickle/exec/host.hpp: host execution spaces and their for_each_index.
#pragma once

#include <trickle/config.hpp>
#include <trickle/core/memory_space.hpp>

#include <cstddef>
#include <cstdint>
#include <type_traits>

TRICKLE_NAMESPACE_BEGIN

namespace exec {

// Runs kernel bodies as a plain loop on the calling thread.
struct host {
    using memory_space = host_space;
    static constexpr const char* name = "host";
};

#if TRICKLE_HAS_OPENMP
// Runs kernel bodies as an OpenMP parallel loop; num_threads = 0 uses OpenMP's default.
struct openmp {
    using memory_space = host_space;
    static constexpr const char* name = "openmp";
    int num_threads = 0;
};
#endif

} // namespace exec

// Calls body(i) for every i in [0, n) on the calling thread, in order.
template <class Body>
    requires std::is_invocable_v<const Body&, std::size_t>
void for_each_index(const exec::host&, std::size_t n, const Body& body) {
    for (std::size_t i = 0; i < n; ++i) body(i);
}

#if TRICKLE_HAS_OPENMP
// Calls body(i) for every i in [0, n) across OpenMP threads; bodies must not depend on order.
template <class Body>
    requires std::is_invocable_v<const Body&, std::size_t>
void for_each_index(const exec::openmp& ex, std::size_t n, const Body& body) {
    const auto count = static_cast<std::int64_t>(n);
    if (ex.num_threads > 0) {
#pragma omp parallel for schedule(static) num_threads(ex.num_threads)
        for (std::int64_t i = 0; i < count; ++i) body(static_cast<std::size_t>(i));
    } else {
#pragma omp parallel for schedule(static)
        for (std::int64_t i = 0; i < count; ++i) body(static_cast<std::size_t>(i));
    }
}
#endif

TRICKLE_NAMESPACE_END
