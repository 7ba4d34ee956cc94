// trickle/algorithm/stage/outer_pass.hpp: what one outer step produces and consumes, the
// narrow pass an engine hands the exchange route (stage/route.hpp) and its stages.
//
// An outer step over elements [first, first + n) of the group (the whole group, or one
// streaming fragment) produces this worker's weighted outer gradient, delta = snapshot -
// params times the weight, with the weight last, and consumes the sums: the outer rule
// updates the snapshot and the parameters. outer_pass is that pair and nothing else: the
// bodies (kernels/stream/body.hpp) over the group's view, the snapshot and the optimizer
// state, in every form the route may run them (whole passes over the buffer, one tile at a
// time inside a host codec's passes, a source and a sink inside a device codec's passes).
// How the values travel (plain, encoded, fused, started and landed later) is the route's
// choice; what wraps the producer and the combine step (pruning, a robust rule) is the
// engine's pass_wrap.
#pragma once

#include <trickle/algorithm/detail/common.hpp>
#include <trickle/config.hpp>
#include <trickle/kernels/flat_view.hpp>
#include <trickle/kernels/outer_rule.hpp>
#include <trickle/kernels/stream/body.hpp>
#include <trickle/kernels/stream/dispatch.hpp>

#include <cstddef>
#include <cstdint>
#include <utility>

TRICKLE_NAMESPACE_BEGIN

namespace detail {

template <element_type T>
struct outer_pass {
    flat_view<T> params;
    float* snapshot = nullptr;
    float* state = nullptr;
    // The whole group's tile -> segment table (device passes through the vector agents);
    // nullptr: the passes run as generic ranges of the bodies (the host, a fragment).
    const std::uint32_t* tile_seg = nullptr;
    std::size_t first = 0;
    std::size_t n = 0;
    float* buf = nullptr; // n + 1 floats: the weighted deltas, then the weight
    float weight = 0.0f;

    // The producer (the deltas times w into buf, the pass's weight into buf[n]) and the
    // consumer (the rule's update from the sums in buf, divided by the weights' sum buf[n]).
    outer_delta_body<T> delta(float w) const {
        return outer_delta_body<T>{params, snapshot, dense_wire<float>{buf}, w, buf + n, first};
    }
    template <outer_rule Rule>
    outer_update_body<T, Rule> update(const Rule& rule) const {
        return outer_update_body<T, Rule>{params, snapshot, state, dense_wire<float>{buf}, rule, 1.0f, buf + n, first};
    }
    // The consumer as a whole pass, for a rule or a rule chosen at run time (outer::any:
    // visited once, so the pass runs the held rule's body).
    template <class Exec, class Rule>
    void run_update(const Exec& ex, const Rule& rule) const {
        with_rule(rule, [&](const auto& r) { run(ex, update(r)); });
    }

    // Runs a body over the pass's n elements on the step's execution space (through the
    // vector agents where there is a tile table and the body has one on this space).
    template <class Exec, class Body>
    void run(const Exec& ex, const Body& body) const {
        if constexpr (streams_on<Exec, Body>) {
            if (tile_seg != nullptr) {
                stream_pass(ex, params, tile_seg, first, n, body);
                return;
            }
        }
        run_ranges(ex, n, body);
    }

    // Inside a host codec's passes (codec::encoded_all_reduce_tiled): values [i0, i0 + m)
    // of the deltas into out, and their sums taken from in (the weights' sum in buf[n]).
    void produce_tile(std::size_t i0, std::size_t m, float* out) const {
        outer_delta_body<T>{params, snapshot, dense_wire<float>{out}, weight, nullptr, first + i0}.run(0, m);
    }
    template <class Rule>
    void consume_tile(const Rule& rule, std::size_t i0, std::size_t m, const float* in) const {
        with_rule(rule, [&]<class R>(const R& r) {
            // (The update only reads the wire.)
            outer_update_body<T, R>{params, snapshot, state, dense_wire<float>{const_cast<float*>(in)},
                                    r,      1.0f,     buf + n, first + i0}
                .run(0, m);
        });
    }

    // Inside a device codec's passes (codec::encoded_all_reduce_blocks_fused): the source of
    // the deltas and the sink of their sums, and the weight written on the device.
    outer_delta_source<T> source() const { return outer_delta_source<T>{params, snapshot, weight}; }
    template <outer_rule Rule>
    outer_update_sink<T, Rule> sink(const Rule& rule) const {
        return outer_update_sink<T, Rule>{outer_update_body<T, Rule>{params, snapshot, state, {}, rule, 1.0f, buf + n, first}};
    }
    template <class Exec>
    void store_weight(const Exec& ex) const {
        for_each_index(ex, 1, store_scalar_body{buf + n, weight});
    }
};

// What an engine wraps around a pass's producer and combine step: pruning (the deltas
// pruned after they are produced) and a robust rule (the contributions combined by the
// rule instead of summed: each worker's unweighted delta, its weight beside it). Prune is
// called as prune(ex, buf), Combine as combine(buf, n). With neither, the route may fuse
// the passes into the codec's.
template <class Prune, class Combine>
struct pass_wrap {
    bool prunes = false;
    bool robust = false;
    Prune prune;
    Combine combine;
};
template <class Prune, class Combine>
pass_wrap(bool, bool, Prune, Combine) -> pass_wrap<Prune, Combine>;

} // namespace detail

TRICKLE_NAMESPACE_END
