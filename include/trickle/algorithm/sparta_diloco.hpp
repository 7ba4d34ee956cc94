// trickle/algorithm/sparta_diloco.hpp: SPARTA + DiLoCo, the two engines composed: sparse
// averaging during the inner steps and a DiLoCo outer step every H.
#pragma once

#include <trickle/algorithm/detail/erased.hpp>
#include <trickle/algorithm/detail/pick.hpp>
#include <trickle/algorithm/detail/round.hpp>
#include <trickle/algorithm/diloco.hpp>
#include <trickle/algorithm/sparta.hpp>
#include <trickle/algorithm/stats.hpp>
#include <trickle/comm/communicator.hpp>
#include <trickle/config.hpp>
#include <trickle/core/crc32c.hpp>
#include <trickle/error.hpp>

#include <algorithm>
#include <cstdint>
#include <istream>
#include <ostream>
#include <sstream>
#include <string>
#include <utility>

TRICKLE_NAMESPACE_BEGIN

// SPARTA during the inner steps and a DiLoCo outer step every H: the sparse exchange
// keeps the replicas correlated inside a round; at a step that ends a round, only the
// outer step runs (it leaves every worker with the same parameters, so a sparse
// exchange there would move bytes for nothing). stats() adds both parts' traffic.
// The replicas start from rank 0's parameters once, by the DiLoCo part's broadcast
// (diloco_options::broadcast_initial); the SPARTA part's broadcast_initial is ignored.
template <class Sampler, class Schedule, class Topology, class Outer, class T, class Space, class Comm,
          class Codec = codec::fp32, class OuterCodec = codec::fp32>
class sparta_diloco_engine {
    // The SPARTA part's options (no broadcast of its own). Checked before either part is
    // built, on every worker alike: both parts' constructors are collective.
    static sparta_options sparta_part(sparta_options o, const diloco_options& d) {
        if (o.join != d.join)
            throw invalid_argument("sparta_diloco: join must be set in both the SPARTA and the DiLoCo options, or in neither");
        o.broadcast_initial = false;
        return o;
    }
    static constexpr bool elastic = comm::elastic_communicator<Comm>;
    static_assert(detail::round_protocol_defined<Comm>,
                  "an algorithm over an elastic communicator runs the membership protocol: include "
                  "<trickle/algorithm/membership.hpp> (or <trickle/trickle.hpp>)");
    using protocol = detail::round_protocol<Comm>;
    static constexpr detail::membership_role part_role =
        elastic ? detail::membership_role::delegated : detail::membership_role::own;

public:
    using memory_space = Space;
    static constexpr const char* kind = "sparta_diloco";

    sparta_diloco_engine(const param_group<T, Space>& group, Comm& comm, sparta_options sparse, diloco_options outer_opts,
                         Sampler sampler = {}, Schedule schedule = {}, Topology topology = {}, Outer outer = {},
                         Codec codec = {}, OuterCodec outer_codec = {})
        : comm_(comm), sparse_(group, comm, sparta_part(sparse, outer_opts), std::move(sampler), std::move(schedule), topology,
                  std::move(codec), part_role),
          outer_(group, comm, outer_opts, std::move(outer), topology, std::move(outer_codec), part_role),
          min_workers_(std::max(sparse.min_workers, outer_opts.min_workers)) {
        mstats_.workers = comm.size();
        if constexpr (elastic) {
            if (outer_opts.join) {
                // Admitted at the members' next round: a step of theirs. It takes both parts'
                // states, then that step with weight 0 in an outer step (whether the step ends
                // a round is known once the state arrived).
                const float weight = outer_.options().weight;
                outer_.set_weight(0.0f);
                try {
                    if (!protocol::join(comm_, *this, mstats_, min_workers_, kind,
                                        [&] { step_parts(exec::host{}, outer_.outer_step_due()); }))
                        count_local_step();
                } catch (...) {
                    outer_.set_weight(weight);
                    throw;
                }
                outer_.set_weight(weight);
            }
        }
        combine();
    }

    template <class Exec>
    void step(const Exec& ex) {
        // Each part's trigger, asked once: an outer step, or else an exchange. Over an elastic
        // communicator one renewal per step that communicates, for both parts.
        const bool outer_due = outer_.outer_step_due();
        if (elastic && (outer_due || sparse_.exchange_due(outer_.stats().steps))) {
            if (!protocol::run(comm_, *this, mstats_, min_workers_, kind, [&] { step_parts(ex, outer_due); }))
                count_local_step(); // below quorum: trains locally
        } else {
            step_parts(ex, outer_due);
        }
        combine();
    }

    // manual_outer: the DiLoCo part's outer step now (collective), after the SPARTA part's
    // pending exchange lands; and this worker's weight in the coming outer steps.
    template <class Exec>
    void outer_step(const Exec& ex) {
        sparse_.flush(ex);
        protocol::run(comm_, *this, mstats_, min_workers_, kind, [&] { outer_.outer_step(ex); });
        combine();
    }

    // Membership (over an elastic communicator): one protocol for both parts.
    const membership_stats& membership() const { return mstats_; }

    // ---- The membership protocol's hooks (algorithm/membership.hpp): both parts' records,
    // states and hashes together.
    config_record elastic_record() const {
        config_record rec(kind);
        const config_record a = sparse_.elastic_record(), b = outer_.elastic_record();
        rec.add_fields("sparta.", a);
        rec.add_fields("diloco.", b);
        if (!a.error().empty()) rec.set_error(a.error());
        if (!b.error().empty()) rec.set_error(b.error());
        return rec;
    }
    // Two transfers in a row: DiLoCo's first (a joiner applies it first: it sets the
    // parameters to the snapshot), then SPARTA's (the donor's parameters).
    void send_state(std::ostream& os) const {
        outer_.send_state(os);
        sparse_.send_state(os);
    }
    void receive_state(std::istream& is, checkpoint_trailing trailing = checkpoint_trailing::refuse) {
        outer_.receive_state(is, checkpoint_trailing::leave);
        sparse_.receive_state(is, trailing);
    }
    std::uint32_t global_hash() const {
        const std::uint32_t h[2] = {sparse_.global_hash(), outer_.global_hash()};
        return crc32c(h, sizeof h);
    }
    // Both parts' own sections (replica_state::own_sections), SPARTA's first.
    std::vector<std::string> own_state() const {
        std::vector<std::string> out = sparse_.own_state();
        for (auto& s : outer_.own_state()) out.push_back(std::move(s));
        return out;
    }
    void round_backup() {
        sparse_.round_backup();
        outer_.round_backup();
    }
    void round_rollback() {
        sparse_.round_rollback();
        outer_.round_rollback();
    }
    void view_changed() {
        sparse_.view_changed();
        outer_.view_changed();
    }
    void set_weight(float w) { outer_.set_weight(w); }
    // The DiLoCo part's aggregation and adaptive deadline (docs/robustness.md).
    const aggregation_stats& aggregation() const { return outer_.aggregation(); }
    double deadline() const { return outer_.deadline(); }
    const deadline_stats& deadlines() const { return outer_.deadlines(); }
    void report_arrival(double t) { outer_.report_arrival(t); }

    // Applies the SPARTA part's overlapped exchange still waiting, if any (before save()).
    template <class Exec>
    void flush(const Exec& ex) {
        sparse_.flush(ex);
        combine();
    }

    const exchange_stats& stats() const { return stats_; }
    const exchange_stats& sparse_stats() const { return sparse_.stats(); }
    overlap_plan overlap() const { return overlap_plan{sparse_.overlap().sparse_steps, outer_.overlap().outer_steps}; }
    const exchange_stats& outer_stats() const { return outer_.stats(); }
    sparta_engine<Sampler, Schedule, Topology, T, Space, Comm, Codec>& sparse() { return sparse_; }
    diloco_engine<Outer, Topology, T, Space, Comm, OuterCodec>& outer() { return outer_; }

    void save(std::ostream& os) const {
        sparse_.save(os);
        outer_.save(os);
    }

    // Collective. The two parts are two checkpoints in a row: the SPARTA part is read
    // leaving what follows it, the DiLoCo part under the caller's trailing rule, and it
    // must be at the SPARTA part's step (each part's checksums cover only that part, and
    // the two count the same steps). If the DiLoCo part fails after the SPARTA part
    // loaded, the SPARTA part is put back as it was, on every worker alike (the failure
    // is collective).
    void load(std::istream& is, const std::string& source = "stream",
              checkpoint_trailing trailing = checkpoint_trailing::refuse) {
        std::ostringstream backup;
        sparse_.save(backup);
        sparse_.load(is, source, checkpoint_trailing::leave);
        try {
            outer_.load(is, source, trailing, sparse_.stats().steps);
        } catch (...) {
            std::istringstream restore(backup.str());
            sparse_.load(restore, "backup");
            throw;
        }
        combine();
    }

private:
    // One step of both parts: at a step that ends a round only the outer step (after the
    // SPARTA part's overlapped exchange, if any, lands), otherwise the sparse exchange.
    template <class Exec>
    void step_parts(const Exec& ex, bool outer_due) {
        if (outer_due) {
            sparse_.flush(ex);
            sparse_.skip_step();
        } else {
            sparse_.step(ex);
        }
        outer_.step(ex);
    }

    // A step below quorum: counted, nothing exchanged.
    void count_local_step() {
        sparse_.skip_step();
        outer_.count_step();
    }

    void combine() {
        stats_ = outer_.stats();
        stats_ += sparse_.stats();
        stats_.steps = outer_.stats().steps;
    }

    Comm& comm_;
    sparta_engine<Sampler, Schedule, Topology, T, Space, Comm, Codec> sparse_;
    diloco_engine<Outer, Topology, T, Space, Comm, OuterCodec> outer_;
    int min_workers_ = 1;
    membership_stats mstats_{};
    exchange_stats stats_{};
};

// SPARTA + DiLoCo as a concrete object.
template <class Sampler = sampler::uniform, class Schedule = schedule::constant, class Topology = topology::all_reduce,
          class Outer = outer::nesterov, class Codec = codec::fp32, class OuterCodec = codec::fp32>
class sparta_diloco : public detail::erased_handle {
    template <class T, class Space, class Comm>
    using engine = sparta_diloco_engine<Sampler, Schedule, Topology, Outer, T, Space, Comm, Codec, OuterCodec>;

public:
    sparta_diloco() = default;
    template <class T, class Space, class Comm>
    sparta_diloco(const param_group<T, Space>& group, Comm& comm, sparta_options sparse = {}, diloco_options outer_opts = {},
                  Sampler sampler = {}, Schedule schedule = {}, Topology topology = {}, Outer outer = {},
                  Codec codec = {}, OuterCodec outer_codec = {})
        : erased_handle(detail::make_erased<engine<T, Space, Comm>>(group, comm, sparse, outer_opts, std::move(sampler),
                                                                     std::move(schedule), std::move(topology),
                                                                     std::move(outer), std::move(codec),
                                                                     std::move(outer_codec))) {}
    // The sampler, schedule, topology and outer optimizer in any order, each by its type,
    // the others defaulted (the codecs go positionally):
    //   sparta_diloco<> b{params, comm, {.fraction = 0.005}, {.interval = 100}, outer::nesterov{.lr = 0.5}};
    template <class T, class Space, class Comm, class First, class... Rest>
        requires detail::by_type_policies<detail::policy_slots<Sampler, Schedule, Topology, Outer>, First, Rest...>
    sparta_diloco(const param_group<T, Space>& group, Comm& comm, sparta_options sparse, diloco_options outer_opts,
                  First&& first, Rest&&... rest)
        : sparta_diloco(group, comm, sparse, outer_opts,
                        detail::pick<Sampler>(std::forward<First>(first), std::forward<Rest>(rest)...),
                        detail::pick<Schedule>(std::forward<First>(first), std::forward<Rest>(rest)...),
                        detail::pick<Topology>(std::forward<First>(first), std::forward<Rest>(rest)...),
                        detail::pick<Outer>(std::forward<First>(first), std::forward<Rest>(rest)...)) {}

    // Each part's own account (stats() is their sum); `initial` is on the DiLoCo part.
    const exchange_stats& sparse_stats() const { return get("sparse_stats").sparse_stats(); }
    const exchange_stats& outer_stats() const { return get("outer_stats").outer_stats(); }
};

TRICKLE_NAMESPACE_END
