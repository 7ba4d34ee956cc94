// trickle/algorithm/stage/fragments.hpp: Streaming DiLoCo's fragments, a stage of the
// DiLoCo engine (docs/streaming.md).
//
// The group is split at tensor boundaries into F fragments. Fragment f holds elements
// [first, first + count) and takes its outer step after inner step t when
// (t + 1) = phase + k H for some k >= 0 (phase = f H / F): the fragments' outer steps are
// spread evenly over the round. Its outer step computes the fragment's weighted deltas into
// its own buffer and exchanges them; the average is applied overlap_steps inner steps later
// (at once for 0): the outer rule, with the fragment's own step count for the optimizer's
// bias corrections, updates the fragment's snapshot, and the parameters become the new
// snapshot, or with mix = alpha, alpha (the parameters as trained meanwhile) + (1 - alpha)
// (the new snapshot), or with carry_local the new snapshot plus the worker's progress since
// the exchange began (the parameters were copied then), as SPARTA's overlap is corrected:
// no inner step is lost, however late the average lands. How an exchange travels is the
// route's choice (stage/route.hpp: start and land): with overlap_steps > 0, over a
// communicator that runs work on a progress thread (comm::async), the all_reduce
// topology's plain or encoded exchange runs while the worker trains; any other runs at
// once and its result waits, which gives the same bits. Rounds (the engine's attempts)
// count fragment outer steps, so drop draws and rounding words stay distinct.
//
// The stage owns the fragments, their buffers' places, the exchanges in flight and the
// merge's scratch. The engine lends it, per call, a narrow lender: the round's
// participants, the pass of a range (stage/outer_pass.hpp, the same producer and consumer
// as a whole-group outer step), pruning, the route, the rule and the accounting.
#pragma once

#include <trickle/algorithm/detail/common.hpp>
#include <trickle/algorithm/stage/outer_pass.hpp>
#include <trickle/algorithm/stage/replica_state.hpp>
#include <trickle/algorithm/stage/route.hpp>
#include <trickle/algorithm/stage/trigger.hpp>
#include <trickle/algorithm/stats.hpp>
#include <trickle/comm/request.hpp>
#include <trickle/config.hpp>
#include <trickle/core/config_record.hpp>
#include <trickle/core/param_group.hpp>
#include <trickle/exec/buffer.hpp>
#include <trickle/kernels/flat_view.hpp>
#include <trickle/kernels/prune/body.hpp>
#include <trickle/kernels/stream/body.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

TRICKLE_NAMESPACE_BEGIN

namespace detail {

// The streaming fields of diloco_options, as the stage reads them.
struct fragment_config {
    std::uint64_t fragments = 1;
    std::vector<std::uint32_t> fragment_tensors{};
    std::uint64_t overlap_steps = 0;
    double mix = 0.0;
    bool carry_local = false;

    // Whether these options stream at all (otherwise DiLoCo is whole-group, bit for bit).
    bool streams() const {
        return fragments > 1 || fragment_tensors.size() > 1 || overlap_steps > 0 || mix > 0.0 || carry_local;
    }
};

// T and Space: the group's element type and memory space.
template <class T, class Space>
class fragment_stream {
public:
    fragment_stream() = default;

    bool active() const { return !frags_.empty(); }

    // Streaming's fields and their errors, for the engine's record.
    static void describe(const fragment_config& o, std::uint64_t interval, bool manual, bool prunes,
                         const param_group<T, Space>& group, config_record& rec) {
        std::string lists;
        for (std::uint32_t k : o.fragment_tensors) lists += concat(lists.empty() ? "" : ",", k);
        rec.add("fragments", o.fragments).add("fragment_tensors", lists).add("overlap_steps", o.overlap_steps).add("mix", o.mix);
        if (o.carry_local) rec.add("carry_local", true); // (absent when off: records of earlier versions match)
        std::size_t tensors = 0;
        for (const auto& e : group.entries()) tensors += e.view.size() != 0 ? 1 : 0;
        if (o.fragments < 1) rec.set_error("diloco: fragments must be >= 1, got 0");
        if (!o.fragment_tensors.empty()) {
            std::uint64_t sum = 0;
            bool zero = false;
            for (std::uint32_t k : o.fragment_tensors) {
                sum += k;
                zero = zero || k == 0;
            }
            if (o.fragments != 1 && o.fragments != o.fragment_tensors.size())
                rec.set_error(concat("diloco: fragments is ", o.fragments, " but fragment_tensors lists ",
                                     o.fragment_tensors.size(), " fragments"));
            if (zero) rec.set_error("diloco: every entry of fragment_tensors must be >= 1");
            if (sum != tensors)
                rec.set_error(concat("diloco: fragment_tensors sums to ", sum, " tensors, the group has ", tensors));
        } else if (o.fragments > tensors && o.fragments > 1) {
            rec.set_error(concat("diloco: ", o.fragments, " fragments but the group has only ", tensors,
                                 " tensors (fragments split at tensor boundaries)"));
        }
        if (interval >= 1 && o.overlap_steps >= interval)
            rec.set_error(concat("diloco: overlap_steps (tau) must be < interval (H = ", interval, "), got ",
                                 o.overlap_steps));
        if (!(o.mix >= 0.0 && o.mix <= 1.0)) rec.set_error(concat("diloco: mix must be in [0, 1], got ", o.mix));
        if (o.carry_local && o.overlap_steps == 0)
            rec.set_error("diloco: carry_local needs overlap_steps > 0 (an average that lands at once has no local "
                          "progress to carry)");
        if (o.carry_local && o.mix > 0.0)
            rec.set_error(concat("diloco: carry_local and mix are two ways to land a late average; choose one (mix = ",
                                 o.mix, ")"));
        rec.add("manual_outer", manual);
        if (o.streams() && manual)
            rec.set_error("diloco: manual_outer does not combine with streaming (fragments, overlap_steps, mix), whose "
                          "schedule follows the inner steps");
        if constexpr (std::is_same_v<Space, cuda_space>)
            if (o.streams() && prunes)
                rec.set_error("diloco: streaming (fragments > 1, overlap_steps > 0 or mix > 0) with pruning runs on host "
                              "parameters in this version");
    }

    // Values of the engine's workspace slot 0 the stage needs: every fragment's deltas and
    // weight side by side (n + F).
    static std::size_t workspace_values(const fragment_config& o, const layout_view& L, std::size_t n) {
        return n + ends(o, L, n).size();
    }

    // Splits the group (the listed tensor counts, or F fragments of about n / F elements
    // each: a fragment ends at the first tensor boundary at or past its share, leaving at
    // least one tensor for each later fragment) and places each fragment's buffer in
    // `slot0` (workspace_values() floats); mix > 0: sizes the merge's scratch; carry_local:
    // a copy of the parameters, each fragment's place taken from its start to its landing.
    void build(const fragment_config& o, const round_trigger& trigger, const layout_view& L, std::size_t n,
               float* slot0, const exec::cuda& ex) {
        config_ = o;
        ex_ = ex;
        trigger_ = trigger;
        const std::vector<std::uint32_t> e = ends(o, L, n);
        frags_.clear();
        std::uint32_t s0 = 0;
        std::size_t slot = 0, largest = 0;
        const std::uint64_t F = e.size(), H = trigger.interval();
        for (std::uint64_t f = 0; f < F; ++f) {
            fragment g;
            g.first = L.offsets[s0];
            g.count = L.offsets[e[f]] - g.first;
            g.buf = slot0 + slot;
            slot += g.count + 1;
            g.phase = f * H / F;
            for (std::uint32_t s = s0; s <= e[f]; ++s) g.offsets.push_back(L.offsets[s] - g.first);
            s0 = e[f];
            largest = std::max(largest, g.count);
            frags_.push_back(std::move(g));
        }
        if (o.mix > 0.0) mix_local_ = make_buffer(largest, ex);
        if (o.carry_local) start_ = make_buffer(n, ex);
    }

    // An exchange still running on the communicator's progress thread writes into the
    // engine's buffers: wait for it before they go.
    ~fragment_stream() {
        for (fragment& f : frags_) f.flight.request = comm::request{};
    }
    fragment_stream(const fragment_stream&) = delete;
    fragment_stream& operator=(const fragment_stream&) = delete;
    fragment_stream(fragment_stream&&) = delete;
    fragment_stream& operator=(fragment_stream&&) = delete;

    // True when the step after inner step t begins some fragment's outer step.
    bool due(std::uint64_t t) const {
        for (const fragment& f : frags_)
            if (trigger_.due(t, f.phase)) return true;
        return false;
    }

    // After inner step t: applies the fragments whose average is due, then starts those
    // whose outer step is.
    template <class Lender, class Exec>
    void step(const Lender& e, const Exec& ex, std::uint64_t t) {
        for (fragment& f : frags_)
            if (f.pending && f.due == t) apply(e, ex, f);
        for (fragment& f : frags_)
            if (trigger_.due(t, f.phase)) start(e, ex, f, t);
    }

    std::vector<std::pair<std::size_t, std::size_t>> ranges() const {
        std::vector<std::pair<std::size_t, std::size_t>> out;
        for (const fragment& f : frags_) out.emplace_back(f.first, f.count);
        return out;
    }
    std::size_t in_flight() const {
        std::size_t k = 0;
        for (const fragment& f : frags_) k += f.pending ? 1 : 0;
        return k;
    }

    // The checkpoint's sections: per fragment its counters ("fragments"), and the exchanged,
    // not yet applied deltas of the fragments in flight, with carry_local their parameters
    // when their exchange began ("in_flight"); an exchange still
    // running is waited for first (its result is part of the state).
    template <class Lender>
    void add_sections(replica_state& rs, const Lender& e) {
        rs.add("fragments", saved, frags_.size() * fields * sizeof(std::uint64_t),
               [this, e] { return bytes_of(record(e).data(), frags_.size() * fields); },
               [this](const std::string& b) { restore_record(b); },
               [this](const staged_sections& st) { check_record(st); });
        rs.add(replica_state::section{
            "in_flight", saved, [this, e] { return in_flight_values(e); },
            [this](const std::string& b) { restore_values(b); },
            [this](const staged_sections& st) {
                return static_cast<std::uint64_t>(in_flight_size(st.values<std::uint64_t>("fragments")) * sizeof(float));
            }});
    }

private:
    static constexpr std::size_t fields = 10;

    struct fragment {
        std::size_t first = 0;
        std::size_t count = 0;
        float* buf = nullptr;         // its deltas and weight: count + 1 floats of the engine's slot 0
        std::uint64_t phase = 0;
        std::uint64_t outer_t = 0;    // outer steps applied to this fragment
        bool pending = false;         // exchanged (or exchanging), not applied
        std::uint64_t due = 0;        // the inner step after which it is applied
        // Its exchange (the route's flight); landing it completes what is already the state
        // (its sums land in the fragment's buffer), so the waits of save() are const.
        mutable route_flight flight{};
        std::vector<std::size_t> offsets; // its tensors' offsets, relative to first (pruning)
    };

    static std::vector<std::uint32_t> ends(const fragment_config& o, const layout_view& L, std::size_t n) {
        std::vector<std::uint32_t> out; // one past each fragment's last segment
        if (!o.fragment_tensors.empty()) {
            std::uint32_t s = 0;
            for (std::uint32_t k : o.fragment_tensors) out.push_back(s += k);
            return out;
        }
        const auto F = static_cast<std::uint32_t>(o.fragments);
        std::uint32_t s = 0;
        for (std::uint32_t f = 0; f + 1 < F; ++f) {
            const std::size_t share = (n * (f + 1) + F - 1) / F;
            ++s; // at least one tensor
            while (s < L.count - (F - 1 - f) && L.offsets[s] < share) ++s;
            out.push_back(s);
        }
        out.push_back(L.count);
        return out;
    }

    static auto make_buffer(std::size_t n, const exec::cuda& ex) {
        if constexpr (std::is_same_v<Space, cuda_space>)
            return buffer<float, Space>(n, ex);
        else
            return (void)ex, buffer<float, Space>(n);
    }
    // Checkpoint copies: on the engine's stream for cuda_space.
    void to_host(float* dst, const float* src, std::size_t n) const {
        if constexpr (std::is_same_v<Space, cuda_space>)
            copy_elements<host_space, Space>(dst, src, n, ex_);
        else
            copy_elements<host_space, Space>(dst, src, n);
    }
    void from_host(float* dst, const float* src, std::size_t n) const {
        if constexpr (std::is_same_v<Space, cuda_space>)
            copy_elements<Space, host_space>(dst, src, n, ex_);
        else
            copy_elements<Space, host_space>(dst, src, n);
    }

    template <class Lender, class Exec>
    void start(const Lender& e, const Exec& ex, fragment& f, std::uint64_t t) {
        float w = 0.0f;
        if (!e.participants(w)) return;
        const outer_pass<T> pass = e.pass(f.buf, f.first, f.count, w);
        pass.run(ex, pass.delta(w));
        if (config_.carry_local) pass.run(ex, local_copy_body<T>{pass.params, start_.data() + f.first, f.first});
        if (e.prunes()) {
            const layout_view L{f.offsets.data(), static_cast<std::uint32_t>(f.offsets.size() - 1), f.count};
            e.prune(f.buf, L);
        }
        f.pending = true;
        f.due = t + config_.overlap_steps;
        f.flight = e.route().start(ex, e.comm(), f.buf, f.count, e.ws(), e.round(), f.first, true,
                                   config_.overlap_steps > 0);
        if (config_.overlap_steps == 0) apply(e, ex, f);
    }

    // Waits for a fragment's exchange if it is running (its bytes are counted then).
    template <class Lender>
    void finish(const Lender& e, const fragment& f) const {
        e.route().land(e.comm(), f.flight);
    }

    template <class Lender, class Exec>
    void apply(const Lender& e, const Exec& ex, fragment& f) {
        finish(e, f);
        const outer_pass<T> pass = e.pass(f.buf, f.first, f.count, 0.0f);
        const auto& view = pass.params;
        if (config_.mix > 0.0) pass.run(ex, local_copy_body<T>{view, mix_local_.data(), f.first});
        if (config_.carry_local) pass.run(ex, progress_body<T>{view, start_.data() + f.first, f.first});
        pass.run_update(ex, e.rule(++f.outer_t));
        if (config_.mix > 0.0)
            pass.run(ex, mix_body<T>{view, pass.snapshot, mix_local_.data(), static_cast<float>(config_.mix), f.first});
        if (config_.carry_local) pass.run(ex, carry_body<T>{view, pass.snapshot, start_.data() + f.first, f.first});
        f.pending = false;
        e.count(f.flight.traffic, f.flight.parts, f.count);
    }

    template <class Lender>
    std::vector<std::uint64_t> record(const Lender& e) const {
        std::vector<std::uint64_t> out;
        for (const fragment& f : frags_) {
            finish(e, f);
            const auto& tr = f.flight.traffic;
            const auto& p = f.flight.parts;
            const std::uint64_t v[fields] = {f.outer_t, f.pending ? 1u : 0u, f.due, tr.bytes_sent, tr.bytes_received,
                                             tr.calls, p.codes, p.scales, p.indices, p.padding};
            out.insert(out.end(), v, v + fields);
        }
        return out;
    }
    void check_record(const staged_sections& st) const {
        const std::vector<std::uint64_t> rec = st.values<std::uint64_t>("fragments");
        const std::uint64_t steps = st.value<exchange_stats>("stats").steps;
        for (std::size_t f = 0; f < frags_.size(); ++f) {
            const std::uint64_t* v = rec.data() + f * fields;
            if (v[1] > 1 || (v[1] == 1 && (v[2] < steps || v[2] >= steps + config_.overlap_steps)))
                throw invalid_argument(concat("checkpoint: fragment ", f, "'s in-flight state does not fit step ", steps));
        }
    }
    // A fragment in flight's values in the checkpoint: its exchanged deltas and weight, and
    // with carry_local its parameters when the exchange began.
    std::size_t in_flight_values_of(const fragment& f) const {
        return f.count + 1 + (config_.carry_local ? f.count : 0);
    }
    std::size_t in_flight_size(const std::vector<std::uint64_t>& rec) const {
        std::size_t k = 0;
        for (std::size_t f = 0; f < frags_.size(); ++f)
            if (rec[f * fields + 1] != 0) k += in_flight_values_of(frags_[f]);
        return k;
    }
    template <class Lender>
    std::string in_flight_values(const Lender& e) const {
        std::vector<float> out;
        for (const fragment& f : frags_) {
            finish(e, f);
            if (!f.pending) continue;
            const std::size_t at = out.size();
            out.resize(at + in_flight_values_of(f));
            to_host(out.data() + at, f.buf, f.count + 1);
            if (config_.carry_local) to_host(out.data() + at + f.count + 1, start_.data() + f.first, f.count);
        }
        return bytes_of(out.data(), out.size());
    }
    void restore_record(const std::string& b) {
        std::vector<std::uint64_t> rec(frags_.size() * fields);
        bytes_to(b, rec.data(), rec.size());
        for (std::size_t k = 0; k < frags_.size(); ++k) {
            fragment& f = frags_[k];
            if (f.flight.running) f.flight.request = comm::request{}; // waits; its result is replaced
            f.flight = route_flight{};
            const std::uint64_t* v = rec.data() + k * fields;
            f.outer_t = v[0];
            f.pending = v[1] != 0;
            f.due = v[2];
            f.flight.traffic = traffic_counters{v[3], v[4], v[5]};
            f.flight.parts = codec::wire_parts{v[6], v[7], v[8], v[9]};
        }
    }
    // After restore_record (the sections apply in order).
    void restore_values(const std::string& b) {
        std::vector<float> values(b.size() / sizeof(float));
        bytes_to(b, values.data(), values.size());
        std::size_t at = 0;
        for (fragment& f : frags_) {
            if (!f.pending) continue;
            from_host(f.buf, values.data() + at, f.count + 1);
            if (config_.carry_local) from_host(start_.data() + f.first, values.data() + at + f.count + 1, f.count);
            at += in_flight_values_of(f);
        }
    }

    fragment_config config_{};
    round_trigger trigger_{};
    std::vector<fragment> frags_;
    exec::cuda ex_{};                 // cuda_space: the engine's stream, for the checkpoint's copies
    buffer<float, Space> mix_local_; // mix > 0: a fragment's parameters before its late update
    buffer<float, Space> start_;     // carry_local: each fragment in flight's parameters
                                     // when its exchange began (then its progress since)
};

} // namespace detail

TRICKLE_NAMESPACE_END
