// benchmarks/bench_codec.cpp: the codec value layer on the host: encode and decode of every codec over 16M values.
//
// One thread, as bench_host. Each case codes the same 16M fp32 values (64 MB, twice a 32 MB
// L3) drawn from N(0, 1): codec/<encode|decode|encode_stochastic>/<codec>/16M. Reported,
// by the byte model of bench_host (benchmarks/README.md):
//   bytes_per_second          moved bytes: the fp32 array and the wire bytes, read + written
//   useful_bytes_per_second   the fp32 values coded: 4 bytes a value (the table's "GB/s")
//   pct_of_copy               moved bytes per second / B_copy (measured at start-up, below)
//   vs_memcpy                 memcpy time of the same 64 MB of fp32 / this case's time: 1 is
//                             the speed of copying the values, 0.5 twice as slow
//   wire_bytes_per_value      the codec's wire bytes / n
// TRICKLE_BENCH_SMOKE=1 makes every case 64K values (ctest bench_codec_smoke).
#include "bench_flags.hpp"
#include "common.hpp"
#include "host_copy.hpp"

#include <trickle/algorithm/diloco.hpp>
#include <trickle/codec/codecs.hpp>
#include <trickle/comm/local.hpp>

#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <new>
#include <random>
#include <string>
#include <vector>

namespace tb = trickle_bench;
namespace codec = trickle::codec;

namespace {

// ---------------------------------------------------------------- references

// bench_host's B_copy and arrays (host_copy.hpp).
using tb::bench_array;
using tb::measure_b_copy;

std::size_t codec_values() { return tb::smoke() ? (std::size_t{1} << 16) : (std::size_t{16} << 20); }

// Seconds for memcpy of the codec cases' fp32 array into another, best of twenty.
double measure_memcpy_seconds() {
    const std::size_t n = codec_values();
    bench_array<float> a(n), b(n);
    double best = 1e30;
    for (int rep = 0; rep < (tb::smoke() ? 2 : 21); ++rep) {
        const auto t0 = std::chrono::steady_clock::now();
        std::memcpy(b.data(), a.data(), n * sizeof(float));
        const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        benchmark::DoNotOptimize(b.data());
        if (rep > 0) best = std::min(best, dt);
    }
    return best;
}

double b_copy = 0;
double memcpy_seconds = 0;

void bm_copy(benchmark::State& state, bool use_memcpy, std::size_t n) {
    tb::run_copy(state, use_memcpy, n, b_copy);
    state.counters["vs_memcpy"] =
        benchmark::Counter(memcpy_seconds * static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}

// ---------------------------------------------------------------- codec cases

// The values every case codes: N(0, 1), the same for every case.
const bench_array<float>& input() {
    static const bench_array<float> x = [] {
        bench_array<float> a(codec_values());
        std::mt19937 rng(12345);
        std::normal_distribution<float> normal;
        for (std::size_t i = 0; i < a.size(); ++i) a.data()[i] = normal(rng);
        return a;
    }();
    return x;
}

enum class op { encode, decode, encode_stochastic };

template <class C>
void bm_codec(benchmark::State& state, C c, op o) {
    const std::size_t n = codec_values();
    const float* x = input().data();
    const std::size_t wire_bytes = c.wire_bytes(n);
    bench_array<std::byte> wire(wire_bytes);
    bench_array<float> out(n);
    c.encode(x, n, wire.data()); // the decode cases decode real codes
    const codec::philox_words words{.seed = 42, .stream = 7};
    for (auto _ : state) {
        switch (o) {
        case op::encode: c.encode(x, n, wire.data()); break;
        case op::decode: c.decode(wire.data(), n, out.data()); break;
        case op::encode_stochastic:
            if constexpr (requires { c.encode(x, n, wire.data(), words); }) c.encode(x, n, wire.data(), words);
            break;
        }
        benchmark::ClobberMemory();
    }
    const double it = static_cast<double>(state.iterations());
    const double values = static_cast<double>(n) * sizeof(float);
    tb::report(state, {(values + static_cast<double>(wire_bytes)) * it, values * it}, b_copy);
    state.counters["vs_memcpy"] = benchmark::Counter(memcpy_seconds * it, benchmark::Counter::kIsRate);
    state.counters["wire_bytes_per_value"] = static_cast<double>(wire_bytes) / static_cast<double>(n);
}

template <class C>
void register_codec(const std::string& label, C c, bool stochastic) {
    for (op o : {op::encode, op::decode, op::encode_stochastic}) {
        if (o == op::encode_stochastic && !stochastic) continue;
        const char* what = o == op::encode ? "encode" : o == op::decode ? "decode" : "encode_stochastic";
        const std::string name = std::string("codec/") + what + "/" + label + "/16M";
        benchmark::RegisterBenchmark(name.c_str(), bm_codec<C>, c, o)->Unit(benchmark::kMillisecond);
    }
}

// ---------------------------------------------------------------- a whole DiLoCo outer step

// One DiLoCo outer step (interval 1, one worker) over n values through codec C: the delta
// pass, the encoded all-reduce (encode, the all-to-all and all-gather copies, decode, the
// rank-order sum, encode and decode of the sum) and the update pass, the delta and update
// fused with the encoding and decoding tile by tile (diloco_engine's fused_outer_step).
// Against the fp32 case (the delta and update passes with a one-rank all-reduce between
// them), the ratio is what the codec adds to an outer step.
template <class C>
void bm_outer_step(benchmark::State& state, C c) {
    const std::size_t n = codec_values();
    bench_array<float> params(n);
    std::memcpy(params.data(), input().data(), n * sizeof(float));
    trickle::comm::local_world world(1);
    auto comm = world.rank(0);
    trickle::param_group<float> group{{"w", params.data(), n}};
    trickle::diloco<trickle::outer::nesterov, trickle::topology::all_reduce, C> d(group, comm, {.interval = 1}, {}, {},
                                                                                  c);
    for (auto _ : state) {
        for (std::size_t i = 0; i < n; i += 4096) params.data()[i] += 1e-3f; // an inner step's change
        d.step(trickle::exec::host{});
        benchmark::ClobberMemory();
    }
    const double it = static_cast<double>(state.iterations());
    const double values = static_cast<double>(n) * sizeof(float);
    tb::report(state, {values * it, values * it}, b_copy);
    state.counters["vs_memcpy"] = benchmark::Counter(memcpy_seconds * it, benchmark::Counter::kIsRate);
}

template <class C>
void register_outer_step(const std::string& label, C c) {
    const std::string name = "diloco_outer_step/" + label + "/16M";
    benchmark::RegisterBenchmark(name.c_str(), bm_outer_step<C>, c)->Unit(benchmark::kMillisecond);
}

void register_all() {
    register_outer_step("fp32", codec::fp32{});
    register_outer_step("bf16", codec::bf16{});
    register_outer_step("fp8_e4m3", codec::fp8_e4m3{});
    register_outer_step("fp8_block_b64", codec::fp8_block{.block_size = 64});
    register_outer_step("int8_b64", codec::int8_block{.block_size = 64});
    register_outer_step("int4_b64", codec::int4_block{.block_size = 64});
    register_outer_step("sign2_b64", codec::sign2_block{.block_size = 64});
    benchmark::RegisterBenchmark("copy/loop/64MB", bm_copy, false, codec_values())->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark("copy/memcpy/64MB", bm_copy, true, codec_values())->Unit(benchmark::kMillisecond);
    register_codec("fp32", codec::fp32{}, false);
    register_codec("bf16", codec::bf16{}, false);
    register_codec("fp16", codec::fp16{}, false);
    register_codec("fp8_e4m3", codec::fp8_e4m3{}, false);
    register_codec("fp8_e5m2", codec::fp8_e5m2{}, false);
    register_codec("fp8_block_b64", codec::fp8_block{.block_size = 64}, false);
    register_codec("int8_b64", codec::int8_block{.block_size = 64, .symmetric = true}, true);
    register_codec("int8_minmax_b64", codec::int8_block{.block_size = 64, .symmetric = false}, true);
    register_codec("int4_b64", codec::int4_block{.block_size = 64, .symmetric = true}, true);
    register_codec("int4_minmax_b64", codec::int4_block{.block_size = 64, .symmetric = false}, true);
    register_codec("sign2_b64", codec::sign2_block{.block_size = 64}, true);
}

} // namespace

int main(int argc, char** argv) {
    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
    b_copy = measure_b_copy();
    memcpy_seconds = measure_memcpy_seconds();
    char text[64];
    std::snprintf(text, sizeof text, "%.6g", b_copy);
    benchmark::AddCustomContext("B_copy_bytes_per_second", text);
    benchmark::AddCustomContext("B_copy_kind", "single-thread loop copy of 256 MB, ordinary stores, best of 10");
    std::snprintf(text, sizeof text, "%.6g", memcpy_seconds);
    benchmark::AddCustomContext("memcpy_fp32_seconds", text);
    benchmark::AddCustomContext("memcpy_fp32_kind", "memcpy of the codec cases' fp32 array (16M values, 64 MB), best of 20");
    benchmark::AddCustomContext("compiler", tb::compiler_string());
    benchmark::AddCustomContext("flags", TRICKLE_BENCH_HOST_FLAGS);
    benchmark::AddCustomContext("threads", "1");
    benchmark::AddCustomContext("smoke", tb::smoke() ? "yes" : "no");
    std::fprintf(stderr, "B_copy = %.2f GB/s (single-thread copy, read + written); memcpy of %zu fp32 values: %.2f ms\n",
                 b_copy / 1e9, codec_values(), memcpy_seconds * 1e3);
    register_all();
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    return 0;
}
