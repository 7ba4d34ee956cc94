// trickle/algorithm/stage/overlap.hpp: overlapped SPARTA, a stage of the SPARTA engine
// (sparta_options::overlap, docs/streaming.md).
//
// The exchange of step t is gathered and started at step t and applied at the next step:
// its average lands one step late, corrected for what the worker changed meanwhile
// (params = mean + (params_now - params_gathered), the overlap_correction body), so the
// exchange can run while the next step computes. How it travels is the route's choice
// (stage/route.hpp: start and land): over a communicator that runs work on a progress
// thread (comm::async) the all_reduce topology's plain or encoded exchange runs there;
// any other runs at once and its result waits, which gives the same bits. The stage owns
// the exchange in flight and its gathered values; the engine lends it, per call, the
// selection, the group's view, the route and the accounting (a narrow lender, not itself).
#pragma once

#include <trickle/algorithm/detail/common.hpp>
#include <trickle/algorithm/stage/route.hpp>
#include <trickle/comm/request.hpp>
#include <trickle/algorithm/stats.hpp>
#include <trickle/config.hpp>
#include <trickle/exec/execution_space.hpp>
#include <trickle/kernels/exchange/body.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

TRICKLE_NAMESPACE_BEGIN

namespace detail {

// Selection: the sampler's selection type.
template <class Selection>
class overlap_stage {
public:
    overlap_stage() = default;
    overlap_stage(const overlap_stage&) = delete;
    overlap_stage& operator=(const overlap_stage&) = delete;
    // A started exchange writes into the engine's buffers: wait for it before they go.
    ~overlap_stage() { pending_.reset(); }

    // Room for two selections: the gathered values, then the values at apply time.
    void reserve(std::size_t capacity) {
        capacity_ = capacity;
        gathered_.assign(2 * capacity, 0.0f);
    }

    bool pending() const { return pending_.has_value(); }

    // Gathers and starts the exchange of step t.
    template <class Lender, class Exec>
    void start(const Lender& e, const Exec& ex, std::uint64_t t) {
        Selection sel = e.select(t);
        const std::size_t count = sel.count();
        float* buf = e.buffer(count);
        const auto gather = make_gather(e.view(), sel, buf);
        for_each_index(ex, gather.calls(), gather);
        std::copy(buf, buf + count, gathered_.data());
        pending_.emplace(pending_exchange{std::move(sel), count, {}});
        pending_->flight = e.route().start(ex, e.comm(), buf, count, e.ws(), e.round(), 0, false, true);
    }

    // Applies the pending exchange (waiting for it if it still runs).
    template <class Lender, class Exec>
    void apply(const Lender& e, const Exec& ex) {
        pending_exchange& p = *pending_;
        e.route().land(e.comm(), p.flight);
        float* buf = e.buffer(p.count);
        float* now = gathered_.data() + capacity_;
        const auto gather = make_gather(e.view(), p.sel, now);
        for_each_index(ex, gather.calls(), gather);
        for_each_index(ex, p.count,
                       overlap_correction_body{buf, now, gathered_.data(), 1.0f / static_cast<float>(p.flight.group)});
        const auto scatter = make_scatter(e.view(), p.sel, buf, 1.0f);
        for_each_index(ex, scatter.calls(), scatter);
        const route_flight flight = std::move(p.flight);
        const std::size_t count = p.count;
        pending_.reset();
        e.count(flight.traffic, flight.parts, count);
    }

private:
    struct pending_exchange {
        Selection sel;
        std::size_t count = 0;
        route_flight flight{};
    };

    std::optional<pending_exchange> pending_; // the exchange started, not yet applied
    std::vector<float> gathered_;             // its gathered values, then the values at apply time
    std::size_t capacity_ = 0;
};

} // namespace detail

TRICKLE_NAMESPACE_END
