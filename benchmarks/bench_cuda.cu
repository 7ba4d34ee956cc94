// benchmarks/bench_cuda.cu: the CUDA benchmark suite: exchange kernels, baselines (CUB mask, index arrays), DiLoCo outer step, and B_copy.
//
// The same case list as bench_host (cases.hpp). Every case is timed with CUDA events
// around a batch of launches (UseManualTime, time per exchange), so kernels of a few
// microseconds are not lost in launch and event overheads. Parameter memory is counted in
// 32-byte sectors. Without a GPU the binary prints why and exits 77 (ctest: skipped).
#include "bench_flags.hpp"
#include "common.hpp"

#include <trickle/algorithm/diloco.hpp>
#include <trickle/algorithm/flat_params.hpp>
#include <trickle/core/dtype.hpp>
#include <trickle/core/philox.hpp>
#include <trickle/exec/buffer.hpp>
#include <trickle/exec/cuda.hpp>
#include <trickle/kernels/diloco.hpp>
#include <trickle/outer/momentum.hpp>

#include <cub/device/device_select.cuh>
#include <thrust/iterator/counting_iterator.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

namespace tb = trickle_bench;
using trickle::bfloat16;
using trickle::buffer;
using trickle::cuda_space;
using trickle::host_space;

namespace {

constexpr std::size_t sector = 32;
cudaStream_t stream = nullptr;

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

// Launches per timed batch: one for kernels of a millisecond or more, enough to fill
// about a millisecond for short ones.
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

// ---------------------------------------------------------------- B_copy

__global__ void copy_kernel(float4* __restrict__ dst, const float4* __restrict__ src, std::size_t n4) {
    const std::size_t stride = static_cast<std::size_t>(blockDim.x) * gridDim.x;
    for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n4; i += stride)
        dst[i] = src[i];
}

std::size_t copy_floats() { return tb::smoke() ? (std::size_t{1} << 16) : (std::size_t{128} << 20); }

void launch_copy(float* dst, const float* src, std::size_t n) {
    int sms = 0, device = 0;
    TRICKLE_CUDA_CHECK(cudaGetDevice(&device));
    TRICKLE_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    copy_kernel<<<sms * 8, 256, 0, stream>>>(reinterpret_cast<float4*>(dst), reinterpret_cast<const float4*>(src), n / 4);
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

// Baseline (b): positions read from a precomputed array by the same range kernels.
struct index_selection {
    const std::uint64_t* idx;
    std::size_t size;
    TRICKLE_HOST_DEVICE std::size_t count() const { return size; }
    TRICKLE_HOST_DEVICE std::size_t operator()(std::size_t k) const { return static_cast<std::size_t>(idx[k]); }
};

// ... and by the plainest kernels over the packed base. count points to device memory so
// the mask baseline can pass CUB's result without a host synchronization; launches cover
// `capacity` threads.
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
    int sms = 0, device = 0;
    TRICKLE_CUDA_CHECK(cudaGetDevice(&device));
    TRICKLE_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    const std::size_t want = (threads + 255) / 256;
    return static_cast<unsigned>(std::max<std::size_t>(1, std::min<std::size_t>(want, static_cast<std::size_t>(sms) * 8)));
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

template <class Sel>
struct indices_body {
    Sel sel;
    std::size_t count;
    std::size_t range;
    std::uint64_t* sink;
    TRICKLE_HOST_DEVICE std::size_t calls() const { return (count + range - 1) / range; }
    // The position arithmetic of the range kernels with no parameter memory; the store
    // that never happens keeps the compiler from dropping it.
    TRICKLE_HOST_DEVICE void operator()(std::size_t c) const {
        const std::size_t k0 = c * range;
        const std::size_t k1 = count - k0 < range ? count : k0 + range;
        std::uint64_t acc = 0;
        if (trickle::detail::uses_runs(sel)) {
            if constexpr (trickle::detail::run_selection<Sel>)
                for (std::size_t k = k0; k < k1;) {
                    const auto r = sel.run_at(k);
                    acc ^= r.pos;
                    k += r.len;
                }
        } else {
            for (std::size_t k = k0; k < k1; ++k) acc ^= sel(k);
        }
        if (acc == ~std::uint64_t{0}) *sink = acc;
    }
};

template <class T, class Sampler>
struct exchange_data {
    using selection_type = decltype(std::declval<Sampler&>().select(std::declval<const trickle::sampler_context&>()));
    std::vector<selection_type> sels;                // device layout
    std::vector<buffer<std::uint64_t, cuda_space>> idx; // baselines
    std::vector<std::size_t> counts;
    std::vector<tb::traffic> pass;
    buffer<float, cuda_space> buf;
    buffer<std::size_t, cuda_space> count_dev; // one count per selection, for plain kernels
    buffer<std::uint64_t, cuda_space> sink;
};

struct case_cache {
    std::string name;
    std::shared_ptr<void> data;
};
case_cache last_case;

template <class T, class Sampler>
exchange_data<T, Sampler>& prepare(const tb::exchange_case& c, Sampler sampler) {
    const std::string name = c.name();
    if (last_case.name == name) return *static_cast<exchange_data<T, Sampler>*>(last_case.data.get());
    last_case = {};
    auto d = std::make_shared<exchange_data<T, Sampler>>();
    device_model<T>& m = model<T>(c.shape);
    const std::size_t first = std::max<std::size_t>(1, static_cast<std::size_t>(c.fraction * static_cast<double>(m.n)));
    const std::size_t steps = tb::step_cycle(first);
    d->sels = tb::make_selections(sampler, m.flat.layout(), m.flat.host_layout(), c.fraction, steps);
    // The same selections over the host copy of the offsets, to count sectors on the host.
    const auto twins = tb::make_selections(sampler, m.flat.host_layout(), m.flat.host_layout(), c.fraction, steps);
    const bool need_idx = c.op == tb::exchange_op::index_plain || c.op == tb::exchange_op::index_kernel;
    std::size_t max_count = 0;
    for (const auto& sel : twins) {
        const std::vector<std::uint64_t> pos = tb::positions_of(sel);
        const double units = static_cast<double>(tb::distinct_units(pos, m.n, sizeof(T), sector));
        const double cnt = static_cast<double>(pos.size());
        d->pass.push_back({units * sector + cnt * sizeof(float), cnt * (sizeof(T) + sizeof(float))});
        d->counts.push_back(pos.size());
        max_count = std::max(max_count, pos.size());
        if (need_idx) {
            buffer<std::uint64_t, cuda_space> b(pos.size());
            trickle::copy_elements<cuda_space, host_space>(b.data(), pos.data(), pos.size());
            d->idx.push_back(std::move(b));
        }
    }
    d->count_dev = buffer<std::size_t, cuda_space>(d->counts.size());
    trickle::copy_elements<cuda_space, host_space>(d->count_dev.data(), d->counts.data(), d->counts.size());
    d->buf = buffer<float, cuda_space>(max_count);
    d->sink = buffer<std::uint64_t, cuda_space>(1);
    last_case = {name, d};
    return *d;
}

template <class T, class Sampler>
void bm_exchange(benchmark::State& state, const tb::exchange_case c, Sampler sampler) {
    using tb::exchange_op;
    auto& d = prepare<T>(c, sampler);
    device_model<T>& m = model<T>(c.shape);
    const trickle::flat_view<T> view = m.flat.view();
    const trickle::exec::cuda ex{stream};
    const std::size_t steps = d.sels.size();
    float* buf = d.buf.data();
    tb::traffic total;
    auto launch = [&](int call) {
        const std::size_t t = static_cast<std::size_t>(call) % steps;
        const auto& sel = d.sels[t];
        switch (c.op) {
        case exchange_op::gather: {
            const auto g = trickle::make_gather<cuda_space>(view, sel, buf);
            trickle::for_each_index(ex, g.calls(), g);
            break;
        }
        case exchange_op::scatter: {
            const auto s = trickle::make_scatter<cuda_space>(view, sel, buf, 1.0f);
            trickle::for_each_index(ex, s.calls(), s);
            break;
        }
        case exchange_op::fused: {
            const auto g = trickle::make_gather<cuda_space>(view, sel, buf);
            trickle::for_each_index(ex, g.calls(), g);
            const auto s = trickle::make_scatter<cuda_space>(view, sel, buf, 1.0f);
            trickle::for_each_index(ex, s.calls(), s);
            break;
        }
        case exchange_op::indices: {
            using sel_t = std::decay_t<decltype(sel)>;
            const indices_body<sel_t> b{sel, d.counts[t], trickle::exchange_range<cuda_space>(sel), d.sink.data()};
            trickle::for_each_index(ex, b.calls(), b);
            break;
        }
        case exchange_op::index_kernel: {
            const index_selection isel{d.idx[t].data(), d.counts[t]};
            const auto g = trickle::make_gather<cuda_space>(view, isel, buf);
            trickle::for_each_index(ex, g.calls(), g);
            const auto s = trickle::make_scatter<cuda_space>(view, isel, buf, 1.0f);
            trickle::for_each_index(ex, s.calls(), s);
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
    const int reps = batch_size(launch);
    long long calls = 0;
    for (auto _ : state) {
        const double per_call = time_batch(reps, [&](int r) { launch(static_cast<int>((calls + r) % 1000000)); });
        state.SetIterationTime(per_call);
        tb::traffic batch;
        for (int r = 0; r < reps; ++r) {
            const std::size_t t = static_cast<std::size_t>((calls + r) % 1000000) % steps;
            const tb::traffic& pass = d.pass[t];
            const double idx_bytes = static_cast<double>(d.counts[t]) * 8;
            const bool index_case = c.op == exchange_op::index_kernel || c.op == exchange_op::index_plain;
            const double passes = c.op == exchange_op::gather || c.op == exchange_op::scatter ? 1 : 2;
            if (c.op == exchange_op::indices) continue;
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

template <class T>
void bm_diloco(benchmark::State& state, const tb::diloco_case c) {
    device_model<T>& m = model<T>(c.shape);
    const std::size_t n = m.n;
    buffer<float, cuda_space> snapshot(n), momentum(n), wire(n + 1);
    const float one = 1.0f;
    trickle::copy_elements<cuda_space, host_space>(wire.data() + n, &one, 1); // the weight sum
    const auto rule = trickle::outer::nesterov{}.prepare(1);
    using rule_type = std::remove_cvref_t<decltype(rule)>;
    const trickle::exec::cuda ex{stream};
    const double bytes = static_cast<double>(n * c.bytes_per_element());
    double total = 0;
    run_timed(
        state,
        [&](int) {
            if (c.op == tb::diloco_op::delta)
                trickle::detail::run_ranges(ex, n, // as diloco_engine launches it
                               trickle::outer_delta_body<T>{m.flat.view(), snapshot.data(),
                                                            trickle::dense_wire<float>{wire.data()}, 1.0f, nullptr, 0});
            else
                trickle::detail::run_ranges(ex, n, // as diloco_engine launches it
                               trickle::outer_update_body<T, rule_type>{m.flat.view(), snapshot.data(), momentum.data(),
                                                                        trickle::dense_wire<float>{wire.data()}, rule,
                                                                        1.0f, wire.data() + n, 0});
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

void register_all() {
    benchmark::RegisterBenchmark("copy/kernel/512MB", bm_copy, false)->UseManualTime()->Unit(benchmark::kMicrosecond);
    benchmark::RegisterBenchmark("copy/memcpy/512MB", bm_copy, true)->UseManualTime()->Unit(benchmark::kMicrosecond);
    for (const tb::exchange_case& c : tb::exchange_cases(true)) {
        if (c.dtype == tb::dtype_id::fp32)
            register_exchange<float>(c);
        else
            register_exchange<bfloat16>(c);
    }
    for (const tb::diloco_case& c : tb::diloco_cases(true)) {
        if (c.dtype == tb::dtype_id::fp32)
            benchmark::RegisterBenchmark(c.name().c_str(), bm_diloco<float>, c)->UseManualTime()->Unit(benchmark::kMicrosecond);
        else
            benchmark::RegisterBenchmark(c.name().c_str(), bm_diloco<bfloat16>, c)
                ->UseManualTime()
                ->Unit(benchmark::kMicrosecond);
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
    TRICKLE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    b_copy = measure_b_copy();
    cudaDeviceProp prop{};
    TRICKLE_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    char text[64];
    std::snprintf(text, sizeof text, "%.6g", b_copy);
    benchmark::AddCustomContext("B_copy_bytes_per_second", text);
    benchmark::AddCustomContext("B_copy_kind", "float4 grid-stride copy kernel, 512 MB -> 512 MB, best of 5");
    benchmark::AddCustomContext("device", prop.name);
    benchmark::AddCustomContext("l2_bytes", std::to_string(prop.l2CacheSize));
    benchmark::AddCustomContext("compiler", "nvcc " + std::to_string(__CUDACC_VER_MAJOR__) + "." +
                                                std::to_string(__CUDACC_VER_MINOR__) + " with " + tb::compiler_string());
    benchmark::AddCustomContext("flags", TRICKLE_BENCH_CUDA_FLAGS);
    benchmark::AddCustomContext("smoke", tb::smoke() ? "yes" : "no");
    std::fprintf(stderr, "B_copy = %.1f GB/s on %s\n", b_copy / 1e9, prop.name);
    register_all();
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    TRICKLE_CUDA_CHECK(cudaStreamDestroy(stream));
    return 0;
}
