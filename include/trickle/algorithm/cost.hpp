// trickle/algorithm/cost.hpp: the bytes one worker sends, by what the algorithms do: the cost model.
//
// What the engines count (exchange_stats) equals these formulas over an honest
// communicator (comm::local, comm::process_group, MPI, NCCL count the bytes each rank puts
// on the wire); tests, examples and the simulator's reports compare against them instead
// of writing the formulas out again. Collectives follow comm/communicator.hpp's
// accounting (all_reduce_bytes: a ring's reduce-scatter and all-gather, 2 (N - 1) / N of
// the values for a large buffer).
#pragma once

#include <trickle/algorithm/stage/aggregate.hpp>
#include <trickle/comm/communicator.hpp>
#include <trickle/config.hpp>
#include <trickle/core/fraction.hpp>

#include <cstddef>
#include <cstdint>

TRICKLE_NAMESPACE_BEGIN

namespace cost {

// Worker `me` of N in the all-reduce of n values of value_bytes each.
constexpr std::uint64_t all_reduce(std::size_t n, std::size_t value_bytes, int N, int me) {
    return trickle::detail::all_reduce_bytes(n, value_bytes, N, me);
}

// The reports every outer round begins with (who takes part, with what weight and norm:
// stage/aggregate.hpp), an all-gather of one 16-byte report per worker.
constexpr std::uint64_t outer_reports(int N) {
    return N <= 1 ? 0 : static_cast<std::uint64_t>(N - 1) * sizeof(trickle::detail::worker_report);
}

// One blocking DiLoCo outer round of n fp32 parameters through the all-reduce topology:
// the reports, then one all-reduce of every delta and the weight (n + 1 values).
constexpr std::uint64_t diloco_round(std::size_t n, int N, int me) {
    return outer_reports(N) + all_reduce(n + 1, sizeof(float), N, me);
}

// One SPARTA exchange of fraction p of n fp32 parameters through the all-reduce topology:
// the sampled values' all-reduce (round(p n) of them, at least 1).
inline std::uint64_t sparta_exchange(double p, std::size_t n, int N, int me) {
    return all_reduce(trickle::detail::fraction_count(p, n), sizeof(float), N, me);
}

} // namespace cost

TRICKLE_NAMESPACE_END
