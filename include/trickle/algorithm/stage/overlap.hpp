// trickle/algorithm/stage/overlap.hpp: overlapped SPARTA, a stage of the SPARTA engine
// (sparta_options::overlap, docs/streaming.md).
//
// The exchange of step t is gathered and started at step t and applied at the next step:
// its average lands one step late, corrected for what the worker changed meanwhile
// (params = mean + (params_now - params_gathered), the overlap_correction body), so the
// exchange can run while the next step computes. Over a communicator that can start
// operations (comm::async) a plain fp32 all-reduce runs on its progress thread; any other
// exchange runs at once and its result waits, which gives the same bits. The stage owns
// the exchange in flight and its gathered values; the engine lends it the selection, the
// gather and scatter bodies, the route and the accounting.
#pragma once

#include <trickle/algorithm/detail/common.hpp>
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

template <class Engine>
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
    template <class Exec>
    void start(Engine& e, const Exec& ex, std::uint64_t t) {
        auto sel = e.select(t);
        const std::size_t count = sel.count();
        float* buf = e.ws_.get(0, count);
        const auto gather = make_gather(e.flat_.view(), sel, buf);
        for_each_index(ex, gather.calls(), gather);
        std::copy(buf, buf + count, gathered_.data());
        pending_.emplace(pending_exchange{std::move(sel), count});
        pending_exchange& p = *pending_;
        if constexpr (comm::async_communicator<typename Engine::comm_type>) {
            if (!e.route_.encoded() && e.route_.all_reduce()) {
                p.request = e.comm_.start_all_reduce_sum(buf, count);
                p.async = true;
                p.group = e.comm_.size();
                return;
            }
        }
        const traffic_counters before = e.comm_.traffic();
        p.group = e.reduce(ex, buf, count);
        p.traffic = e.comm_.traffic() - before;
    }

    // Applies the pending exchange (waiting for it if it still runs).
    template <class Exec>
    void apply(Engine& e, const Exec& ex) {
        pending_exchange& p = *pending_;
        if (p.async) {
            p.traffic = p.request.wait();
        }
        float* buf = e.ws_.get(0, p.count);
        float* now = gathered_.data() + capacity_;
        const auto gather = make_gather(e.flat_.view(), p.sel, now);
        for_each_index(ex, gather.calls(), gather);
        for_each_index(ex, p.count, overlap_correction_body{buf, now, gathered_.data(), 1.0f / static_cast<float>(p.group)});
        const auto scatter = make_scatter(e.flat_.view(), p.sel, buf, 1.0f);
        for_each_index(ex, scatter.calls(), scatter);
        const traffic_counters traffic = p.traffic;
        const std::size_t count = p.count;
        pending_.reset();
        e.count_exchange(traffic, count);
    }

private:
    struct pending_exchange {
        typename Engine::selection_type sel;
        std::size_t count = 0;
        int group = 0;
        bool async = false;
        traffic_counters traffic{};
        comm::request request{};
    };

    std::optional<pending_exchange> pending_; // the exchange started, not yet applied
    std::vector<float> gathered_;             // its gathered values, then the values at apply time
    std::size_t capacity_ = 0;
};

} // namespace detail

TRICKLE_NAMESPACE_END
