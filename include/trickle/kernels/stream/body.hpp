// trickle/kernels/stream/body.hpp: the fused kernel bodies of one DiLoCo outer step (delta, update, snapshot copy),
// the passes that stream over the whole group.
//
// One outer step is two passes over the group, with the communication in between:
//
//   outer_delta_body    send[k] = weight * (snapshot[i] - params[i])
//   ... all-reduce of send into recv (sum or mean over workers) ...
//   outer_update_body   g = recv[k] * scale; rule.apply(snapshot[i], g, state of i);
//                       params[i] = T(snapshot[i])
//
// and snapshot_copy_body (snapshot[i] = params[i]) starts a run. The snapshot is an fp32
// master copy, so fp16 and bf16 parameters lose nothing across rounds; the optimizer state
// is fp32 in the structure-of-arrays layout of outer_state_index (kernels/outer_rule.hpp).
//
// Index k runs over [0, count) of one launch and i = first + k is the element's flat index
// in the group: params, snapshot and state are addressed by i, the wire by k. first = 0 with
// count = params.total is the whole group; a caller that overlaps communication with the
// update launches one body per chunk, with the wire pointing at that chunk's buffer.
//
// Each body has two equivalent forms that write the same bits: operator()(k) handles one
// index (it finds the element's tensor by a search of the segment table), and run(k0, k1)
// handles [k0, k1) tensor by tensor, one lookup and then contiguous loops the compiler
// vectorizes. ranges<Space>(body, count) (kernels/chunking.hpp) wraps a body so that
// for_each_index launches run() over chunks; on the device the agents of
// kernels/stream/agent.hpp move the same values with 16-byte accesses instead, and
// stream_pass (kernels/stream/dispatch.hpp) runs a body either way.
//
// The wire is a policy, so a codec can sit between the bodies and the communicator:
// anything trivially copyable with store(k, float) (the sending side) or float load(k) (the
// receiving side). dense_wire<W> stores fp32, fp16 or bf16 values; element-wise codecs slot
// in the same way, while block codecs (a scale per block, as int8 needs) need a per-block
// pass of their own before the send and after the receive.
#pragma once

#include <trickle/config.hpp>
#include <trickle/core/dtype.hpp>
#include <trickle/core/memory_space.hpp>
#include <trickle/kernels/chunking.hpp>
#include <trickle/kernels/flat_view.hpp>
#include <trickle/kernels/outer_rule.hpp>

#include <cstddef>
#include <type_traits>

TRICKLE_NAMESPACE_BEGIN

// The sending side of a wire: stores one fp32 value per index.
template <class S>
concept wire_sink = std::is_trivially_copyable_v<S> && requires(const S& s, std::size_t k, float v) {
    s.store(k, v);
};

// The receiving side of a wire: loads one value per index as fp32.
template <class S>
concept wire_source = std::is_trivially_copyable_v<S> && requires(const S& s, std::size_t k) {
    { s.load(k) } -> std::convertible_to<float>;
};

// A plain array of W (float, trickle::half or trickle::bfloat16) in the kernels' memory
// space, one value per index, rounded to nearest even when W is narrower than fp32.
template <class W = float>
struct dense_wire {
    static_assert(element_type<W>, "dense_wire<W>: W must be float, trickle::half or trickle::bfloat16");
    W* data = nullptr;

    TRICKLE_HOST_DEVICE void store(std::size_t k, float v) const { data[k] = from_float<W>(v); }
    TRICKLE_HOST_DEVICE float load(std::size_t k) const { return to_float(data[k]); }
};

static_assert(wire_sink<dense_wire<float>> && wire_source<dense_wire<bfloat16>>);

// Before communication: this worker's contribution to the outer gradient,
//     send[k] = weight * (snapshot[i] - float(params[i])),   i = first + k.
// weight is this worker's weight in a weighted average (1 for a plain one). A worker
// whose contribution is dropped passes weight 0 and sends exact zeros, even when its
// parameters hold inf or NaN. When weight_out is set, index 0 also writes weight there,
// so the weight can travel in the same all-reduce (typically as the element after the
// deltas) and come back as the weight sum that outer_update_body divides by.
template <element_type T, wire_sink Send = dense_wire<float>>
struct outer_delta_body {
    flat_view<T> params;
    const float* snapshot = nullptr;
    Send send{};
    float weight = 1.0f;
    float* weight_out = nullptr;
    std::size_t first = 0;

    TRICKLE_HOST_DEVICE void operator()(std::size_t k) const {
        const std::size_t i = first + k;
        send.store(k, value(snapshot[i], params[i]));
        if (k == 0 && weight_out != nullptr) *weight_out = weight;
    }

    TRICKLE_HOST_DEVICE void run(std::size_t k0, std::size_t k1) const {
        if (k0 == 0 && k1 > 0 && weight_out != nullptr) *weight_out = weight;
        params.for_each_piece(first + k0, first + k1, [&](const T* p, std::size_t i, std::size_t m) {
            const float* snap = snapshot + i;
            const std::size_t k = i - first;
            for (std::size_t j = 0; j < m; ++j) send.store(k + j, value(snap[j], p[j]));
        });
    }

    // The value sent for one element (shared by every backend's agents).
    TRICKLE_HOST_DEVICE float value(float snap, T param) const { return value_f(snap, to_float(param)); }
    TRICKLE_HOST_DEVICE float value_f(float snap, float param) const {
        return weight == 0.0f ? 0.0f : weight * (snap - param);
    }
};

// After communication: one outer-optimizer step on the snapshot and the parameters,
//     g = recv[k] * factor                    factor = scale, or scale / *weight_sum when set
//     rule.apply(snapshot[i], g, state of i)  (state: Rule::state_slots floats per element)
//     params[i] = T(snapshot[i])
// scale is 1 after an averaging all-reduce and 1 / workers after a summing one. weight_sum,
// when set, points to the reduced sum of the workers' weights (in memory the kernel can
// read); a sum of 0 (every contribution dropped) gives g = 0 rather than 0 / 0.
// state holds Rule::state_slots * params.total floats (nullptr when the rule has none);
// slot s of element i is state[outer_state_index(s, i, params.total)].
template <element_type T, outer_rule Rule, wire_source Recv = dense_wire<float>>
struct outer_update_body {
    flat_view<T> params;
    float* snapshot = nullptr;
    float* state = nullptr;
    Recv recv{};
    Rule rule{};
    float scale = 1.0f;
    const float* weight_sum = nullptr;
    std::size_t first = 0;

    TRICKLE_HOST_DEVICE void operator()(std::size_t k) const { element(k, first + k, params[first + k], factor()); }

    TRICKLE_HOST_DEVICE void run(std::size_t k0, std::size_t k1) const {
        const float f = factor();
        params.for_each_piece(first + k0, first + k1, [&](T* p, std::size_t i, std::size_t m) {
            const std::size_t k = i - first;
            for (std::size_t j = 0; j < m; ++j) element(k + j, i + j, p[j], f);
        });
    }

    // The factor every received value is multiplied by (read once per launch or call).
    TRICKLE_HOST_DEVICE float factor() const {
        if (weight_sum == nullptr) return scale;
        const float w = *weight_sum;
        return w == 0.0f ? 0.0f : scale / w;
    }

    // One element's update from its received value r (shared by every backend's agents):
    // the snapshot value s and the state slots st (in registers) change in place; the
    // result is the new snapshot value, which the parameter takes rounded to T.
    TRICKLE_HOST_DEVICE float update(float r, float f, float& s, float* st) const {
        const float g = mul_rn(r, f);
        if constexpr (Rule::state_slots == 0)
            rule.apply(s, g, nullptr);
        else
            rule.apply(s, g, st);
        return s;
    }

    // Element i's whole update from its received value r: snapshot, state and parameter.
    TRICKLE_HOST_DEVICE void apply(std::size_t i, T& param, float r, float f) const {
        float s = snapshot[i];
        constexpr int slots = Rule::state_slots;
        // Gathered into registers so the rule never depends on the memory layout.
        const std::size_t n = params.total;
        float st[slots > 0 ? slots : 1];
        for (int j = 0; j < slots; ++j) st[j] = state[outer_state_index(j, i, n)];
        update(r, f, s, st);
        for (int j = 0; j < slots; ++j) state[outer_state_index(j, i, n)] = st[j];
        snapshot[i] = s;
        param = from_float<T>(s);
    }

private:
    TRICKLE_HOST_DEVICE void element(std::size_t k, std::size_t i, T& param, float f) const {
        apply(i, param, recv.load(k), f);
    }
};

// Calls f(t, param) for t < count <= 4 with param the element i + t of the group: one
// segment lookup, then a step to the next segment where the quad crosses into it. The
// loop has a constant trip count, so the caller's quad arrays stay in registers.
template <class T, class F>
TRICKLE_HOST_DEVICE void for_each_in_quad(const flat_view<T>& params, std::size_t i, std::size_t count, F&& f) {
    const segment<T>* s = params.segment_holding(i);
    TRICKLE_UNROLL
    for (std::size_t t = 0; t < 4; ++t) {
        if (t < count) {
            const std::size_t k = i + t;
            while (k >= s->offset + s->size) ++s;
            f(t, s->data[k - s->offset]);
        }
    }
}

// Index 0 stores value at *at: a fused outer step's weight, written on the device before
// its exact sum.
struct store_scalar_body {
    float* at = nullptr;
    float value = 0.0f;
    TRICKLE_HOST_DEVICE void operator()(std::size_t) const { *at = value; }
};

// DiLoCo's outer gradient as the source of an encoded all-reduce's encode pass
// (codec::encoded_all_reduce_blocks_fused, kernels/codec_pass.hpp's value_source): value i
// is what outer_delta_body sends for element i, computed from the snapshot and the
// parameters as the pass asks for it, so the outer gradient is never stored.
template <element_type T>
struct outer_delta_source {
    flat_view<T> params;
    const float* snapshot = nullptr;
    float weight = 1.0f;

    TRICKLE_HOST_DEVICE void operator()(std::size_t i, std::size_t count, float* out) const {
        const outer_delta_body<T> delta{params, snapshot, {}, weight, nullptr, 0};
        for_each_in_quad(params, i, count, [&](std::size_t t, const T& p) { out[t] = delta.value(snapshot[i + t], p); });
    }
};

// DiLoCo's outer update as the sink of the decode pass: element i takes the sum of value
// i (the update body's apply, with the factor read once a quad).
template <element_type T, outer_rule Rule>
struct outer_update_sink {
    outer_update_body<T, Rule> update;

    TRICKLE_HOST_DEVICE void operator()(std::size_t i, std::size_t count, const float* in) const {
        const float f = update.factor();
        for_each_in_quad(params(), i, count, [&](std::size_t t, T& p) { update.apply(i + t, p, in[t], f); });
    }
    TRICKLE_HOST_DEVICE const flat_view<T>& params() const { return update.params; }
};

// Start of a run (or a resynchronisation): snapshot[i] = float(params[i]), i = first + k.
template <element_type T>
struct snapshot_copy_body {
    flat_view<T> params;
    float* snapshot = nullptr;
    std::size_t first = 0;

    TRICKLE_HOST_DEVICE void operator()(std::size_t k) const {
        const std::size_t i = first + k;
        snapshot[i] = to_float(params[i]);
    }

    TRICKLE_HOST_DEVICE void run(std::size_t k0, std::size_t k1) const {
        params.for_each_piece(first + k0, first + k1, [&](const T* p, std::size_t i, std::size_t m) {
            float* snap = snapshot + i;
            for (std::size_t j = 0; j < m; ++j) snap[j] = to_float(p[j]);
        });
    }
};

// Streaming DiLoCo's merge of a late outer step with what the worker learned meanwhile:
//     local[k] = float(params[i])                           (local_copy_body, before the update)
//     params[i] = T(alpha * local[k] + (1 - alpha) * snapshot[i])   (mix_body, after it)
// i = first + k. alpha = 0 is plain replacement (the update body's own params = T(snapshot)).
template <element_type T>
struct local_copy_body {
    flat_view<T> params;
    float* local = nullptr;
    std::size_t first = 0;

    TRICKLE_HOST_DEVICE void operator()(std::size_t k) const { local[k] = to_float(params[first + k]); }

    TRICKLE_HOST_DEVICE void run(std::size_t k0, std::size_t k1) const {
        params.for_each_piece(first + k0, first + k1, [&](const T* p, std::size_t i, std::size_t m) {
            float* out = local + (i - first);
            for (std::size_t j = 0; j < m; ++j) out[j] = to_float(p[j]);
        });
    }
};

template <element_type T>
struct mix_body {
    flat_view<T> params;
    const float* snapshot = nullptr;
    const float* local = nullptr;
    float alpha = 0.0f;
    std::size_t first = 0;

    TRICKLE_HOST_DEVICE float value(float l, float s) const { return add_rn(mul_rn(alpha, l), mul_rn(1.0f - alpha, s)); }

    TRICKLE_HOST_DEVICE void operator()(std::size_t k) const {
        const std::size_t i = first + k;
        params[i] = from_float<T>(value(local[k], snapshot[i]));
    }

    TRICKLE_HOST_DEVICE void run(std::size_t k0, std::size_t k1) const {
        params.for_each_piece(first + k0, first + k1, [&](T* p, std::size_t i, std::size_t m) {
            const float* l = local + (i - first);
            const float* snap = snapshot + i;
            for (std::size_t j = 0; j < m; ++j) p[j] = from_float<T>(value(l[j], snap[j]));
        });
    }
};

// A late outer step that keeps what the worker learned while its exchange travelled
// (diloco_options::carry_local), as SPARTA's overlapped exchange is corrected:
//     start[k] = float(params[i])                    (local_copy_body, when the exchange starts)
//     start[k] = float(params[i]) - start[k]         (progress_body, before the update)
//     params[i] = T(snapshot[i] + start[k])          (carry_body, after it: the new global
//                                                     parameters plus the local progress)
// i = first + k. Each is one rounding of fp32 (sub_rn, add_rn), so host and device agree.
template <element_type T>
struct progress_body {
    flat_view<T> params;
    float* local = nullptr;
    std::size_t first = 0;

    TRICKLE_HOST_DEVICE void operator()(std::size_t k) const {
        local[k] = sub_rn(to_float(params[first + k]), local[k]);
    }

    TRICKLE_HOST_DEVICE void run(std::size_t k0, std::size_t k1) const {
        params.for_each_piece(first + k0, first + k1, [&](const T* p, std::size_t i, std::size_t m) {
            float* l = local + (i - first);
            for (std::size_t j = 0; j < m; ++j) l[j] = sub_rn(to_float(p[j]), l[j]);
        });
    }
};

template <element_type T>
struct carry_body {
    flat_view<T> params;
    const float* snapshot = nullptr;
    const float* progress = nullptr;
    std::size_t first = 0;

    TRICKLE_HOST_DEVICE void operator()(std::size_t k) const {
        const std::size_t i = first + k;
        params[i] = from_float<T>(add_rn(snapshot[i], progress[k]));
    }

    TRICKLE_HOST_DEVICE void run(std::size_t k0, std::size_t k1) const {
        params.for_each_piece(first + k0, first + k1, [&](T* p, std::size_t i, std::size_t m) {
            const float* d = progress + (i - first);
            const float* snap = snapshot + i;
            for (std::size_t j = 0; j < m; ++j) p[j] = from_float<T>(add_rn(snap[j], d[j]));
        });
    }
};

// Resynchronisation (the initial broadcast): params[i] = T(snapshot[i]), i = first + k.
template <element_type T>
struct params_from_snapshot_body {
    flat_view<T> params;
    const float* snapshot = nullptr;
    std::size_t first = 0;

    TRICKLE_HOST_DEVICE void operator()(std::size_t k) const {
        const std::size_t i = first + k;
        params[i] = from_float<T>(snapshot[i]);
    }

    TRICKLE_HOST_DEVICE void run(std::size_t k0, std::size_t k1) const {
        params.for_each_piece(first + k0, first + k1, [&](T* p, std::size_t i, std::size_t m) {
            const float* snap = snapshot + i;
            for (std::size_t j = 0; j < m; ++j) p[j] = from_float<T>(snap[j]);
        });
    }
};

TRICKLE_NAMESPACE_END
