// trickle/exec/execution_space.hpp: every execution space, the concept and the space checks.
#pragma once

#include <trickle/config.hpp>
#include <trickle/core/memory_space.hpp>
#include <trickle/exec/cuda.hpp>
#include <trickle/exec/host.hpp>

#include <type_traits>

TRICKLE_NAMESPACE_BEGIN

// An execution space names the memory its kernels can reach (exec::host, exec::openmp,
// exec::cuda).
template <class E>
concept execution_space = requires {
    typename E::memory_space;
    { E::name } -> std::convertible_to<const char*>;
} && memory_space<typename E::memory_space>;

// True when kernels run by Exec may touch memory in Space.
template <class Exec, class Space>
inline constexpr bool can_access_v = std::is_same_v<typename Exec::memory_space, Space>;

TRICKLE_NAMESPACE_END
