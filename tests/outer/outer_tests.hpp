// DiLoCo kernel-body checks written once and run for every execution space (host suites in
// test_diloco_kernels.cpp, CUDA suites in tests/cuda/test_outer_cuda.cu), and the
// double-precision restatement of the torch update rules they are compared with.
#pragma once

#include <trickle/algorithm/flat_params.hpp>
#include <trickle/core.hpp>
#include <trickle/exec.hpp>
#include <trickle/kernels/diloco.hpp>
#include <trickle/outer.hpp>

#include <doctest/doctest.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

namespace trickle_test {

// ---------------------------------------------------------------------------------------
// Reference: torch's update rules restated in double precision, with no attempt to follow
// fp32 rounding. One call is one outer step t of one element; s0 and s1 are its state.

inline void reference_step(const trickle::outer::average&, std::uint64_t, double& p, double g, double&, double&) {
    p -= g;
}

inline void reference_step(const trickle::outer::sgd& o, std::uint64_t, double& p, double g, double&, double&) {
    p -= o.lr * g;
}

inline void reference_step(const trickle::outer::momentum& o, std::uint64_t t, double& p, double g, double& buf,
                           double&) {
    buf = t == 1 ? g : o.momentum * buf + g;
    p -= o.lr * buf;
}

inline void reference_step(const trickle::outer::nesterov& o, std::uint64_t t, double& p, double g, double& buf,
                           double&) {
    buf = t == 1 ? g : o.momentum * buf + g;
    p -= o.lr * (g + o.momentum * buf);
}

inline void reference_step(const trickle::outer::adam& o, std::uint64_t t, double& p, double g, double& m, double& v) {
    if (t == 1) m = v = 0.0;
    m = o.beta1 * m + (1.0 - o.beta1) * g;
    v = o.beta2 * v + (1.0 - o.beta2) * g * g;
    const double bc1 = 1.0 - std::pow(o.beta1, static_cast<double>(t));
    const double bc2 = 1.0 - std::pow(o.beta2, static_cast<double>(t));
    p -= o.lr / bc1 * m / (std::sqrt(v) / std::sqrt(bc2) + o.eps);
}

// |got - want| within rel * max(1, |want|).
inline bool close(double got, double want, double rel) {
    return std::fabs(got - want) <= rel * std::fmax(1.0, std::fabs(want));
}

// |got - want| within rel * |want| + floor: for state values, which may be far below 1.
inline bool close_to(double got, double want, double rel, double floor) {
    return std::fabs(got - want) <= rel * std::fabs(want) + floor;
}

template <class T>
float round_to(float x) {
    return trickle::to_float(trickle::from_float<T>(x));
}

template <class T>
bool same_bits(T a, T b) {
    return std::memcmp(&a, &b, sizeof(T)) == 0;
}

template <class T>
bool all_same_bits(const std::vector<T>& a, const std::vector<T>& b) {
    return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

// ---------------------------------------------------------------------------------------
// A parameter group in Exec's memory space, with the buffers of one DiLoCo worker.

template <class Exec>
void sync(const Exec& ex) {
    if constexpr (!std::is_same_v<typename Exec::memory_space, trickle::host_space>) {
#if TRICKLE_HAS_CUDA
        TRICKLE_CUDA_CHECK(cudaStreamSynchronize(ex.stream));
#endif
    }
    (void)ex;
}

template <class Space, class T>
void upload(trickle::buffer<T, Space>& dst, const std::vector<T>& src) {
    REQUIRE(dst.size() >= src.size());
    trickle::copy_elements<Space, trickle::host_space>(dst.data(), src.data(), src.size());
}

template <class Space, class T>
std::vector<T> download(const trickle::buffer<T, Space>& src) {
    std::vector<T> out(src.size());
    trickle::copy_elements<trickle::host_space, Space>(out.data(), src.data(), src.size());
    return out;
}

// Three tensors of sizes n/3, 0 and the rest, so flat indices cross a segment boundary
// and an empty tensor.
template <class Exec, class T>
struct diloco_rig {
    using space = typename Exec::memory_space;

    // How the bodies are launched: by_ranges (what diloco_engine does: run() in chunks of
    // trickle::ranges<space>), per_index (operator() once per index), or any other value:
    // run() in chunks of that many indices.
    static constexpr std::size_t by_ranges = 0, per_index = static_cast<std::size_t>(-1);

    Exec ex;
    std::size_t n;
    std::size_t range = by_ranges;
    trickle::buffer<T, space> t0, t1, t2;
    trickle::param_group<T, space> group;
    trickle::flat_params<T, space> flat;
    trickle::buffer<float, space> snapshot, state, wire, weight_sum;

    diloco_rig(Exec e, std::size_t count, int slots)
        : ex(e), n(count), t0(count / 3), t1(0), t2(count - count / 3), snapshot(count),
          state(static_cast<std::size_t>(slots) * count), wire(count + 1), weight_sum(1) {
        group.add("a", t0.data(), t0.size()).add("empty", t1.data(), 0).add("b", t2.data(), t2.size());
        flat = trickle::flat_params<T, space>(group);
    }

    trickle::flat_view<T> view() const { return flat.view(); }

    template <class Body>
    void launch(std::size_t count, const Body& body) {
        if (range == per_index) {
            trickle::for_each_index(ex, count, body);
        } else {
            trickle::range_body<Body> r = trickle::ranges<space>(body, count);
            if (range != by_ranges) r.range = range;
            trickle::for_each_index(ex, r.calls(), r);
        }
    }

    void set_params(const std::vector<float>& v) {
        REQUIRE(v.size() == n);
        std::vector<T> raw(n);
        for (std::size_t i = 0; i < n; ++i) raw[i] = trickle::from_float<T>(v[i]);
        set_raw_params(raw);
    }
    void set_raw_params(const std::vector<T>& raw) {
        const std::size_t a = t0.size();
        trickle::copy_elements<space, trickle::host_space>(t0.data(), raw.data(), a);
        trickle::copy_elements<space, trickle::host_space>(t2.data(), raw.data() + a, n - a);
    }
    std::vector<T> raw_params() const {
        std::vector<T> raw(n);
        const std::size_t a = t0.size();
        trickle::copy_elements<trickle::host_space, space>(raw.data(), t0.data(), a);
        trickle::copy_elements<trickle::host_space, space>(raw.data() + a, t2.data(), n - a);
        return raw;
    }
    std::vector<float> params() const {
        const auto raw = raw_params();
        std::vector<float> out(n);
        for (std::size_t i = 0; i < n; ++i) out[i] = trickle::to_float(raw[i]);
        return out;
    }

    void copy_snapshot() {
        launch(n, trickle::snapshot_copy_body<T>{view(), snapshot.data()});
        sync(ex);
    }

    // Runs outer_delta_body and returns the wire: n deltas, then the weight when asked for.
    std::vector<float> delta(float weight, bool weight_out = false) {
        trickle::outer_delta_body<T> body{view(), snapshot.data(), trickle::dense_wire<float>{wire.data()}, weight,
                                          weight_out ? wire.data() + n : nullptr};
        launch(n, body);
        sync(ex);
        auto w = download(wire);
        w.resize(weight_out ? n + 1 : n);
        return w;
    }

    // Runs outer_update_body over [first, first + count) with recv[k] the received values.
    // With by_weight_sum, recv[count] is the reduced weight sum and travels on the device.
    template <class Rule>
    void update(const Rule& rule, const std::vector<float>& recv, float scale, bool by_weight_sum = false,
                std::size_t first = 0, std::size_t count = static_cast<std::size_t>(-1)) {
        if (count == static_cast<std::size_t>(-1)) count = n - first;
        REQUIRE(recv.size() >= count + (by_weight_sum ? 1 : 0));
        upload(wire, recv);
        trickle::outer_update_body<T, Rule> body{view(), snapshot.data(), state.data(),
                                                 trickle::dense_wire<float>{wire.data()}, rule, scale,
                                                 by_weight_sum ? wire.data() + count : nullptr, first};
        launch(count, body);
        sync(ex);
    }
};

// Deterministic drift of worker k's parameter i during round t: what its inner steps did.
inline float drift(std::uint64_t t, int k, std::size_t i) {
    return static_cast<float>(0.05 * std::sin(1.3 * static_cast<double>(i) + 0.7 * k + 2.1 * static_cast<double>(t)) +
                              0.02 * (k - 1));
}

inline float initial_value(std::size_t i) {
    return static_cast<float>(std::cos(0.37 * static_cast<double>(i) + 0.2));
}

// What a trajectory ends with, for comparing execution spaces bit for bit.
template <class T>
struct trajectory_result {
    std::vector<float> snapshot, state;
    std::vector<T> params;
};

// `workers` workers run `steps` outer rounds: each drifts from the shared parameters, the
// deltas are summed (as an all-reduce would), and the update divides by the worker count.
// Checks every round against the double reference: snapshot and state to `rel`, and
// params == T(snapshot) exactly.
template <class Exec, class T, class Opt>
trajectory_result<T> check_trajectory(const Exec& ex, const Opt& opt, int steps, double rel = 2e-5,
                                      std::size_t n = 37, int workers = 3,
                                      std::size_t range = diloco_rig<Exec, T>::by_ranges) {
    constexpr int slots = Opt::state_slots;
    diloco_rig<Exec, T> rig(ex, n, slots);
    rig.range = range;
    std::vector<float> init(n);
    for (std::size_t i = 0; i < n; ++i) init[i] = initial_value(i);
    rig.set_params(init);
    rig.copy_snapshot();

    std::vector<double> snap_ref(n), s0(n, 0.0), s1(n, 0.0);
    const auto start = rig.params();
    for (std::size_t i = 0; i < n; ++i) snap_ref[i] = start[i];

    for (std::uint64_t t = 1; t <= static_cast<std::uint64_t>(steps); ++t) {
        const auto shared = rig.params();
        std::vector<float> sum(n, 0.0f);
        std::vector<double> g_ref(n, 0.0);
        for (int k = 0; k < workers; ++k) {
            std::vector<float> mine(n);
            for (std::size_t i = 0; i < n; ++i) mine[i] = shared[i] + drift(t, k, i);
            rig.set_params(mine);
            const auto used = rig.params(); // after rounding to T
            const auto sent = rig.delta(1.0f);
            for (std::size_t i = 0; i < n; ++i) {
                sum[i] += sent[i];
                g_ref[i] += (snap_ref[i] - static_cast<double>(used[i])) / workers;
            }
        }
        rig.update(opt.prepare(t), sum, 1.0f / static_cast<float>(workers));
        for (std::size_t i = 0; i < n; ++i) reference_step(opt, t, snap_ref[i], g_ref[i], s0[i], s1[i]);

        const auto snap = download(rig.snapshot);
        const auto state = download(rig.state);
        const auto raw = rig.raw_params();
        int bad_snap = 0, bad_state = 0, bad_params = 0;
        for (std::size_t i = 0; i < n; ++i) {
            bad_snap += close(snap[i], snap_ref[i], rel) ? 0 : 1;
            bad_params += same_bits(raw[i], trickle::from_float<T>(snap[i])) ? 0 : 1;
            // Slot 0 (a momentum buffer or Adam's m) is of the order of g; the fp32 delta
            // carries about 1e-7 of absolute error from the snapshot's rounding. Adam's v is
            // of the order of g * g.
            if (slots >= 1) bad_state += close_to(state[i], s0[i], rel, 1e-6) ? 0 : 1;
            if (slots >= 2) bad_state += close_to(state[n + i], s1[i], rel, 1e-9) ? 0 : 1;
        }
        INFO(trickle::detail::concat(Opt::name, " step ", t, ": snapshot[0] = ", snap[0], ", reference ", snap_ref[0]));
        CHECK(bad_snap == 0);
        CHECK(bad_state == 0);
        CHECK(bad_params == 0);
    }
    return {download(rig.snapshot), download(rig.state), rig.raw_params()};
}

// Every optimizer, over several rounds, for one execution space and parameter type; the
// results come back for comparing execution spaces.
template <class Exec, class T>
std::vector<trajectory_result<T>> check_all_trajectories(const Exec& ex, std::size_t range = diloco_rig<Exec, T>::by_ranges) {
    using namespace trickle::outer;
    std::vector<trajectory_result<T>> out;
    out.push_back(check_trajectory<Exec, T>(ex, average{}, 5, 2e-5, 37, 3, range));
    out.push_back(check_trajectory<Exec, T>(ex, sgd{.lr = 0.8}, 5, 2e-5, 37, 3, range));
    out.push_back(check_trajectory<Exec, T>(ex, momentum{.lr = 0.5, .momentum = 0.8}, 5, 2e-5, 37, 3, range));
    out.push_back(check_trajectory<Exec, T>(ex, nesterov{}, 6, 2e-5, 37, 3, range));
    out.push_back(check_trajectory<Exec, T>(ex, adam{.lr = 0.05, .beta1 = 0.9, .beta2 = 0.95}, 5, 2e-5, 37, 3, range));
    // beta1 < 0.5 takes the other branch of torch's lerp.
    out.push_back(check_trajectory<Exec, T>(ex, adam{.lr = 0.02, .beta1 = 0.3, .beta2 = 0.999, .eps = 1e-6}, 5, 2e-5, 37, 3, range));
    return out;
}

// outer::average: a lone worker that did not move stays bit for bit where it was; several
// workers end at their mean; outer::sgd{.lr = 1} gives the same bits as outer::average.
template <class Exec, class T>
void check_average_semantics(const Exec& ex) {
    const std::size_t n = 23;
    std::vector<float> init(n);
    for (std::size_t i = 0; i < n; ++i) init[i] = initial_value(i);

    {
        diloco_rig<Exec, T> rig(ex, n, 0);
        rig.set_params(init);
        rig.copy_snapshot();
        const auto before = rig.raw_params();
        const auto snap_before = download(rig.snapshot);
        const auto sent = rig.delta(1.0f);
        for (float d : sent) CHECK(same_bits(d, 0.0f));
        rig.update(trickle::outer::average{}.prepare(1), sent, 1.0f);
        const auto after = rig.raw_params();
        const auto snap_after = download(rig.snapshot);
        for (std::size_t i = 0; i < n; ++i) {
            CHECK(same_bits(after[i], before[i]));
            CHECK(same_bits(snap_after[i], snap_before[i]));
        }
    }

    const int workers = 4;
    auto run = [&](auto rule, std::vector<double>& mean) {
        diloco_rig<Exec, T> rig(ex, n, 0);
        rig.set_params(init);
        rig.copy_snapshot();
        const auto shared = rig.params();
        std::vector<float> sum(n, 0.0f);
        mean.assign(n, 0.0);
        for (int k = 0; k < workers; ++k) {
            std::vector<float> mine(n);
            for (std::size_t i = 0; i < n; ++i) mine[i] = shared[i] + 0.3f * drift(1, k, i);
            rig.set_params(mine);
            const auto used = rig.params();
            const auto sent = rig.delta(1.0f);
            for (std::size_t i = 0; i < n; ++i) {
                sum[i] += sent[i];
                mean[i] += static_cast<double>(used[i]) / workers;
            }
        }
        rig.update(rule, sum, 1.0f / workers);
        return download(rig.snapshot);
    };
    std::vector<double> mean;
    const auto avg = run(trickle::outer::average{}.prepare(1), mean);
    const auto sgd1 = run(trickle::outer::sgd{.lr = 1.0}.prepare(1), mean);
    int off_mean = 0, differ = 0;
    for (std::size_t i = 0; i < n; ++i) {
        off_mean += close(avg[i], mean[i], 1e-6) ? 0 : 1;
        differ += same_bits(avg[i], sgd1[i]) ? 0 : 1;
    }
    CHECK(off_mean == 0);
    CHECK(differ == 0);
}

// Weighted averaging: each worker sends weight * delta and its weight after the deltas;
// the update divides by the reduced weight sum read from the kernels' memory. A worker
// with weight 0 sends exact zeros even with NaN parameters; when every weight is 0 the
// parameters stay at the snapshot.
template <class Exec, class T>
void check_weighted(const Exec& ex) {
    const std::size_t n = 19;
    std::vector<float> init(n);
    for (std::size_t i = 0; i < n; ++i) init[i] = initial_value(i);
    const std::vector<float> weights{1.0f, 3.0f, 0.0f, 0.5f};
    const std::vector<float> none{0.0f, 0.0f, 0.0f, 0.0f};

    for (const auto* w : {&weights, &none}) {
        diloco_rig<Exec, T> rig(ex, n, 0);
        rig.set_params(init);
        rig.copy_snapshot();
        const auto shared = rig.params();
        const auto snap0 = download(rig.snapshot);
        std::vector<float> sum(n + 1, 0.0f);
        std::vector<double> weighted(n, 0.0);
        double wsum = 0.0;
        for (std::size_t k = 0; k < w->size(); ++k) {
            const float wk = (*w)[k];
            std::vector<float> mine(n);
            for (std::size_t i = 0; i < n; ++i)
                mine[i] = wk == 0.0f ? std::numeric_limits<float>::quiet_NaN()
                                     : shared[i] + drift(2, static_cast<int>(k), i);
            rig.set_params(mine);
            const auto used = rig.params();
            const auto sent = rig.delta(wk, true);
            REQUIRE(sent.size() == n + 1);
            CHECK(sent[n] == wk);
            for (std::size_t i = 0; i <= n; ++i) sum[i] += sent[i];
            if (wk == 0.0f) {
                for (std::size_t i = 0; i < n; ++i) CHECK(same_bits(sent[i], 0.0f));
            } else {
                for (std::size_t i = 0; i < n; ++i) weighted[i] += static_cast<double>(wk) * used[i];
                wsum += wk;
            }
        }
        rig.update(trickle::outer::average{}.prepare(1), sum, 1.0f, /*by_weight_sum=*/true);
        const auto snap = download(rig.snapshot);
        int bad = 0;
        for (std::size_t i = 0; i < n; ++i) {
            if (wsum == 0.0)
                bad += same_bits(snap[i], snap0[i]) ? 0 : 1;
            else
                bad += close(snap[i], weighted[i] / wsum, 1e-6) ? 0 : 1;
        }
        INFO(trickle::detail::concat("weight sum ", wsum));
        CHECK(bad == 0);
    }

    // scale multiplies the weighted mean: scale 0.5 with sgd{lr = 1} moves half-way.
    diloco_rig<Exec, T> rig(ex, n, 0);
    rig.set_params(init);
    rig.copy_snapshot();
    const auto snap0 = download(rig.snapshot);
    std::vector<float> recv(n + 1);
    for (std::size_t i = 0; i < n; ++i) recv[i] = 4.0f * 0.25f * static_cast<float>(i);
    recv[n] = 4.0f; // g = recv * 0.5 / 4 = i / 8
    rig.update(trickle::outer::sgd{.lr = 1.0}.prepare(1), recv, 0.5f, true);
    const auto snap = download(rig.snapshot);
    for (std::size_t i = 0; i < n; ++i) CHECK(snap[i] == snap0[i] - static_cast<float>(i) / 8.0f);
}

// State layout and isolation: an update over the chunk [first, first + count) reads slot
// s of element i at state[s * n + i] (seeded with distinct values at a step t > 1, so the
// rule reads them), writes exactly what rule.apply gives for that element alone, and
// leaves every other element's snapshot, parameters and state untouched.
template <class Exec, class T, class Opt>
void check_state_isolation(const Exec& ex, const Opt& opt, std::size_t range = diloco_rig<Exec, T>::by_ranges) {
    constexpr int slots = Opt::state_slots;
    const std::size_t n = 29, first = 7, count = 11;
    diloco_rig<Exec, T> rig(ex, n, slots);
    rig.range = range;
    std::vector<float> init(n), state(static_cast<std::size_t>(slots) * n), recv(count);
    for (std::size_t i = 0; i < n; ++i) init[i] = initial_value(i);
    for (std::size_t j = 0; j < state.size(); ++j) state[j] = 0.001f * static_cast<float>(j + 1);
    for (std::size_t k = 0; k < count; ++k) recv[k] = 0.01f * static_cast<float>(k) - 0.04f;
    rig.set_params(init);
    rig.copy_snapshot();
    upload(rig.state, state);
    const auto snap0 = download(rig.snapshot);
    const auto raw0 = rig.raw_params();

    const std::uint64_t t = 3;
    const auto rule = opt.prepare(t);
    rig.update(rule, recv, 1.0f, false, first, count);

    const auto snap = download(rig.snapshot);
    const auto st = download(rig.state);
    const auto raw = rig.raw_params();
    int inside = 0, outside = 0;
    for (std::size_t i = 0; i < n; ++i) {
        const bool in = i >= first && i < first + count;
        float p = snap0[i];
        float local[slots > 0 ? slots : 1] = {};
        for (int s = 0; s < slots; ++s) local[s] = state[trickle::outer_state_index(s, i, n)];
        if (in) rule.apply(p, recv[i - first], slots > 0 ? local : nullptr);
        int wrong = same_bits(snap[i], p) ? 0 : 1;
        wrong += same_bits(raw[i], in ? trickle::from_float<T>(p) : raw0[i]) ? 0 : 1;
        for (int s = 0; s < slots; ++s) wrong += same_bits(st[trickle::outer_state_index(s, i, n)], local[s]) ? 0 : 1;
        (in ? inside : outside) += wrong;
    }
    INFO(Opt::name);
    CHECK(inside == 0);
    CHECK(outside == 0);
}

// snapshot_copy_body copies float(params) exactly, also for one chunk only.
template <class Exec, class T>
void check_snapshot_copy(const Exec& ex, std::size_t range = diloco_rig<Exec, T>::by_ranges) {
    const std::size_t n = 31;
    diloco_rig<Exec, T> rig(ex, n, 0);
    rig.range = range;
    std::vector<float> init(n);
    for (std::size_t i = 0; i < n; ++i) init[i] = 100.0f * initial_value(i);
    rig.set_params(init);
    rig.copy_snapshot();
    const auto values = rig.params();
    auto snap = download(rig.snapshot);
    for (std::size_t i = 0; i < n; ++i) CHECK(same_bits(snap[i], values[i]));

    std::vector<float> shifted(n);
    for (std::size_t i = 0; i < n; ++i) shifted[i] = values[i] + 1.0f;
    rig.set_params(shifted);
    const auto now = rig.params();
    rig.launch(5, trickle::snapshot_copy_body<T>{rig.view(), rig.snapshot.data(), 10});
    sync(ex);
    snap = download(rig.snapshot);
    for (std::size_t i = 0; i < n; ++i) CHECK(same_bits(snap[i], i >= 10 && i < 15 ? now[i] : values[i]));
}

// A bf16 wire: the delta body rounds what it sends to bf16, the update body widens it.
template <class Exec, class T>
void check_bf16_wire(const Exec& ex) {
    using space = typename Exec::memory_space;
    const std::size_t n = 17;
    diloco_rig<Exec, T> rig(ex, n, 0);
    std::vector<float> init(n), moved(n);
    for (std::size_t i = 0; i < n; ++i) init[i] = initial_value(i);
    rig.set_params(init);
    rig.copy_snapshot();
    const auto snap0 = download(rig.snapshot);
    for (std::size_t i = 0; i < n; ++i) moved[i] = init[i] + drift(1, 0, i);
    rig.set_params(moved);
    const auto used = rig.params();

    trickle::buffer<trickle::bfloat16, space> wire(n);
    trickle::for_each_index(ex, n,
                            trickle::outer_delta_body<T, trickle::dense_wire<trickle::bfloat16>>{
                                rig.view(), rig.snapshot.data(), {wire.data()}, 2.0f});
    sync(ex);
    const auto sent = download(wire);
    for (std::size_t i = 0; i < n; ++i)
        CHECK(sent[i].bits == trickle::bfloat16(2.0f * (snap0[i] - used[i])).bits);

    trickle::for_each_index(ex, n,
                            trickle::outer_update_body<T, trickle::outer::average_rule,
                                                       trickle::dense_wire<trickle::bfloat16>>{
                                rig.view(), rig.snapshot.data(), nullptr, {wire.data()}, {}, 0.5f});
    sync(ex);
    const auto snap = download(rig.snapshot);
    for (std::size_t i = 0; i < n; ++i)
        CHECK(same_bits(snap[i], snap0[i] - trickle::to_float(sent[i]) * 0.5f));
}

} // namespace trickle_test
