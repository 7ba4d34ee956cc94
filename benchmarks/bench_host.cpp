// benchmarks/bench_host.cpp: the host benchmark suite: exchange kernels, baselines, DiLoCo outer step, comm::local, and B_copy.
//
// Every kernel runs on one thread (exec::host), as does the copy that defines B_copy, so
// pct_of_copy compares like with like. Run with --benchmark_format=json for
// scripts/bench_tables.py; TRICKLE_BENCH_SMOKE=1 makes every case tiny.
#include "bench_flags.hpp"
#include "common.hpp"
#include "host_copy.hpp"

#include <trickle/algorithm/demo.hpp>
#include <trickle/algorithm/diloco.hpp>
#include <trickle/algorithm/flat_params.hpp>
#include <trickle/comm/local.hpp>
#include <trickle/core/dtype.hpp>
#include <trickle/core/philox.hpp>
#include <trickle/exec/buffer.hpp>
#include <trickle/exec/host.hpp>
#include <trickle/kernels/dct.hpp>
#include <trickle/kernels/diloco.hpp>
#include <trickle/outer/momentum.hpp>
#include <trickle/sampler/random_batch.hpp>

#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

namespace tb = trickle_bench;
using trickle::bfloat16;
using trickle::buffer;
using trickle::host_space;

namespace {

constexpr std::size_t cache_line = 64;

// ---------------------------------------------------------------- B_copy

using tb::bench_array;
using tb::copy_elements;
using tb::huge_pages;
using tb::measure_b_copy;

double b_copy = 0;

void bm_copy(benchmark::State& state, bool use_memcpy) { tb::run_copy(state, use_memcpy, copy_elements(), b_copy); }

// ---------------------------------------------------------------- models

template <class T>
struct host_model {
    bench_array<T> data;
    trickle::param_group<T, host_space> group;
    trickle::flat_params<T, host_space> flat;
    std::size_t n = 0;
};

template <class T>
host_model<T>& model(int shape) {
    static std::map<int, std::unique_ptr<host_model<T>>> cache;
    auto& slot = cache[shape];
    if (!slot) {
        auto m = std::make_unique<host_model<T>>();
        m->n = tb::model_elements(tb::shapes[shape]);
        m->data = bench_array<T>(m->n);
        for (std::size_t i = 0; i < m->n; ++i) m->data.data()[i] = T(static_cast<float>(i % 2039) * 0.001f - 1.0f);
        m->group = tb::packed_group<T, host_space>(tb::shapes[shape], m->data.data());
        m->flat = trickle::flat_params<T, host_space>(m->group);
        slot = std::move(m);
    }
    return *slot;
}

// ---------------------------------------------------------------- baselines

// Baseline (b): positions read from a precomputed array, as the same range kernels see
// them (index_kernel), or fed to the plainest loop over the packed base (index_plain).
struct index_selection {
    const std::uint64_t* idx;
    std::size_t size;
    std::size_t count() const { return size; }
    std::size_t operator()(std::size_t k) const { return static_cast<std::size_t>(idx[k]); }
    void positions(std::size_t k0, std::size_t m, std::uint64_t* out) const {
        std::memcpy(out, idx + k0, m * sizeof(std::uint64_t));
    }
};

template <class T>
__attribute__((noinline)) void plain_gather(const T* base, std::size_t n, const std::uint64_t* idx, std::size_t count,
                                            float* buf) {
    for (std::size_t k = 0; k < count; ++k) buf[k] = idx[k] < n ? trickle::to_float(base[idx[k]]) : 0.0f;
}

template <class T>
__attribute__((noinline)) void plain_scatter(T* base, std::size_t n, const std::uint64_t* idx, std::size_t count,
                                             const float* buf, float scale) {
    for (std::size_t k = 0; k < count; ++k)
        if (idx[k] < n) base[idx[k]] = trickle::from_float<T>(buf[k] * scale);
}

// Baseline (a), the mask approach of Python simulators: a Bernoulli(p) byte per position,
// then compaction into an index list. The random numbers come from the library's SIMD
// Philox (random_u64_run, as the layerwise sampler uses), two 32-bit draws per 64-bit
// value, so the baseline is as fast as this library can make it.
__attribute__((noinline)) void bernoulli_mask(std::uint8_t* mask, std::size_t n, double p, std::uint64_t stream) {
    constexpr std::size_t chunk = 256;
    std::uint64_t r[chunk / 2];
    const auto threshold = static_cast<std::uint32_t>(p * 4294967296.0);
    for (std::size_t i = 0; i < n; i += chunk) {
        const std::size_t m = std::min(chunk, n - i);
        trickle::detail::random_u64_run(tb::seed, stream, i / 2, (m + 1) / 2, r);
        for (std::size_t j = 0; j < m; ++j) {
            const std::uint64_t w = r[j / 2];
            const auto draw = static_cast<std::uint32_t>(j % 2 == 0 ? w : w >> 32);
            mask[i + j] = draw < threshold;
        }
    }
}

// Branch-free compaction; capacity bounds the count (a Bernoulli(p) draw exceeds 2pn + 4096
// with negligible probability, and the check only guards memory).
__attribute__((noinline)) std::size_t compact(const std::uint8_t* mask, std::size_t n, std::uint64_t* idx,
                                              std::size_t capacity) {
    std::size_t c = 0;
    for (std::size_t i = 0; i < n; ++i) {
        idx[c] = i;
        c += mask[i];
        if (c == capacity) break;
    }
    return c;
}

std::size_t mask_capacity(std::size_t n, double p) {
    return std::min(n, static_cast<std::size_t>(2.0 * p * static_cast<double>(n)) + 4096);
}

// ---------------------------------------------------------------- exchange cases

template <class T, class Sampler>
struct exchange_data {
    using selection_type = decltype(std::declval<Sampler&>().select(std::declval<const trickle::sampler_context&>()));
    std::vector<selection_type> sels;
    std::vector<std::vector<std::uint64_t>> idx; // baselines: each selection's positions
    std::vector<tb::traffic> pass;               // per selection: one gather (or one scatter) pass
    std::size_t max_count = 0;
    buffer<float> buf;
};

// The last case's data only: the index arrays of a large case take hundreds of MB.
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
    host_model<T>& m = model<T>(c.shape);
    const std::size_t first = std::max<std::size_t>(1, static_cast<std::size_t>(c.fraction * static_cast<double>(m.n)));
    const std::size_t steps = tb::step_cycle(first);
    d->sels = tb::make_selections(sampler, m.flat.layout(), m.flat.host_layout(), c.fraction, steps);
    const bool need_idx = c.op == tb::exchange_op::index_plain || c.op == tb::exchange_op::index_kernel;
    for (const auto& sel : d->sels) {
        std::vector<std::uint64_t> pos = tb::positions_of(sel);
        const double lines = static_cast<double>(tb::distinct_units(pos, m.n, sizeof(T), cache_line));
        const double cnt = static_cast<double>(pos.size());
        d->pass.push_back({lines * cache_line + cnt * sizeof(float), cnt * (sizeof(T) + sizeof(float))});
        d->max_count = std::max(d->max_count, pos.size());
        if (need_idx) d->idx.push_back(std::move(pos));
    }
    d->buf = buffer<float>(d->max_count);
    last_case = {name, d};
    return *d;
}

template <class T, class Sampler>
void bm_exchange(benchmark::State& state, const tb::exchange_case c, Sampler sampler) {
    using tb::exchange_op;
    auto& d = prepare<T>(c, sampler);
    host_model<T>& m = model<T>(c.shape);
    const trickle::flat_view<T> view = m.flat.view();
    const trickle::exec::host ex;
    const std::size_t steps = d.sels.size();
    float* buf = d.buf.data();
    tb::traffic total;
    std::size_t it = 0, values = 0;
    for (auto _ : state) {
        const std::size_t t = it++ % steps;
        const auto& sel = d.sels[t];
        const tb::traffic& pass = d.pass[t];
        switch (c.op) {
        case exchange_op::gather: {
            const auto g = trickle::make_gather(view, sel, buf);
            trickle::for_each_index(ex, g.calls(), g);
            total.moved += pass.moved;
            total.useful += pass.useful;
            break;
        }
        case exchange_op::scatter: {
            const auto s = trickle::make_scatter(view, sel, buf, 1.0f);
            trickle::for_each_index(ex, s.calls(), s);
            total.moved += pass.moved;
            total.useful += pass.useful;
            break;
        }
        case exchange_op::fused: {
            const auto g = trickle::make_gather(view, sel, buf);
            trickle::for_each_index(ex, g.calls(), g);
            const auto s = trickle::make_scatter(view, sel, buf, 1.0f);
            trickle::for_each_index(ex, s.calls(), s);
            total.moved += 2 * pass.moved;
            total.useful += 2 * pass.useful;
            break;
        }
        case exchange_op::indices: {
            // The position arithmetic of the range kernels, with no parameter memory:
            // the runs as the host kernels walk them, or bulk positions per batch.
            std::uint64_t sink = 0;
            const std::size_t count = sel.count();
            if (trickle::detail::uses_runs(sel)) {
                if constexpr (trickle::detail::run_selection<std::decay_t<decltype(sel)>>) {
                    trickle::detail::host_run_cursor cursor(sel, count);
                    for (std::size_t k = 0; k < count;) {
                        const auto r = cursor.next(k);
                        sink += r.pos;
                        k += r.len;
                    }
                }
            } else {
                std::uint64_t pos[trickle::detail::host_batch];
                trickle::detail::host_position_cursor cursor(sel);
                for (std::size_t k = 0; k < count; k += trickle::detail::host_batch) {
                    const std::size_t mm = std::min(trickle::detail::host_batch, count - k);
                    cursor.fill(k, mm, pos);
                    for (std::size_t j = 0; j < mm; ++j) sink += pos[j];
                }
            }
            benchmark::DoNotOptimize(sink);
            values += count;
            break;
        }
        case exchange_op::index_kernel: {
            const std::vector<std::uint64_t>& idx = d.idx[t];
            const index_selection isel{idx.data(), idx.size()};
            const auto g = trickle::make_gather(view, isel, buf);
            trickle::for_each_index(ex, g.calls(), g);
            const auto s = trickle::make_scatter(view, isel, buf, 1.0f);
            trickle::for_each_index(ex, s.calls(), s);
            total.moved += 2 * (pass.moved + static_cast<double>(idx.size()) * 8);
            total.useful += 2 * pass.useful;
            break;
        }
        case exchange_op::index_plain: {
            const std::vector<std::uint64_t>& idx = d.idx[t];
            plain_gather(m.data.data(), m.n, idx.data(), idx.size(), buf);
            plain_scatter(m.data.data(), m.n, idx.data(), idx.size(), buf, 1.0f);
            total.moved += 2 * (pass.moved + static_cast<double>(idx.size()) * 8);
            total.useful += 2 * pass.useful;
            break;
        }
        case exchange_op::mask: break; // bm_mask
        }
        benchmark::ClobberMemory();
    }
    tb::report(state, total, b_copy);
    if (c.op == exchange_op::indices)
        state.counters["indices_per_second"] = benchmark::Counter(static_cast<double>(values), benchmark::Counter::kIsRate);
}

template <class T>
void bm_mask(benchmark::State& state, const tb::exchange_case c) {
    host_model<T>& m = model<T>(c.shape);
    const std::size_t n = m.n;
    const std::size_t cap = mask_capacity(n, c.fraction);
    buffer<std::uint8_t> mask(n);
    buffer<std::uint64_t> idx(cap);
    buffer<float> buf(cap);
    // Bytes of one iteration, from the draw of step 0 (later steps differ only by chance).
    bernoulli_mask(mask.data(), n, c.fraction, 0);
    const std::size_t c0 = compact(mask.data(), n, idx.data(), cap);
    const std::vector<std::uint64_t> pos(idx.data(), idx.data() + c0);
    const double lines = static_cast<double>(tb::distinct_units(pos, n, sizeof(T), cache_line));
    const double cnt = static_cast<double>(c0);
    const tb::traffic one{2.0 * static_cast<double>(n) + cnt * 8 + 2 * (lines * cache_line + cnt * 4 + cnt * 8),
                          2 * cnt * (sizeof(T) + sizeof(float))};
    tb::traffic total;
    std::uint64_t step = 0;
    for (auto _ : state) {
        bernoulli_mask(mask.data(), n, c.fraction, step++);
        const std::size_t count = compact(mask.data(), n, idx.data(), cap);
        plain_gather(m.data.data(), n, idx.data(), count, buf.data());
        plain_scatter(m.data.data(), n, idx.data(), count, buf.data(), 1.0f);
        benchmark::ClobberMemory();
        total.moved += one.moved;
        total.useful += one.useful;
    }
    tb::report(state, total, b_copy);
}

// ---------------------------------------------------------------- DiLoCo

template <class T>
void bm_diloco(benchmark::State& state, const tb::diloco_case c) {
    host_model<T>& m = model<T>(c.shape);
    const std::size_t n = m.n;
    buffer<float> snapshot(n), momentum(n), wire(n + 1);
    for (std::size_t i = 0; i < n; ++i) snapshot.data()[i] = trickle::to_float(m.data.data()[i]) + 0.01f;
    for (std::size_t i = 0; i < n; ++i) wire.data()[i] = 0.001f;
    wire.data()[n] = 1.0f; // the weight sum, as outer_step sends it
    const auto rule = trickle::outer::nesterov{}.prepare(1);
    using rule_type = std::remove_cvref_t<decltype(rule)>;
    const trickle::exec::host ex;
    for (auto _ : state) {
        if (c.op == tb::diloco_op::delta)
            trickle::detail::run_ranges(ex, n, // as diloco_engine launches it
                           trickle::outer_delta_body<T>{m.flat.view(), snapshot.data(),
                                                        trickle::dense_wire<float>{wire.data()}, 1.0f, nullptr, 0});
        else
            trickle::detail::run_ranges(ex, n, // as diloco_engine launches it
                           trickle::outer_update_body<T, rule_type>{m.flat.view(), snapshot.data(), momentum.data(),
                                                                    trickle::dense_wire<float>{wire.data()}, rule,
                                                                    1.0f, wire.data() + n, 0});
        benchmark::ClobberMemory();
    }
    const double bytes = static_cast<double>(n * c.bytes_per_element()) * static_cast<double>(state.iterations());
    tb::report(state, {bytes, bytes}, b_copy);
}

// ---------------------------------------------------------------- DeMo

// DeMo's passes over one tensor of n = rows x cols floats (rows = 1: a vector, 1-D chunks;
// else s x s tiles), chunked as demo_engine chunks it (append_dct_chunks):
//   encode   the gradient's DCT into the coefficient slots (dct_encode_body);
//   decode   the slots' inverse DCT and the sign update of the parameters (dct_decode_body);
//   step     demo_engine::step over comm::local with one worker: encode, the top-k error
//            feedback and its (one-worker) exchange, decode.
// Bytes: encode reads the gradient and writes the slots (8 n), decode reads the slots and
// reads and writes the parameters (12 n); step counts both. The DCT does 2 m flops
// per value for each axis of length m (m multiplies, m adds), so it is compute bound: flops_per_byte says how much
// (encode: 16 for 1-D chunks of 64, 32 for 64 x 64 tiles), GFLOPs the rate reached.
enum class demo_pass { encode, decode, step };

void bm_demo(benchmark::State& state, demo_pass pass, std::size_t rows, std::size_t cols, std::size_t s) {
    if (tb::smoke()) {
        rows = std::min<std::size_t>(rows, s);
        cols = std::min<std::size_t>(cols, 4 * s);
    }
    const std::size_t n = rows * cols;
    std::vector<float> params(n), grads(n);
    std::mt19937 rng(tb::seed);
    std::uniform_real_distribution<float> value(-0.5f, 0.5f);
    for (std::size_t i = 0; i < n; ++i) {
        params[i] = value(rng);
        grads[i] = value(rng);
    }
    // One transform (forward or inverse): 2 m flops per value per axis of length m.
    const double flops_per_value = 2.0 * static_cast<double>(std::min(s, cols) + (rows > 1 ? std::min(s, rows) : 0));
    const double bytes_per_value = pass == demo_pass::encode ? 8.0 : pass == demo_pass::decode ? 12.0 : 20.0;
    if (pass == demo_pass::step) {
        trickle::comm::local_world world(1);
        trickle::comm::local comm = world.rank(0);
        const trickle::param_group<float> p{{"w", params.data(), n}}, g{{"g", grads.data(), n}};
        trickle::demo_engine<trickle::comm::local> demo(p, g, {{rows, cols}}, comm,
                                                        {.lr = 1e-6, .chunk = s, .k = std::min<std::size_t>(32, s)});
        for (auto _ : state) {
            demo.step(trickle::exec::host{});
            benchmark::ClobberMemory();
        }
    } else {
        std::vector<trickle::dct_chunk> vectors, tiles;
        trickle::append_dct_chunks(vectors, tiles, 0, rows, cols, s);
        const std::vector<trickle::dct_chunk>& chunks = rows == 1 ? vectors : tiles;
        const std::size_t slot = rows == 1 ? s : s * s;
        const trickle::dct_bases bases(s);
        std::vector<float> coef(chunks.size() * slot);
        const float* in[] = {grads.data()};
        float* out[] = {params.data()};
        const trickle::exec::host ex;
        const trickle::dct_encode_body enc{chunks.data(), bases.data(), in, coef.data(), slot, s};
        trickle::detail::run_ranges(ex, chunks.size(), enc);
        const trickle::dct_decode_body<trickle::demo_sign_update> dec{
            chunks.data(), bases.data(), coef.data(), out, slot, s, trickle::demo_sign_update{1e-6f, 0.0f, 1.0f}};
        for (auto _ : state) {
            if (pass == demo_pass::encode)
                trickle::detail::run_ranges(ex, chunks.size(), enc);
            else
                trickle::detail::run_ranges(ex, chunks.size(), dec);
            benchmark::ClobberMemory();
        }
    }
    const double it = static_cast<double>(state.iterations()), values = static_cast<double>(n) * it;
    const double bytes = bytes_per_value * values;
    tb::report(state, {bytes, bytes}, b_copy);
    const double flops = flops_per_value * values * (pass == demo_pass::step ? 2.0 : 1.0);
    state.counters["flops_per_byte"] = flops / bytes;
    state.counters["GFLOPs"] = benchmark::Counter(flops / 1e9, benchmark::Counter::kIsRate);
    state.counters["values_per_second"] = benchmark::Counter(values, benchmark::Counter::kIsRate);
}

// ---------------------------------------------------------------- comm::local all-reduce

// Rank 0 is the benchmark thread; ranks 1..N-1 are helpers told by a one-float broadcast
// how many all-reduces the next batch holds (0: stop).
void bm_allreduce(benchmark::State& state, int workers, std::size_t n) {
    trickle::comm::local_world world(workers);
    std::vector<std::vector<float>> data(static_cast<std::size_t>(workers), std::vector<float>(n, 0.0f));
    std::vector<std::thread> helpers;
    for (int r = 1; r < workers; ++r)
        helpers.emplace_back([&world, &data, r, n] {
            trickle::comm::local c = world.rank(r);
            for (;;) {
                float batch = 0;
                c.broadcast(&batch, 1, 0);
                if (batch == 0) break;
                for (int i = 0; i < static_cast<int>(batch); ++i) c.all_reduce_sum(data[static_cast<std::size_t>(r)].data(), n);
            }
        });
    trickle::comm::local c = world.rank(0);
    const auto batch = static_cast<benchmark::IterationCount>(std::max<std::size_t>(1, (std::size_t{1} << 18) / n));
    while (state.KeepRunningBatch(batch)) {
        float b = static_cast<float>(batch);
        c.broadcast(&b, 1, 0);
        for (benchmark::IterationCount i = 0; i < batch; ++i) c.all_reduce_sum(data[0].data(), n);
    }
    float stop = 0;
    c.broadcast(&stop, 1, 0);
    for (auto& h : helpers) h.join();
    // Every rank reads all N buffers' share and its scratch N times, writes its scratch
    // once and every buffer's share: (3N + 1) n floats in all per all-reduce.
    const double it = static_cast<double>(state.iterations());
    const double moved = static_cast<double>(3 * workers + 1) * static_cast<double>(n) * sizeof(float) * it;
    const double useful = 2.0 * workers * static_cast<double>(n) * sizeof(float) * it;
    tb::report(state, {moved, useful}, b_copy);
}

// ---------------------------------------------------------------- registration

template <class T>
void register_exchange(const tb::exchange_case& c) {
    if (c.op == tb::exchange_op::mask) {
        benchmark::RegisterBenchmark(c.name().c_str(), bm_mask<T>, c)->Unit(benchmark::kMicrosecond);
        return;
    }
    tb::with_sampler(c.sampler, [&](auto sampler) {
        benchmark::RegisterBenchmark(c.name().c_str(), bm_exchange<T, decltype(sampler)>, c, sampler)
            ->Unit(benchmark::kMicrosecond);
    });
}

void register_all() {
    benchmark::RegisterBenchmark("copy/loop/256MB", bm_copy, false)->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark("copy/memcpy/256MB", bm_copy, true)->Unit(benchmark::kMillisecond);
    for (const tb::exchange_case& c : tb::exchange_cases(false)) {
        if (c.dtype == tb::dtype_id::fp32)
            register_exchange<float>(c);
        else
            register_exchange<bfloat16>(c);
    }
    for (const tb::diloco_case& c : tb::diloco_cases(false)) {
        if (c.dtype == tb::dtype_id::fp32)
            benchmark::RegisterBenchmark(c.name().c_str(), bm_diloco<float>, c)->Unit(benchmark::kMicrosecond);
        else
            benchmark::RegisterBenchmark(c.name().c_str(), bm_diloco<bfloat16>, c)->Unit(benchmark::kMicrosecond);
    }
    for (const auto& [pass, what] : {std::pair{demo_pass::encode, "encode"}, std::pair{demo_pass::decode, "decode"},
                                     std::pair{demo_pass::step, "step"}})
        for (const std::size_t s : {std::size_t{32}, std::size_t{64}}) {
            const std::string tag = std::string("demo/") + what + "/s" + std::to_string(s);
            benchmark::RegisterBenchmark((tag + "/vector/1M").c_str(), bm_demo, pass, std::size_t{1},
                                         std::size_t{1} << 20, s)
                ->Unit(benchmark::kMillisecond);
            benchmark::RegisterBenchmark((tag + "/matrix/1024x1024").c_str(), bm_demo, pass, std::size_t{1024},
                                         std::size_t{1024}, s)
                ->Unit(benchmark::kMillisecond);
        }
    for (int workers : {2, 4, 8})
        for (std::size_t n : {std::size_t{1} << 12, std::size_t{1} << 18, std::size_t{1} << 22}) {
            const std::size_t floats = tb::smoke() ? std::min<std::size_t>(n, 1024) : n;
            const std::string name = "allreduce/local/N" + std::to_string(workers) + "/" + std::to_string(n);
            benchmark::RegisterBenchmark(name.c_str(), bm_allreduce, workers, floats)
                ->UseRealTime()
                ->Unit(benchmark::kMicrosecond);
        }
}

} // namespace

int main(int argc, char** argv) {
    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
    b_copy = measure_b_copy();
    char text[64];
    std::snprintf(text, sizeof text, "%.6g", b_copy);
    benchmark::AddCustomContext("B_copy_bytes_per_second", text);
    benchmark::AddCustomContext("B_copy_kind", "single-thread loop copy of 256 MB, ordinary stores, best of 10");
    benchmark::AddCustomContext("compiler", tb::compiler_string());
    benchmark::AddCustomContext("flags", TRICKLE_BENCH_HOST_FLAGS);
    benchmark::AddCustomContext("threads", "1 (exec::host); allreduce: N threads");
    benchmark::AddCustomContext("smoke", tb::smoke() ? "yes" : "no");
    benchmark::AddCustomContext("huge_pages", huge_pages() ? "madvise(MADV_HUGEPAGE) on parameters and copy arrays"
                                                           : "no (4 KB pages)");
#if TRICKLE_PHILOX_SIMD
    benchmark::AddCustomContext("philox_lanes", trickle::detail::philox_simd_name());
#else
    benchmark::AddCustomContext("philox_lanes", "scalar");
#endif
    std::fprintf(stderr, "B_copy = %.2f GB/s (single-thread copy, read + written)\n", b_copy / 1e9);
    register_all();
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    return 0;
}
