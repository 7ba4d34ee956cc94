// trickle/algorithm/stats.hpp: what an algorithm exchanged, counted by its communicator.
#pragma once

#include <trickle/codec/codec.hpp>
#include <trickle/comm/communicator.hpp>
#include <trickle/config.hpp>

#include <cstdint>
#include <string>
#include <vector>

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
    // points, DiLoCo's sum of weights and the reports its outer rounds begin with), indices
    // (a sparsifier's positions) and padding;
    // the parts always sum to total.bytes_sent.
    codec::wire_parts sent{};

    // How many times fewer bytes were sent than dense synchronization would have sent
    // (0 before anything was sent).
    double reduction() const {
        return total.bytes_sent == 0 ? 0.0 : static_cast<double>(dense_bytes) / static_cast<double>(total.bytes_sent);
    }

    // Counts one completed exchange that put `count` values on the wire: its traffic and
    // its bytes by part.
    void add_exchange(const traffic_counters& traffic, const codec::wire_parts& parts, std::uint64_t count) {
        last = traffic;
        sent += parts;
        total += traffic;
        last_values = count;
        values += count;
        ++exchanges;
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

// How an algorithm's exchanges travel against the worker's compute, as its route decided
// from the communicator, the codec and the topology (exchange_route::overlaps): the inner
// steps an exchange of the SPARTA part, and of the outer part (streaming DiLoCo's
// fragments), runs behind; 0 when every such exchange blocks the step that starts it
// (its result may still land late, with the same bits). What a model of the network
// (the simulator's) should hide.
struct overlap_plan {
    std::uint64_t sparse_steps = 0;
    std::uint64_t outer_steps = 0;
};

// What an algorithm saw of its membership (stats on every worker; over a fixed-world
// communicator only `workers` and `epoch` 0).
struct membership_stats {
    std::uint64_t epoch = 0;               // the epoch of the current view
    int workers = 0;                       // its size
    bool quorum = true;                    // whether the last round had min_workers (false: it was skipped)
    std::uint64_t changes = 0;             // renewals that changed the view
    std::uint64_t joined = 0;              // workers admitted (refused ones included)
    std::uint64_t left = 0;                // workers dropped (failed, left, silent, or refused)
    std::uint64_t joins_refused = 0;       // joiners refused at the welcome
    std::uint64_t rounds_retried = 0;      // rounds redone because a peer failed during them
    std::uint64_t rounds_below_quorum = 0; // rounds skipped: training went on locally
    std::uint64_t state_bytes = 0;         // state transferred to joiners (sent by the donor, received by a joiner)
    double wait_seconds = 0.0;             // time spent in renewals and in rounds that failed
    double transfer_seconds = 0.0;         // time spent in welcomes: the state's transfer, its check, the hash vote
};

// How DiLoCo's outer steps combined the workers' outer gradients (diloco_options::aggregate;
// docs/robustness.md); identical on every worker. The per-worker entries describe the last
// round, one per worker of its view, in rank order.
struct aggregation_stats {
    std::string rule = "mean";             // the rule's name (aggregate::rule::name)
    std::uint64_t rounds = 0;              // outer rounds aggregated (host parameters)
    std::vector<float> weights;            // each worker's weight in the last round (0: dropped or excluded)
    std::vector<double> norm;              // ||delta_i||, its unweighted outer gradient (inf or NaN: non-finite)
    std::vector<double> distance;          // ||delta_i - aggregate||: robust rules, workers taking part (NaN otherwise)
    std::vector<double> trimmed_fraction;  // trimmed:K: the fraction of coordinates where worker i was dropped
    std::vector<int> clipped;              // the last round's workers clipped (clip) or dropped in most coordinates (trimmed)
    std::vector<int> excluded;             // the last round's workers excluded: a non-finite contribution
    std::uint64_t clipped_total = 0;       // clipped entries over all rounds
    std::uint64_t excluded_total = 0;      // exclusions over all rounds
    std::uint64_t skipped = 0;             // rounds skipped because every contribution was excluded
};

// The deadlines of diloco_options::deadline so far (identical on every worker;
// stage/deadline.hpp).
struct deadline_stats {
    double current = 0.0;              // the deadline of the coming round
    std::uint64_t rounds = 0;          // rounds recorded
    std::vector<double> history;       // the deadline each recorded round closed at, oldest first
    std::vector<double> last_arrivals; // the last round's arrival per worker (rank order)
    std::uint64_t late = 0;            // arrivals after their round's deadline, over all rounds
};

TRICKLE_NAMESPACE_END
