// trickle/algorithm/stats.hpp: what an algorithm exchanged, counted by its communicator.
#pragma once

#include <trickle/codec/codec.hpp>
#include <trickle/comm/communicator.hpp>
#include <trickle/config.hpp>

#include <cstdint>

TRICKLE_NAMESPACE_BEGIN

// One worker's account of an algorithm's communication. Bytes are the communicator's
// own counts (its traffic() before and after each exchange), so they include every byte
// the chosen topology really moves; the configuration check at construction is not
// included. dense_bytes is what the same worker would have sent with a dense fp32
// all-reduce of all parameters at every step, under the same cost model. The initial
// broadcast (every worker starts from rank 0's parameters) is its own line, `initial`,
// paid once at construction: it is not part of `total`, so reduction() compares the
// recurring traffic of training with dense synchronization.
struct exchange_stats {
    std::uint64_t steps = 0;     // step() calls
    std::uint64_t exchanges = 0; // steps that communicated
    std::uint64_t values = 0;    // values this worker put on the wire, summed over exchanges
    traffic_counters total{};    // bytes sent / received during exchanges
    traffic_counters last{};     // the most recent exchange's
    std::uint64_t last_values = 0;
    std::uint64_t dense_bytes = 0; // dense fp32 all-reduce every step, same cost model
    traffic_counters initial{};    // the initial broadcast at construction (zero when there was none)
    // total.bytes_sent by part: codes (fp32 values too), scales (per-block scales and zero
    // points, and DiLoCo's sum of weights), indices (a sparsifier's positions) and padding;
    // the parts always sum to total.bytes_sent.
    codec::wire_parts sent{};

    // How many times fewer bytes were sent than dense synchronization would have sent
    // (0 before anything was sent).
    double reduction() const {
        return total.bytes_sent == 0 ? 0.0 : static_cast<double>(dense_bytes) / static_cast<double>(total.bytes_sent);
    }

    exchange_stats& operator+=(const exchange_stats& o) {
        exchanges += o.exchanges;
        values += o.values;
        total += o.total;
        initial += o.initial;
        sent += o.sent;
        if (o.last.calls != 0) {
            last = o.last;
            last_values = o.last_values;
        }
        return *this;
    }
};

TRICKLE_NAMESPACE_END
