// benchmarks/common.hpp: what both suites share beyond the case list: samplers by case, selections per step, the layout, context strings.
#pragma once

#include "cases.hpp"

#include <trickle/core/param_group.hpp>
#include <trickle/kernels/flat_view.hpp>
#include <trickle/kernels/sparse_exchange.hpp>
#include <trickle/sampler/block.hpp>
#include <trickle/sampler/layerwise.hpp>
#include <trickle/sampler/permutation.hpp>
#include <trickle/sampler/uniform.hpp>

#include <benchmark/benchmark.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace trickle_bench {

inline constexpr std::uint64_t seed = 0x5eed;

// Calls fn(sampler) with the policy object a case names.
template <class Fn>
decltype(auto) with_sampler(const sampler_case& sc, Fn&& fn) {
    namespace s = trickle::sampler;
    switch (sc.id) {
    case sampler_id::uniform: return fn(s::uniform{});
    case sampler_id::permutation: return fn(s::permutation{});
    case sampler_id::block: return fn(s::block{sc.block_size});
    case sampler_id::layerwise: return fn(s::layerwise{s::layerwise::mode::per_tensor});
    case sampler_id::rotating: break;
    }
    return fn(s::layerwise{s::layerwise::mode::rotating});
}

// The selections of exchanges 0 .. steps-1, from one sampler object, in order (so
// permutation and rotating walk on as they do in training). Each timed iteration takes
// the next one: consecutive iterations touch different memory, as consecutive training
// steps do, instead of finding the previous iteration's lines still in the cache.
template <class Sampler>
auto make_selections(Sampler s, const trickle::layout_view& layout, const trickle::layout_view& host_layout,
                     double fraction, std::size_t steps) {
    std::vector<decltype(s.select(std::declval<const trickle::sampler_context&>()))> out;
    out.reserve(steps);
    for (std::size_t t = 0; t < steps; ++t)
        out.push_back(s.select(trickle::sampler_context{seed, t, t, fraction, layout, host_layout}));
    return out;
}

// How many distinct selections a case cycles through: enough that one cycle touches far
// more memory than any cache, few enough that the index arrays of the baselines stay
// below 256 MB.
inline std::size_t step_cycle(std::size_t count) {
    const std::size_t by_memory = (std::size_t{256} << 20) / (count * 8 + 1);
    return by_memory < 8 ? 8 : by_memory > 64 ? 64 : by_memory;
}

// Distinct `line`-byte units of parameter memory the positions touch (the tensors are
// packed from a line-aligned base, so flat index i lives at byte i * elem_bytes).
inline std::size_t distinct_units(const std::vector<std::uint64_t>& positions, std::size_t n, std::size_t elem_bytes,
                                  std::size_t line) {
    std::vector<std::uint64_t> bits((n * elem_bytes / line + 64) / 64 + 1, 0);
    std::size_t distinct = 0;
    for (std::uint64_t p : positions) {
        if (p >= n) continue;
        const std::uint64_t u = p * elem_bytes / line;
        const std::uint64_t bit = std::uint64_t{1} << (u % 64);
        distinct += (bits[u / 64] & bit) == 0;
        bits[u / 64] |= bit;
    }
    return distinct;
}

// The positions of a selection, on the host (selections whose tables live in device
// memory are evaluated by the caller from a host twin).
template <class Sel>
std::vector<std::uint64_t> positions_of(const Sel& sel) {
    std::vector<std::uint64_t> out(sel.count());
    for (std::size_t k = 0; k < out.size(); ++k) out[k] = sel(k);
    return out;
}

// The layout of a model as a param_group over one packed allocation.
template <class T, class Space>
trickle::param_group<T, Space> packed_group(const model_shape& m, T* base) {
    trickle::param_group<T, Space> g;
    std::size_t at = 0;
    for (const auto& t : model_tensors(m)) {
        g.add(t.name, base + at, t.size);
        at += t.size;
    }
    return g;
}

// Bytes a timed iteration moves and carries as payload (see byte_model in cases.hpp).
struct traffic {
    double moved = 0;
    double useful = 0;
};

// Records bytes processed and the two counters every case reports. b_copy is the copy
// bandwidth measured at start-up in bytes per second.
inline void report(benchmark::State& state, const traffic& total, double b_copy) {
    state.SetBytesProcessed(static_cast<std::int64_t>(total.moved));
    state.counters["useful_bytes_per_second"] = benchmark::Counter(total.useful, benchmark::Counter::kIsRate);
    state.counters["pct_of_copy"] =
        benchmark::Counter(b_copy > 0 ? 100.0 * total.moved / b_copy : 0.0, benchmark::Counter::kIsRate);
}

inline std::string compiler_string() {
#if defined(__clang__)
    return "clang " + std::to_string(__clang_major__) + "." + std::to_string(__clang_minor__);
#elif defined(__GNUC__)
    return "gcc " + std::to_string(__GNUC__) + "." + std::to_string(__GNUC_MINOR__) + "." +
           std::to_string(__GNUC_PATCHLEVEL__);
#else
    return "unknown";
#endif
}

} // namespace trickle_bench
