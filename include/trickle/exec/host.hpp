// trickle/exec/host.hpp: host execution spaces and their for_each_index.
#pragma once

#include <trickle/config.hpp>
#include <trickle/core/memory_space.hpp>

#include <cstddef>
#include <cstdint>
#include <type_traits>

#if TRICKLE_HAS_OPENMP
#include <omp.h>
#endif

TRICKLE_NAMESPACE_BEGIN

namespace exec {

// Runs kernel bodies as a plain loop on the calling thread.
struct host {
    using memory_space = host_space;
    static constexpr const char* name = "host";
};

// Runs kernel bodies as an OpenMP parallel loop; num_threads = 0 uses OpenMP's default.
// Defined in every build so that types holding it look the same in every translation
// unit; where OpenMP is not enabled (TRICKLE_HAS_OPENMP is 0) the loop runs serially.
struct openmp {
    using memory_space = host_space;
    static constexpr const char* name = "openmp";
    int num_threads = 0;
};

} // namespace exec

// Calls body(i) for every i in [0, n) on the calling thread, in order.
template <class Body>
    requires std::is_invocable_v<const Body&, std::size_t>
void for_each_index(const exec::host&, std::size_t n, const Body& body) {
    for (std::size_t i = 0; i < n; ++i) body(i);
}

// Calls body(i) for every i in [0, n) across OpenMP threads; bodies must not depend on order.
template <class Body>
    requires std::is_invocable_v<const Body&, std::size_t>
void for_each_index(const exec::openmp& ex, std::size_t n, const Body& body) {
    const auto count = static_cast<std::int64_t>(n);
#if TRICKLE_HAS_OPENMP
    const int threads = ex.num_threads > 0 ? ex.num_threads : omp_get_max_threads();
#pragma omp parallel for schedule(static) num_threads(threads)
    for (std::int64_t i = 0; i < count; ++i) body(static_cast<std::size_t>(i));
#else
    (void)ex;
    for (std::int64_t i = 0; i < count; ++i) body(static_cast<std::size_t>(i));
#endif
}

TRICKLE_NAMESPACE_END
