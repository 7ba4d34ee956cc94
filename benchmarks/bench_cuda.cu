// benchmarks/bench_cuda.cu: the CUDA benchmark suite: the device path's exchange agents and DiLoCo passes, the
// baselines (CUB mask, index arrays), B_copy, and the launch timeline of whole SPARTA steps.
//
// The same case list as bench_host (cases.hpp). Everything trickle does on the device is
// reached through the dispatch functions the engines call (kernels/exchange/dispatch.hpp:
// device_move; kernels/stream/dispatch.hpp: device_stream), with the same
// arguments. Every case is timed with CUDA events around a batch of calls sized to about a
// millisecond (UseManualTime, time per call), so kernels of a few microseconds are not lost
// in launch and event overheads. Parameter memory is counted in 32-byte sectors. Without a
// GPU the binary prints why and exits 77 (ctest: skipped).
#include "bench_flags.hpp"
#include "common.hpp"

#include <trickle/algorithm/flat_params.hpp>
#include <trickle/algorithm/sparta.hpp>
#include <trickle/codec/codecs.hpp>
#include <trickle/codec/reduce.hpp>
#include <trickle/kernels/codec_pass.hpp>
#include <trickle/comm/local_cuda.hpp>
#include <trickle/core/dtype.hpp>
#include <trickle/core/philox.hpp>
#include <trickle/exec/buffer.hpp>
#include <trickle/exec/cuda.hpp>
#include <trickle/kernels/device_exchange.hpp>
#include <trickle/kernels/device_stream.hpp>
#include <trickle/kernels/diloco.hpp>
#include <trickle/kernels/plan.hpp>
#include <trickle/outer/momentum.hpp>
#include <trickle/schedule/schedule.hpp>
#include <trickle/topology/all_reduce.hpp>
#if TRICKLE_HAS_NCCL
#include <trickle/comm/nccl.hpp>
#endif

#include <cub/device/device_select.cuh>
#include <thrust/iterator/counting_iterator.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>
#include <map>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

namespace tb = trickle_bench;
namespace td = trickle::detail;
using trickle::bfloat16;
using trickle::buffer;
using trickle::cuda_space;
using trickle::host_space;

namespace {

constexpr std::size_t sector = 32;
cudaStream_t stream = nullptr;

trickle::exec::cuda on_stream() { return trickle::exec::cuda{stream, -1}; }

// Times `reps` calls of launch() with events on the benchmark stream; seconds per call.
template <class Launch>
double time_batch(int reps, const Launch& launch) {
    cudaEvent_t start, stop;
    TRICKLE_CUDA_CHECK(cudaEventCreate(&start));
    TRICKLE_CUDA_CHECK(cudaEventCreate(&stop));
    TRICKLE_CUDA_CHECK(cudaStreamSynchronize(stream));
    TRICKLE_CUDA_CHECK(cudaEventRecord(start, stream));
    for (int r = 0; r < reps; ++r) launch(r);
    TRICKLE_CUDA_CHECK(cudaEventRecord(stop, stream));
    TRICKLE_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    TRICKLE_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    TRICKLE_CUDA_CHECK(cudaEventDestroy(start));
    TRICKLE_CUDA_CHECK(cudaEventDestroy(stop));
    return static_cast<double>(ms) * 1e-3 / reps;
}

// Calls per timed batch: one for calls of a millisecond or more, enough to fill about a
// millisecond for short ones.
template <class Launch>
int batch_size(const Launch& launch) {
    const double one = time_batch(1, launch); // also the warm-up
    if (one >= 1e-3) return 1;
    return static_cast<int>(std::min(1000.0, std::max(1.0, 1e-3 / std::max(one, 1e-7))));
}

// Runs the benchmark loop: each iteration is one timed batch, reported per call.
template <class Launch, class Account>
void run_timed(benchmark::State& state, const Launch& launch, const Account& account) {
    const int reps = batch_size(launch);
    long long calls = 0;
    for (auto _ : state) {
        const double per_call = time_batch(reps, [&](int r) { launch(static_cast<int>(calls % 1000000) + r); });
        state.SetIterationTime(per_call);
        account(calls);
        calls += reps;
    }
    state.counters["launch_batch"] = reps;
}

int multiprocessors() {
    int sms = 0, device = 0;
    TRICKLE_CUDA_CHECK(cudaGetDevice(&device));
    TRICKLE_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    return sms;
}

// ---------------------------------------------------------------- B_copy

__global__ void copy_kernel(float4* __restrict__ dst, const float4* __restrict__ src, std::size_t n4) {
    const std::size_t stride = static_cast<std::size_t>(blockDim.x) * gridDim.x;
    for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n4; i += stride)
        dst[i] = src[i];
}

std::size_t copy_floats() { return tb::smoke() ? (std::size_t{1} << 16) : (std::size_t{128} << 20); }

void launch_copy(float* dst, const float* src, std::size_t n) {
    copy_kernel<<<multiprocessors() * 8, 256, 0, stream>>>(reinterpret_cast<float4*>(dst),
                                                            reinterpret_cast<const float4*>(src), n / 4);
    TRICKLE_CUDA_CHECK(cudaGetLastError());
}

double b_copy = 0;

// Best of several 512 MB -> 512 MB copies (>= 8x the L2 of an H100 or H200), bytes read + written per second.
double measure_b_copy() {
    const std::size_t n = copy_floats();
    buffer<float, cuda_space> a(n), b(n);
    double best = 0;
    for (int rep = 0; rep < 6; ++rep) {
        const double t = time_batch(1, [&](int) { launch_copy(b.data(), a.data(), n); });
        if (rep > 0) best = std::max(best, 2.0 * static_cast<double>(n) * sizeof(float) / t);
    }
    return best;
}

void bm_copy(benchmark::State& state, bool use_memcpy) {
    const std::size_t n = copy_floats();
    buffer<float, cuda_space> a(n), b(n);
    const double bytes = 2.0 * static_cast<double>(n) * sizeof(float);
    double total = 0;
    run_timed(
        state,
        [&](int) {
            if (use_memcpy)
                TRICKLE_CUDA_CHECK(cudaMemcpyAsync(b.data(), a.data(), n * sizeof(float), cudaMemcpyDeviceToDevice, stream));
            else
                launch_copy(b.data(), a.data(), n);
        },
        [&](long long) { total += bytes; });
    tb::report(state, {total, total}, b_copy);
}

// ---------------------------------------------------------------- models

template <class T>
__global__ void fill_kernel(T* p, std::size_t n) {
    const std::size_t stride = static_cast<std::size_t>(blockDim.x) * gridDim.x;
    for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
        p[i] = trickle::from_float<T>(static_cast<float>(i % 2039) * 0.001f - 1.0f);
}

template <class T>
struct device_model {
    buffer<T, cuda_space> data;
    trickle::param_group<T, cuda_space> group;
    trickle::flat_params<T, cuda_space> flat;
    std::size_t n = 0;
};

template <class T>
device_model<T>& model(int shape) {
    static std::map<int, std::unique_ptr<device_model<T>>> cache;
    auto& slot = cache[shape];
    if (!slot) {
        auto m = std::make_unique<device_model<T>>();
        m->n = tb::model_elements(tb::shapes[shape]);
        m->data = buffer<T, cuda_space>(m->n);
        fill_kernel<T><<<1024, 256, 0, stream>>>(m->data.data(), m->n);
        TRICKLE_CUDA_CHECK(cudaGetLastError());
        TRICKLE_CUDA_CHECK(cudaStreamSynchronize(stream));
        m->group = tb::packed_group<T, cuda_space>(tb::shapes[shape], m->data.data());
        m->flat = trickle::flat_params<T, cuda_space>(m->group);
        slot = std::move(m);
    }
    return *slot;
}

// ---------------------------------------------------------------- baselines

// Baseline (b'): positions read from a precomputed array, moved by trickle's own agent for
// random positions (device_move sends a selection that is not made of runs to the
// thread-per-value agent, as it does uniform, permutation and layerwise).
struct index_selection {
    const std::uint64_t* idx;
    std::size_t size;
    TRICKLE_HOST_DEVICE std::size_t count() const { return size; }
    TRICKLE_HOST_DEVICE std::size_t operator()(std::size_t k) const { return static_cast<std::size_t>(idx[k]); }
};

// Baseline (b): the same array fed to the plainest kernels over the packed base. count
// points to device memory so the mask baseline can pass CUB's result without a host
// synchronization; launches cover `capacity` threads.
template <class T>
__global__ void plain_gather(const T* base, std::size_t n, const std::uint64_t* idx, const std::size_t* count,
                             std::size_t capacity, float* buf) {
    const std::size_t c = *count;
    const std::size_t stride = static_cast<std::size_t>(blockDim.x) * gridDim.x;
    for (std::size_t k = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < c && k < capacity;
         k += stride)
        buf[k] = idx[k] < n ? trickle::to_float(base[idx[k]]) : 0.0f;
}

template <class T>
__global__ void plain_scatter(T* base, std::size_t n, const std::uint64_t* idx, const std::size_t* count,
                              std::size_t capacity, const float* buf, float scale) {
    const std::size_t c = *count;
    const std::size_t stride = static_cast<std::size_t>(blockDim.x) * gridDim.x;
    for (std::size_t k = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < c && k < capacity;
         k += stride)
        if (idx[k] < n) base[idx[k]] = trickle::from_float<T>(buf[k] * scale);
}

unsigned grid_for(std::size_t threads) {
    const std::size_t want = (threads + 255) / 256;
    return static_cast<unsigned>(
        std::max<std::size_t>(1, std::min<std::size_t>(want, static_cast<std::size_t>(multiprocessors()) * 8)));
}

// Baseline (a), the mask approach: a Bernoulli(p) byte per position from Philox (four
// draws per call, as curand_uniform4 and torch do), then CUB's DeviceSelect::Flagged over
// the positions, then the plain gather and scatter of the selected count.
__global__ void bernoulli_mask(std::uint8_t* mask, std::size_t n, std::uint32_t threshold, std::uint64_t stream_id) {
    const std::size_t stride = static_cast<std::size_t>(blockDim.x) * gridDim.x;
    for (std::size_t q = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; q * 4 < n; q += stride) {
        const trickle::u32x4 w = trickle::random_words(tb::seed, stream_id, q);
        for (int j = 0; j < 4 && q * 4 + j < n; ++j) mask[q * 4 + j] = w[j] < threshold;
    }
}

// ---------------------------------------------------------------- exchange cases

// Index generation of a selection that is not made of runs, as the random agent computes
// it (every sel(k), read from the planned selection in device memory), with no parameter
// memory; the store that never happens keeps the compiler from dropping the arithmetic.
template <class Sel>
__global__ void positions_kernel(const Sel* selp, std::size_t count, std::uint64_t* sink) {
    const Sel sel = *selp;
    const std::size_t stride = static_cast<std::size_t>(blockDim.x) * gridDim.x;
    std::uint64_t acc = 0;
    for (std::size_t k = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < count; k += stride)
        acc ^= static_cast<std::uint64_t>(sel(k));
    if (acc == ~std::uint64_t{0}) *sink = acc;
}

// What the gather computes of a run selection's positions before it moves a value: every
// tile's plan (plan_tile, kernels/plan.hpp), from the stored selection, stored as the
// gather stores it. The exchange has no such launch (the gather plans as it goes); this
// one times that part of the gather alone.
template <class T, class Sel>
__global__ void tile_plans_kernel(trickle::flat_view<T> params, const Sel* selp, td::tile_plan* plans,
                                  std::size_t count, std::size_t L, std::size_t tiles) {
    const Sel sel = *selp;
    const std::size_t stride = static_cast<std::size_t>(blockDim.x) * gridDim.x;
    for (std::size_t t = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; t < tiles; t += stride)
        plans[t] = td::plan_tile(params, sel, count, L, t);
}

// Tiles a selection is planned in (kernels/plan.hpp), as sparta_engine sizes its plans.
template <class Sel>
std::size_t tiles_of(const Sel& sel) {
    if constexpr (td::run_selection<Sel>)
        if (td::uses_runs(sel)) return td::tile_count(sel.count(), td::tile_length(sel));
    return 0;
}

// Device memory of `steps` planned exchanges: a selection and a tile table each (the
// engine's device_exchange_state, one per precomputed step).
template <class Sel>
struct planned_steps {
    buffer<Sel, cuda_space> selections;
    buffer<td::tile_plan, cuda_space> plans;
    std::vector<td::device_exchange_state<Sel>> states;

    planned_steps(std::size_t steps, std::size_t max_tiles)
        : selections(steps), plans(std::max<std::size_t>(1, steps * max_tiles)) {
        for (std::size_t t = 0; t < steps; ++t)
            states.push_back({selections.data() + t, plans.data() + t * max_tiles, nullptr});
    }
};

template <class T, class Sampler>
struct exchange_data {
    using selection_type = decltype(std::declval<Sampler&>().select(std::declval<const trickle::sampler_context&>()));
    std::vector<selection_type> sels;   // device layout, one per step
    std::vector<selection_type> twins;  // the same over the host layout, for the byte model and the index arrays
    std::vector<std::size_t> counts;
    std::vector<tb::traffic> pass;      // one gather or scatter pass of each step
    std::unique_ptr<planned_steps<selection_type>> planned;
    // Baselines, built on first use.
    std::vector<buffer<std::uint64_t, cuda_space>> idx;
    std::vector<index_selection> isels;
    std::unique_ptr<planned_steps<index_selection>> iplanned;
    buffer<float, cuda_space> buf;
    buffer<std::size_t, cuda_space> count_dev; // one count per selection, for the plain kernels
    buffer<std::uint64_t, cuda_space> sink;
};

struct case_cache {
    std::string key;
    std::shared_ptr<void> data;
};
case_cache last_case;

// One case's selections, byte model and planned device state, shared by the ops of a
// sampler, dtype, fraction and group (they are registered one after another).
template <class T, class Sampler>
exchange_data<T, Sampler>& prepare(const tb::exchange_case& c, Sampler sampler) {
    const std::string key = c.sampler.name() + "/" + tb::dtype_name(c.dtype) + "/" + tb::fraction_name(c.fraction) +
                            "/" + tb::shapes[c.shape].name;
    if (last_case.key != key) {
        last_case = {};
        auto d = std::make_shared<exchange_data<T, Sampler>>();
        device_model<T>& m = model<T>(c.shape);
        const std::size_t first =
            std::max<std::size_t>(1, static_cast<std::size_t>(c.fraction * static_cast<double>(m.n)));
        const std::size_t steps = tb::step_cycle(first);
        d->sels = tb::make_selections(sampler, m.flat.layout(), m.flat.host_layout(), c.fraction, steps);
        d->twins = tb::make_selections(sampler, m.flat.host_layout(), m.flat.host_layout(), c.fraction, steps);
        std::size_t max_count = 0, max_tiles = 0;
        for (std::size_t t = 0; t < steps; ++t) {
            const std::vector<std::uint64_t> pos = tb::positions_of(d->twins[t]);
            const double units = static_cast<double>(tb::distinct_units(pos, m.n, sizeof(T), sector));
            const double cnt = static_cast<double>(pos.size());
            d->pass.push_back({units * sector + cnt * sizeof(float), cnt * (sizeof(T) + sizeof(float))});
            d->counts.push_back(pos.size());
            max_count = std::max(max_count, pos.size());
            max_tiles = std::max(max_tiles, tiles_of(d->sels[t]));
        }
        // Every step gathered once, which stores its selection (the one the host chose for
        // that step, kept) and tile plans as exchange_cuda's gather does: a scatter case
        // then finds what its gather left. A gather case re-plans every call, as the engine's.
        d->planned = std::make_unique<planned_steps<typename exchange_data<T, Sampler>::selection_type>>(steps, max_tiles);
        d->buf = buffer<float, cuda_space>(std::max<std::size_t>(1, max_count));
        TRICKLE_CUDA_CHECK(cudaMemsetAsync(d->buf.data(), 0, d->buf.size() * sizeof(float), stream));
        for (std::size_t t = 0; t < steps; ++t)
            td::device_move<true>(on_stream(), m.flat.view(), d->sels[t], d->planned->states[t], d->buf.data(), 1.0f);
        d->count_dev = buffer<std::size_t, cuda_space>(d->counts.size());
        trickle::copy_elements<cuda_space, host_space>(d->count_dev.data(), d->counts.data(), d->counts.size());
        d->sink = buffer<std::uint64_t, cuda_space>(1);
        TRICKLE_CUDA_CHECK(cudaStreamSynchronize(stream));
        last_case = {key, d};
    }
    auto& d = *static_cast<exchange_data<T, Sampler>*>(last_case.data.get());
    const bool need_idx = c.op == tb::exchange_op::index_plain || c.op == tb::exchange_op::index_kernel;
    if (need_idx && d.idx.empty()) {
        const std::size_t steps = d.twins.size();
        for (std::size_t t = 0; t < steps; ++t) {
            const std::vector<std::uint64_t> pos = tb::positions_of(d.twins[t]);
            buffer<std::uint64_t, cuda_space> b(std::max<std::size_t>(1, pos.size()));
            trickle::copy_elements<cuda_space, host_space>(b.data(), pos.data(), pos.size());
            d.isels.push_back(index_selection{b.data(), pos.size()});
            d.idx.push_back(std::move(b));
        }
        d.iplanned = std::make_unique<planned_steps<index_selection>>(steps, 0);
    }
    return d;
}

template <class T, class Sampler>
void bm_exchange(benchmark::State& state, const tb::exchange_case c, Sampler sampler) {
    using tb::exchange_op;
    auto& d = prepare<T>(c, sampler);
    device_model<T>& m = model<T>(c.shape);
    const trickle::flat_view<T> view = m.flat.view();
    const trickle::exec::cuda ex = on_stream();
    const std::size_t steps = d.sels.size();
    float* buf = d.buf.data();
    auto launch = [&](int call) {
        const std::size_t t = static_cast<std::size_t>(call) % steps;
        const auto& sel = d.sels[t];
        const auto& st = d.planned->states[t];
        switch (c.op) {
        case exchange_op::gather: td::device_move<true>(ex, view, sel, st, buf, 1.0f); break;
        case exchange_op::scatter: td::device_move<false>(ex, view, sel, st, buf, 1.0f); break;
        case exchange_op::fused: // exchange_cuda without the communication
            td::device_move<true>(ex, view, sel, st, buf, 1.0f);
            td::device_move<false>(ex, view, sel, st, buf, 1.0f);
            break;
        case exchange_op::indices: // what the device path computes of the positions
            if (td::uses_runs(sel)) { // run starts and segments per tile
                if constexpr (td::run_selection<std::remove_cvref_t<decltype(sel)>>) {
                    const std::size_t tiles = tiles_of(sel);
                    tile_plans_kernel<T><<<grid_for(tiles), 256, 0, stream>>>(view, st.selection, st.plans,
                                                                               sel.count(), td::tile_length(sel), tiles);
                    TRICKLE_CUDA_CHECK(cudaGetLastError());
                }
            } else {
                positions_kernel<<<grid_for(d.counts[t]), 256, 0, stream>>>(st.selection, d.counts[t], d.sink.data());
                TRICKLE_CUDA_CHECK(cudaGetLastError());
            }
            break;
        case exchange_op::index_kernel: {
            const index_selection& isel = d.isels[t];
            const auto& ist = d.iplanned->states[t];
            td::device_move<true>(ex, view, isel, ist, buf, 1.0f);
            td::device_move<false>(ex, view, isel, ist, buf, 1.0f);
            break;
        }
        case exchange_op::index_plain: {
            const std::size_t cnt = d.counts[t];
            plain_gather<T><<<grid_for(cnt), 256, 0, stream>>>(m.data.data(), m.n, d.idx[t].data(),
                                                                d.count_dev.data() + t, cnt, buf);
            plain_scatter<T><<<grid_for(cnt), 256, 0, stream>>>(m.data.data(), m.n, d.idx[t].data(),
                                                                 d.count_dev.data() + t, cnt, buf, 1.0f);
            TRICKLE_CUDA_CHECK(cudaGetLastError());
            break;
        }
        case exchange_op::mask: break; // bm_mask
        }
    };
    // One iteration stands for one call: bytes are the mean over the batch's calls, each
    // from the selection it used.
    tb::traffic total;
    const int reps = batch_size(launch);
    long long calls = 0;
    for (auto _ : state) {
        const double per_call = time_batch(reps, [&](int r) { launch(static_cast<int>((calls + r) % 1000000)); });
        state.SetIterationTime(per_call);
        tb::traffic batch;
        for (int r = 0; r < reps; ++r) {
            if (c.op == exchange_op::indices) continue;
            const std::size_t t = static_cast<std::size_t>((calls + r) % 1000000) % steps;
            const tb::traffic& pass = d.pass[t];
            const double idx_bytes = static_cast<double>(d.counts[t]) * 8;
            const bool index_case = c.op == exchange_op::index_kernel || c.op == exchange_op::index_plain;
            const double passes = c.op == exchange_op::gather || c.op == exchange_op::scatter ? 1 : 2;
            batch.moved += passes * (pass.moved + (index_case ? idx_bytes : 0));
            batch.useful += passes * pass.useful;
        }
        total.moved += batch.moved / reps;
        total.useful += batch.useful / reps;
        calls += reps;
    }
    state.counters["launch_batch"] = reps;
    tb::report(state, total, b_copy);
    if (c.op == exchange_op::indices)
        state.counters["indices_per_second"] =
            benchmark::Counter(static_cast<double>(d.counts[0]), benchmark::Counter::kIsIterationInvariantRate);
}

template <class T>
void bm_mask(benchmark::State& state, const tb::exchange_case c) {
    device_model<T>& m = model<T>(c.shape);
    const std::size_t n = m.n;
    const std::size_t cap = std::min(n, static_cast<std::size_t>(2.0 * c.fraction * static_cast<double>(n)) + 4096);
    buffer<std::uint8_t, cuda_space> mask(n);
    // Flagged writes at most the number of set flags; a draw above cap is not expected
    // (2pn + 4096), but the output is sized n so it could never overflow.
    buffer<std::uint64_t, cuda_space> idx(n);
    buffer<float, cuda_space> buf(cap);
    buffer<std::size_t, cuda_space> count(1);
    const auto threshold = static_cast<std::uint32_t>(c.fraction * 4294967296.0);
    const thrust::counting_iterator<std::uint64_t> positions(0);
    std::size_t temp_bytes = 0;
    TRICKLE_CUDA_CHECK(cub::DeviceSelect::Flagged(nullptr, temp_bytes, positions, mask.data(), idx.data(),
                                                  count.data(), static_cast<std::int64_t>(n), stream));
    buffer<unsigned char, cuda_space> temp(std::max<std::size_t>(temp_bytes, 1));
    auto launch = [&](int call) {
        bernoulli_mask<<<grid_for((n + 3) / 4), 256, 0, stream>>>(mask.data(), n, threshold,
                                                                  static_cast<std::uint64_t>(call));
        TRICKLE_CUDA_CHECK(cudaGetLastError());
        std::size_t tb_bytes = temp_bytes;
        TRICKLE_CUDA_CHECK(cub::DeviceSelect::Flagged(temp.data(), tb_bytes, positions, mask.data(), idx.data(),
                                                      count.data(), static_cast<std::int64_t>(n), stream));
        plain_gather<T><<<grid_for(cap), 256, 0, stream>>>(m.data.data(), n, idx.data(), count.data(), cap, buf.data());
        plain_scatter<T><<<grid_for(cap), 256, 0, stream>>>(m.data.data(), n, idx.data(), count.data(), cap,
                                                             buf.data(), 1.0f);
        TRICKLE_CUDA_CHECK(cudaGetLastError());
    };
    // Bytes of one call from the draw of call 0: mask written, mask read, indices written,
    // then each pass reads the indices and moves the sectors and the wire values.
    launch(0);
    TRICKLE_CUDA_CHECK(cudaStreamSynchronize(stream));
    std::size_t c0 = 0;
    trickle::copy_elements<host_space, cuda_space>(&c0, count.data(), 1);
    c0 = std::min(c0, cap);
    std::vector<std::uint64_t> pos(c0);
    trickle::copy_elements<host_space, cuda_space>(pos.data(), idx.data(), c0);
    const double units = static_cast<double>(tb::distinct_units(pos, n, sizeof(T), sector));
    const double cnt = static_cast<double>(c0);
    const tb::traffic one{2.0 * static_cast<double>(n) + cnt * 8 + 2 * (units * sector + cnt * 4 + cnt * 8),
                          2 * cnt * (sizeof(T) + sizeof(float))};
    tb::traffic total;
    run_timed(state, launch, [&](long long) {
        total.moved += one.moved;
        total.useful += one.useful;
    });
    tb::report(state, total, b_copy);
}

// ---------------------------------------------------------------- DiLoCo

// The passes over the whole group. delta and update_nesterov are the shared cases
// (cases.hpp); snapshot (start of a run) and restore (after the initial broadcast) are
// the other two pieces of device_stream, registered here only.
enum class pass_op { delta, update_nesterov, snapshot, restore };

struct pass_case {
    pass_op op;
    tb::dtype_id dtype;
    int shape;
    std::string name() const {
        static const char* names[] = {"delta", "update_nesterov", "snapshot", "restore"};
        return std::string("diloco/") + names[static_cast<int>(op)] + "/" + tb::dtype_name(dtype) + "/" +
               tb::shapes[shape].name;
    }
    // Bytes per element, all contiguous: delta and update as cases.hpp counts them;
    // snapshot reads params and writes fp32, restore reads fp32 and writes params.
    std::size_t bytes_per_element() const {
        switch (op) {
        case pass_op::delta: return tb::diloco_case{tb::diloco_op::delta, dtype, shape}.bytes_per_element();
        case pass_op::update_nesterov:
            return tb::diloco_case{tb::diloco_op::update_nesterov, dtype, shape}.bytes_per_element();
        case pass_op::snapshot:
        case pass_op::restore: return 4 + tb::dtype_bytes(dtype);
        }
        return 0;
    }
};

template <class T>
void bm_diloco(benchmark::State& state, const pass_case c) {
    device_model<T>& m = model<T>(c.shape);
    const std::size_t n = m.n;
    buffer<float, cuda_space> snapshot(n), momentum(n), wire(n + 1);
    TRICKLE_CUDA_CHECK(cudaMemsetAsync(snapshot.data(), 0, n * sizeof(float), stream));
    TRICKLE_CUDA_CHECK(cudaMemsetAsync(momentum.data(), 0, n * sizeof(float), stream));
    TRICKLE_CUDA_CHECK(cudaMemsetAsync(wire.data(), 0, n * sizeof(float), stream));
    const float one = 1.0f;
    trickle::copy_elements<cuda_space, host_space>(wire.data() + n, &one, 1); // the weight sum
    // The tile -> segment table, built once per group as diloco_engine builds it.
    const std::vector<std::uint32_t> tiles = td::tile_segments(m.flat.host_view());
    buffer<std::uint32_t, cuda_space> tile_seg(tiles.size());
    trickle::copy_elements<cuda_space, host_space>(tile_seg.data(), tiles.data(), tiles.size());
    const auto rule = trickle::outer::nesterov{}.prepare(1);
    using rule_type = std::remove_cvref_t<decltype(rule)>;
    const trickle::exec::cuda ex = on_stream();
    const trickle::flat_view<T> view = m.flat.view();
    const trickle::outer_delta_body<T> delta{view, snapshot.data(), trickle::dense_wire<float>{wire.data()}, 1.0f,
                                             wire.data() + n, 0};
    const trickle::outer_update_body<T, rule_type> update{view, snapshot.data(), momentum.data(),
                                                          trickle::dense_wire<float>{wire.data()}, rule, 1.0f,
                                                          wire.data() + n, 0};
    const double bytes = static_cast<double>(n * c.bytes_per_element());
    double total = 0;
    run_timed(
        state,
        [&](int) { // as diloco_engine launches them (start_cuda, outer_step_cuda)
            switch (c.op) {
            case pass_op::delta: td::device_stream(ex, view, tile_seg.data(), 0, n, td::delta_piece<T>{delta}); break;
            case pass_op::update_nesterov:
                td::device_stream(ex, view, tile_seg.data(), 0, n, td::update_piece<T, rule_type>{update});
                break;
            case pass_op::snapshot:
                td::device_stream(ex, view, tile_seg.data(), 0, n, td::snapshot_piece<T>{snapshot.data()});
                break;
            case pass_op::restore:
                td::device_stream(ex, view, tile_seg.data(), 0, n, td::restore_piece<T>{snapshot.data()});
                break;
            }
        },
        [&](long long) { total += bytes; });
    tb::report(state, {total, total}, b_copy);
}

// ---------------------------------------------------------------- launch timeline of a SPARTA step

// A communicator of one rank for cuda_space: comm::nccl over ncclCommInitAll on device 0
// where NCCL is built in, comm::local_cuda (a world of one) otherwise.
#if TRICKLE_HAS_NCCL
using step_comm_type = trickle::comm::nccl;
constexpr const char* step_comm_name = "comm::nccl, one rank (ncclCommInitAll on device 0)";

struct step_comm_holder {
    ncclComm_t handle = nullptr;
    std::unique_ptr<trickle::comm::nccl> comm;
    step_comm_holder() {
        int dev = 0;
        TRICKLE_NCCL_CHECK(ncclCommInitAll(&handle, 1, &dev));
        comm = std::make_unique<trickle::comm::nccl>(handle, stream);
    }
    ~step_comm_holder() {
        comm.reset();
        if (handle != nullptr) (void)ncclCommDestroy(handle);
    }
};
#else
using step_comm_type = trickle::comm::local_cuda;
constexpr const char* step_comm_name = "comm::local_cuda, a world of one rank (NCCL not built in)";

struct step_comm_holder {
    std::unique_ptr<trickle::comm::local_cuda_world> world;
    std::unique_ptr<trickle::comm::local_cuda> comm;
    step_comm_holder() {
        world = std::make_unique<trickle::comm::local_cuda_world>(1, 0);
        comm = std::make_unique<trickle::comm::local_cuda>(world->rank(0, stream));
    }
};
#endif

std::unique_ptr<step_comm_holder> step_comm;

step_comm_type& one_rank_comm() {
    if (!step_comm) step_comm = std::make_unique<step_comm_holder>();
    return *step_comm->comm;
}

// What one captured step holds, by node type (kernels = -1: not captured).
struct step_graph {
    int kernels = -1;
    int copies = 0;
    int others = 0;
    std::string why;
};

// Captures one step into a CUDA graph and counts its nodes: the launches a step makes,
// read off the step itself rather than off the design. Only a replayable engine can be
// captured (see sparta::step); the captured step is then launched once, so the device's
// step counter stays level with the host's.
template <class Engine>
step_graph capture_step(Engine& engine, const trickle::exec::cuda& ex) {
    step_graph out;
    if (!engine.replayable()) {
        out.why = "not replayable";
        return out;
    }
    engine.step(ex); // first: lazy set-up (occupancy queries, the communicator's) stays out of the graph
    TRICKLE_CUDA_CHECK(cudaStreamSynchronize(stream));
    cudaGraph_t graph = nullptr;
    if (cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed) != cudaSuccess) {
        (void)cudaGetLastError();
        out.why = "cudaStreamBeginCapture failed";
        return out;
    }
    try {
        engine.step(ex);
    } catch (const std::exception& e) {
        out.why = e.what();
    }
    const cudaError_t end = cudaStreamEndCapture(stream, &graph);
    if (end != cudaSuccess || graph == nullptr || !out.why.empty()) {
        (void)cudaGetLastError();
        if (graph != nullptr) (void)cudaGraphDestroy(graph);
        if (out.why.empty()) out.why = cudaGetErrorString(end);
        return out;
    }
    std::size_t count = 0;
    TRICKLE_CUDA_CHECK(cudaGraphGetNodes(graph, nullptr, &count));
    std::vector<cudaGraphNode_t> nodes(count);
    TRICKLE_CUDA_CHECK(cudaGraphGetNodes(graph, nodes.data(), &count));
    out.kernels = 0;
    for (cudaGraphNode_t node : nodes) {
        cudaGraphNodeType type{};
        TRICKLE_CUDA_CHECK(cudaGraphNodeGetType(node, &type));
        if (type == cudaGraphNodeTypeKernel)
            ++out.kernels;
        else if (type == cudaGraphNodeTypeMemcpy || type == cudaGraphNodeTypeMemset)
            ++out.copies;
        else
            ++out.others;
    }
    cudaGraphExec_t exec = nullptr;
    TRICKLE_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    TRICKLE_CUDA_CHECK(cudaGraphLaunch(exec, stream));
    TRICKLE_CUDA_CHECK(cudaStreamSynchronize(stream));
    TRICKLE_CUDA_CHECK(cudaGraphExecDestroy(exec));
    TRICKLE_CUDA_CHECK(cudaGraphDestroy(graph));
    return out;
}

struct timeline_case {
    tb::sampler_case sampler;
    tb::dtype_id dtype;
    double fraction;
    int shape;
    std::string name() const {
        return "timeline/sparta_step/" + sampler.name() + "/" + tb::dtype_name(dtype) + "/" + tb::fraction_name(fraction) +
               "/" + tb::shapes[shape].name;
    }
};

// Whole SPARTA steps of a sparta_engine on exec::cuda over a one-rank communicator, as a
// trainer calls them: events around a batch of step() calls give the device time per step,
// a host clock around the same calls the host time per step() call. A step enqueues the
// plan, gather and scatter kernels and one communication call and returns; when the host
// time per call is below the device time and the device is still busy when the last call
// returns, the host did not wait for the device.
template <class T, class Sampler>
void bm_timeline(benchmark::State& state, const timeline_case c, Sampler sampler) {
    device_model<T>& m = model<T>(c.shape);
    using engine_type = trickle::sparta_engine<Sampler, trickle::schedule::constant, trickle::topology::all_reduce, T,
                                               cuda_space, step_comm_type>;
    const trickle::exec::cuda ex = on_stream();
    std::unique_ptr<engine_type> owned;
    step_graph graph;
    try {
        owned = std::make_unique<engine_type>(m.group, one_rank_comm(), trickle::sparta_options{c.fraction, 1, tb::seed},
                                              sampler);
        graph = capture_step(*owned, ex);
    } catch (const std::exception& e) {
        state.SkipWithError((std::string("no one-rank SPARTA engine: ") + e.what()).c_str());
        return;
    }
    engine_type& engine = *owned;

    cudaEvent_t start, stop;
    TRICKLE_CUDA_CHECK(cudaEventCreate(&start));
    TRICKLE_CUDA_CHECK(cudaEventCreate(&stop));
    struct batch_result {
        double device = 0, host = 0;
        bool busy = false;
    };
    auto run_batch = [&](int reps) {
        TRICKLE_CUDA_CHECK(cudaStreamSynchronize(stream));
        TRICKLE_CUDA_CHECK(cudaEventRecord(start, stream));
        const auto h0 = std::chrono::steady_clock::now();
        for (int r = 0; r < reps; ++r) engine.step(ex);
        const auto h1 = std::chrono::steady_clock::now();
        TRICKLE_CUDA_CHECK(cudaEventRecord(stop, stream));
        const cudaError_t q = cudaEventQuery(stop);
        if (q != cudaErrorNotReady) TRICKLE_CUDA_CHECK(q);
        TRICKLE_CUDA_CHECK(cudaEventSynchronize(stop));
        float ms = 0;
        TRICKLE_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
        return batch_result{static_cast<double>(ms) * 1e-3 / reps,
                            std::chrono::duration<double>(h1 - h0).count() / reps, q == cudaErrorNotReady};
    };
    const batch_result first = run_batch(1); // warm-up, and the batch size
    const int reps = first.device >= 1e-3
                         ? 1
                         : static_cast<int>(std::min(1000.0, std::max(1.0, 1e-3 / std::max(first.device, 1e-7))));
    double host = 0, device = 0, busy = 0, iterations = 0;
    const std::uint64_t exchanges0 = engine.stats().exchanges;
    const std::uint64_t calls0 = engine.stats().total.calls;
    const std::uint64_t values0 = engine.stats().values;
    for (auto _ : state) {
        const batch_result b = run_batch(reps);
        state.SetIterationTime(b.device);
        host += b.host;
        device += b.device;
        busy += b.busy ? 1 : 0;
        iterations += 1;
    }
    TRICKLE_CUDA_CHECK(cudaEventDestroy(start));
    TRICKLE_CUDA_CHECK(cudaEventDestroy(stop));
    const double steps = static_cast<double>(engine.stats().exchanges - exchanges0);
    const double per = iterations > 0 ? 1.0 / iterations : 0.0;
    state.counters["launch_batch"] = reps;
    state.counters["host_us_per_step"] = host * per * 1e6;
    state.counters["device_us_per_step"] = device * per * 1e6;
    state.counters["host_over_device"] = device > 0 ? host / device : 0.0;
    // Share of timed batches whose last step() returned while the device was still busy.
    state.counters["device_busy_at_return"] = busy * per;
    // By design (kernels/exchange/dispatch.hpp): one gather (which plans), one scatter.
    state.counters["kernels_per_step_design"] = 2;
    // Counted in a captured step (all its kernel nodes, the communicator's included); -1
    // where the step could not be captured.
    state.counters["kernels_per_step_graph"] = graph.kernels;
    state.counters["copy_nodes_per_step_graph"] = graph.kernels < 0 ? -1 : graph.copies;
    state.counters["comm_calls_per_step"] =
        steps > 0 ? static_cast<double>(engine.stats().total.calls - calls0) / steps : 0.0;
    const double values = static_cast<double>(engine.stats().values - values0);
    state.counters["useful_bytes_per_second"] =
        benchmark::Counter(values * 2 * static_cast<double>(sizeof(T) + sizeof(float)), benchmark::Counter::kIsRate);
    if (graph.kernels < 0) state.SetLabel("not captured: " + graph.why);
}

// ---------------------------------------------------------------- codecs
// The device codec passes of the encoded all-reduce (codec/reduce.hpp's encode_slots_pass
// and decode_slots_pass: a group of lanes per block for the block-scaled codecs, a thread
// per value for the others) over 16M values laid out for 4 workers: the encode pass (fp32
// values read, codes written) and the decode pass (codes read, fp32 written), each alone,
// as a share of B_copy. Bytes moved: 4 n + wire_bytes(n).

std::size_t codec_values() { return tb::smoke() ? (std::size_t{1} << 16) : (std::size_t{16} << 20); }

using trickle::slot_layout;
namespace codec = trickle::codec;
namespace exec = trickle::exec;

template <class C>
void bm_codec(benchmark::State& state, C c, bool encode) {
    const std::size_t n = codec_values();
    const int ranks = 4;
    const std::size_t B = c.block_values();
    const std::size_t blocks = (n + B - 1) / B;
    std::size_t E = 0;
    for (int r = 0; r < ranks; ++r) {
        const std::size_t nb = trickle::detail::chunk_size(blocks, ranks, r);
        E = std::max(E, c.wire_bytes(std::min(nb * B, n)));
    }
    const slot_layout at{n, B, blocks, E, ranks};
    buffer<float, cuda_space> values(n);
    buffer<std::byte, cuda_space> slots(static_cast<std::size_t>(ranks) * E);
    fill_kernel<float><<<1024, 256, 0, stream>>>(values.data(), n);
    TRICKLE_CUDA_CHECK(cudaGetLastError());
    const double bytes = 4.0 * static_cast<double>(n) + static_cast<double>(c.wire_bytes(n));
    double total = 0;
    run_timed(
        state,
        [&](int) {
            if (encode)
                codec::detail::encode_slots_pass(exec::cuda{stream, 0}, c, at, trickle::array_source{values.data()},
                                                 nullptr, 0.0f, slots.data(), trickle::nearest_words{});
            else
                codec::detail::decode_slots_pass(exec::cuda{stream, 0}, c, at, slots.data(),
                                                 trickle::array_sink{values.data()});
        },
        [&](long long) { total += bytes; });
    tb::report(state, {total, total}, b_copy);
}

// ---------------------------------------------------------------- registration

template <class T>
void register_exchange(const tb::exchange_case& c) {
    if (c.op == tb::exchange_op::mask) {
        benchmark::RegisterBenchmark(c.name().c_str(), bm_mask<T>, c)->UseManualTime()->Unit(benchmark::kMicrosecond);
        return;
    }
    tb::with_sampler(c.sampler, [&](auto sampler) {
        benchmark::RegisterBenchmark(c.name().c_str(), bm_exchange<T, decltype(sampler)>, c, sampler)
            ->UseManualTime()
            ->Unit(benchmark::kMicrosecond);
    });
}

template <class T>
void register_timeline(const timeline_case& c) {
    tb::with_sampler(c.sampler, [&](auto sampler) {
        benchmark::RegisterBenchmark(c.name().c_str(), bm_timeline<T, decltype(sampler)>, c, sampler)
            ->UseManualTime()
            ->Unit(benchmark::kMicrosecond);
    });
}

void register_all() {
    benchmark::RegisterBenchmark("copy/kernel/512MB", bm_copy, false)->UseManualTime()->Unit(benchmark::kMicrosecond);
    benchmark::RegisterBenchmark("copy/memcpy/512MB", bm_copy, true)->UseManualTime()->Unit(benchmark::kMicrosecond);
    const auto codec_case = [](const char* name, auto c) {
        for (const bool encode : {true, false})
            benchmark::RegisterBenchmark((std::string("codec/") + (encode ? "encode/" : "decode/") + name + "/16M").c_str(),
                                         bm_codec<decltype(c)>, c, encode)
                ->UseManualTime()
                ->Unit(benchmark::kMicrosecond);
    };
    codec_case("bf16", codec::bf16{});
    codec_case("fp8_e4m3", codec::fp8_e4m3{});
    codec_case("fp8_block64", codec::fp8_block{});
    codec_case("int8_block64", codec::int8_block{});
    codec_case("int4_block64", codec::int4_block{});
    codec_case("sign2_block64", codec::sign2_block{});
    for (const tb::exchange_case& c : tb::exchange_cases(true)) {
        if (c.dtype == tb::dtype_id::fp32)
            register_exchange<float>(c);
        else
            register_exchange<bfloat16>(c);
    }
    for (const tb::diloco_case& dc : tb::diloco_cases(true)) {
        const pass_op op = dc.op == tb::diloco_op::delta ? pass_op::delta : pass_op::update_nesterov;
        std::vector<pass_case> cases{{op, dc.dtype, dc.shape}};
        if (dc.op == tb::diloco_op::update_nesterov) // the other two pieces, after the shared ones
            cases.insert(cases.end(), {{pass_op::snapshot, dc.dtype, dc.shape}, {pass_op::restore, dc.dtype, dc.shape}});
        for (const pass_case& c : cases) {
            if (c.dtype == tb::dtype_id::fp32)
                benchmark::RegisterBenchmark(c.name().c_str(), bm_diloco<float>, c)
                    ->UseManualTime()
                    ->Unit(benchmark::kMicrosecond);
            else
                benchmark::RegisterBenchmark(c.name().c_str(), bm_diloco<bfloat16>, c)
                    ->UseManualTime()
                    ->Unit(benchmark::kMicrosecond);
        }
    }
    // Whole steps: the samplers that re-key on the device (so a step is also captured and
    // its launches counted) at a short and a long block, fp32 and bf16, p = 0.5%.
    for (int s = 0; s < tb::shape_count; ++s) {
        if (!tb::shapes[s].cuda) continue;
        for (tb::dtype_id d : tb::dtypes)
            for (const tb::sampler_case& sc : {tb::sampler_case{tb::sampler_id::uniform, 0},
                                               tb::sampler_case{tb::sampler_id::block, 256},
                                               tb::sampler_case{tb::sampler_id::block, 4096}}) {
                const timeline_case c{sc, d, 0.005, s};
                if (d == tb::dtype_id::fp32)
                    register_timeline<float>(c);
                else
                    register_timeline<bfloat16>(c);
            }
    }
}

} // namespace

int main(int argc, char** argv) {
    int devices = 0;
    const cudaError_t rc = cudaGetDeviceCount(&devices);
    if (rc != cudaSuccess || devices == 0) {
        std::printf("SKIPPED: no CUDA device on this machine (%s); bench_cuda was compiled but not run\n",
                    rc != cudaSuccess ? cudaGetErrorString(rc) : "0 devices");
        return 77;
    }
    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
    TRICKLE_CUDA_CHECK(cudaSetDevice(0));
    TRICKLE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    b_copy = measure_b_copy();
    cudaDeviceProp prop{};
    TRICKLE_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    char text[64];
    std::snprintf(text, sizeof text, "%.6g", b_copy);
    benchmark::AddCustomContext("B_copy_bytes_per_second", text);
    benchmark::AddCustomContext("B_copy_kind", "float4 grid-stride copy kernel, 512 MB -> 512 MB, best of 5");
    benchmark::AddCustomContext("device", prop.name);
    benchmark::AddCustomContext("multiprocessors", std::to_string(prop.multiProcessorCount));
    benchmark::AddCustomContext("compute_capability", std::to_string(prop.major) + "." + std::to_string(prop.minor));
    benchmark::AddCustomContext("l2_bytes", std::to_string(prop.l2CacheSize));
    benchmark::AddCustomContext("timeline_comm", step_comm_name);
    benchmark::AddCustomContext("compiler", "nvcc " + std::to_string(__CUDACC_VER_MAJOR__) + "." +
                                                std::to_string(__CUDACC_VER_MINOR__) + " with " + tb::compiler_string());
    benchmark::AddCustomContext("flags", TRICKLE_BENCH_CUDA_FLAGS);
    benchmark::AddCustomContext("smoke", tb::smoke() ? "yes" : "no");
    std::fprintf(stderr, "B_copy = %.1f GB/s on %s\n", b_copy / 1e9, prop.name);
    register_all();
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    last_case = {};
    step_comm.reset();
    TRICKLE_CUDA_CHECK(cudaStreamSynchronize(stream));
    TRICKLE_CUDA_CHECK(cudaStreamDestroy(stream));
    return 0;
}
