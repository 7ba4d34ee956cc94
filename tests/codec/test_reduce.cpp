// codec::encoded_all_reduce: identical bits on every worker, comm::local's sums through fp32,
// bounded error through lossy codecs, honest byte counts, error feedback.
#include <trickle/codec.hpp>
#include <trickle/comm/local.hpp>

#include "test_support.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <cstdint>
#include <string>
#include <vector>

using namespace trickle;
using trickle_test::bitwise_equal;
using trickle_test::mixed;

namespace {

std::vector<float> smooth(int r, std::size_t n) {
    std::vector<float> v(n);
    for (std::size_t i = 0; i < n; ++i)
        v[i] = static_cast<float>(std::sin(0.01 * static_cast<double>(i) * (r + 1)) * (1.0 + 0.1 * r));
    return v;
}

// Runs the encoded all-reduce on N workers; returns each worker's result and traffic.
template <class Codec>
void run(const Codec& c, int N, std::size_t n, std::vector<std::vector<float>>& out, std::vector<traffic_counters>& t,
         std::vector<float> (*input)(int, std::size_t)) {
    out.assign(static_cast<std::size_t>(N), {});
    t.assign(static_cast<std::size_t>(N), {});
    comm::run_local(N, [&](comm::local& comm) {
        auto v = input(comm.rank(), n);
        codec::reduce_scratch s;
        s.reserve(c, n, N);
        const int g = codec::encoded_all_reduce(c, comm, v.data(), n, s);
        if (g != N) throw std::logic_error("group size");
        out[static_cast<std::size_t>(comm.rank())] = v;
        t[static_cast<std::size_t>(comm.rank())] = comm.traffic();
    });
}

std::vector<float> mixed_input(int r, std::size_t n) {
    std::vector<float> v(n);
    for (std::size_t i = 0; i < n; ++i) v[i] = mixed(r, i);
    return v;
}

} // namespace

TEST_CASE("encoded_all_reduce through fp32: comm::local's bits, 2(N-1) slots of bytes") {
    for (int N : {1, 2, 3, 4})
        for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{1001}}) {
            std::vector<std::vector<float>> got, ref(static_cast<std::size_t>(N));
            std::vector<traffic_counters> t;
            run(codec::fp32{}, N, n, got, t, mixed_input);
            comm::run_local(N, [&](comm::local& comm) {
                auto v = mixed_input(comm.rank(), n);
                comm.all_reduce_sum(v.data(), n);
                ref[static_cast<std::size_t>(comm.rank())] = v;
            });
            const std::size_t E = 4 * ((n + static_cast<std::size_t>(N) - 1) / static_cast<std::size_t>(N));
            for (int r = 0; r < N; ++r) {
                INFO("N = ", N, ", n = ", n, ", rank ", r);
                CHECK(bitwise_equal(got[static_cast<std::size_t>(r)], ref[static_cast<std::size_t>(r)]));
                CHECK(t[static_cast<std::size_t>(r)].bytes_sent == 2 * static_cast<std::uint64_t>(N - 1) * E);
                CHECK(t[static_cast<std::size_t>(r)].calls == 2);
            }
        }
}

TEST_CASE_TEMPLATE("encoded_all_reduce through a lossy codec: the same bits everywhere, error within the codec's bound",
                   C, codec::bf16, codec::fp16, codec::fp8_e4m3, codec::fp8_block, codec::int8_block, codec::int4_block,
                   codec::sign2_block) {
    const int N = 4;
    const std::size_t n = 3000;
    const C c{};
    std::vector<std::vector<float>> got;
    std::vector<traffic_counters> t;
    run(c, N, n, got, t, smooth);
    // The exact sum, and the worst error a round-to-nearest codec could make: each input
    // and the sum rounded once, at most half a step of the codec's coarsest grid (|x| <= 1.3).
    double worst = 0.0;
    for (std::size_t i = 0; i < n; ++i) {
        double exact = 0.0;
        for (int r = 0; r < N; ++r) exact += smooth(r, n)[i];
        worst = std::max(worst, std::abs(exact - static_cast<double>(got[0][i])));
    }
    const std::string name = C::name;
    const double bound = name == "bf16"       ? 0.05
                         : name == "fp16"     ? 0.01
                         : name == "fp8_e4m3" ? 0.6
                         : name == "fp8_block" ? 0.6
                         : name == "int8"     ? 0.06
                         : name == "int4"     ? 0.9
                                              : 3.0; // sign2: half a step of 4 levels, twice
    INFO(name, ": worst error ", worst);
    CHECK(worst <= bound);
    CHECK(worst > 0.0); // lossy: some value changed
    for (int r = 1; r < N; ++r) CHECK(bitwise_equal(got[static_cast<std::size_t>(r)], got[0]));
    // Fewer bytes than fp32, by about the codec's ratio.
    const std::uint64_t fp32_bytes = 2 * 3 * 4 * ((n + 3) / 4);
    CHECK(t[0].bytes_sent == 2 * 3 * codec::reduce_scratch::slot_bytes(c, n, N));
    CHECK(t[0].bytes_sent < fp32_bytes);
}

TEST_CASE("encoded_all_reduce: codec::any gives the held codec's bits and bytes") {
    const int N = 3;
    const std::size_t n = 777;
    std::vector<std::vector<float>> a, b;
    std::vector<traffic_counters> ta, tb;
    run(codec::int4_block{.block_size = 32}, N, n, a, ta, smooth);
    run(codec::any{codec::int4_block{.block_size = 32}}, N, n, b, tb, smooth);
    for (int r = 0; r < N; ++r) {
        CHECK(bitwise_equal(a[static_cast<std::size_t>(r)], b[static_cast<std::size_t>(r)]));
        CHECK(ta[static_cast<std::size_t>(r)] == tb[static_cast<std::size_t>(r)]);
    }
    config_record x, y;
    codec::int4_block{.block_size = 32}.describe(x);
    codec::any{codec::int4_block{.block_size = 32}}.describe(y);
    CHECK(x.serialize() == y.serialize());
}

TEST_CASE("encoded_all_reduce with error feedback: what was lost is sent again") {
    // One worker sends the same small signal repeatedly through sign2: without feedback the
    // quantization error repeats, with beta = 1 the running mean of what arrives converges
    // to the signal.
    const std::size_t n = 256;
    const codec::sign2_block c{.block_size = 64};
    comm::local_world world(1);
    auto comm = world.rank(0);
    codec::reduce_scratch s;
    s.reserve(c, n, 1);
    std::vector<float> signal(n), residual(n, 0.0f);
    for (std::size_t i = 0; i < n; ++i) signal[i] = static_cast<float>(std::sin(0.3 * static_cast<double>(i)));
    auto mean_error = [&](bool feedback) {
        std::fill(residual.begin(), residual.end(), 0.0f);
        std::vector<double> total(n, 0.0);
        const int rounds = 200;
        for (int k = 0; k < rounds; ++k) {
            std::vector<float> v = signal;
            codec::encoded_all_reduce(c, comm, v.data(), n, s, feedback ? residual.data() : nullptr, 1.0f);
            for (std::size_t i = 0; i < n; ++i) total[i] += v[i];
        }
        double err = 0.0;
        for (std::size_t i = 0; i < n; ++i) err = std::max(err, std::abs(total[i] / rounds - signal[i]));
        return err;
    };
    const double without = mean_error(false), with = mean_error(true);
    INFO("max error of the mean: without feedback ", without, ", with ", with);
    CHECK(with < 0.1 * without);
}

TEST_CASE("codec::native resolves to the parameters' type") {
    CHECK(std::is_same_v<codec::resolve_t<codec::native, float>, codec::fp32>);
    CHECK(std::is_same_v<codec::resolve_t<codec::native, half>, codec::fp16>);
    CHECK(std::is_same_v<codec::resolve_t<codec::native, bfloat16>, codec::bf16>);
    CHECK(std::is_same_v<codec::resolve_t<codec::int8_block, bfloat16>, codec::int8_block>);
}

TEST_CASE("fp8_block: small values survive, the error is within the scaled grid, bad block sizes are refused") {
    const std::size_t n = 1000;
    std::vector<float> x(n), y(n), z(n);
    for (std::size_t i = 0; i < n; ++i) x[i] = 1e-4f * static_cast<float>(std::sin(0.37 * static_cast<double>(i)));
    x[10] = std::numeric_limits<float>::quiet_NaN();
    x[11] = std::numeric_limits<float>::infinity();
    for (bool e5m2 : {false, true}) {
        const codec::fp8_block c{.block_size = 64, .e5m2 = e5m2};
        std::vector<std::byte> w(c.wire_bytes(n));
        CHECK(w.size() == 15 * (4 + 64) + (4 + 40));
        c.encode(x.data(), n, w.data());
        c.decode(w.data(), n, y.data());
        // The unscaled element codec flushes these values; the scaled one keeps them.
        codec::fp8_e4m3{}.encode(x.data(), n, w.data());
        codec::fp8_e4m3{}.decode(w.data(), n, z.data());
        double worst = 0.0, flushed = 0.0;
        for (std::size_t i = 0; i < n; ++i) {
            if (i == 10 || i == 11) continue;
            worst = std::max(worst, std::abs(double(x[i]) - y[i]) / 1e-4);
            flushed = std::max(flushed, std::abs(double(x[i]) - z[i]) / 1e-4);
        }
        CHECK(std::isnan(y[10]));
        CHECK(y[11] > 0.0f);
        CHECK(worst < (e5m2 ? 0.13 : 0.07)); // half a step of 2 or 3 mantissa bits
        CHECK(flushed > 0.5);
    }
    config_record rec;
    codec::fp8_block{.block_size = 0}.describe(rec);
    CHECK(rec.error() == "codec::fp8_block: block_size must be >= 1, got 0");
}

namespace {

// One worker's outcome of an encoded all-reduce: its values, residual and traffic.
struct reduce_outcome {
    std::vector<float> values, residual;
    traffic_counters traffic;
};

// Runs the tiled host form (blocks = false) or the block-parallel form of the encoded
// all-reduce on N comm::local workers, with error feedback when beta > 0; two calls, so a
// second exchange starts from the first one's residual and uses other rounding words.
template <class Codec>
std::vector<reduce_outcome> reduce_twice(const Codec& c, int N, std::size_t n, bool blocks, float beta,
                                         bool stochastic) {
    std::vector<reduce_outcome> out(static_cast<std::size_t>(N));
    comm::run_local(N, [&](comm::local& comm) {
        reduce_outcome& o = out[static_cast<std::size_t>(comm.rank())];
        o.residual.assign(n, 0.0f);
        float* residual = beta > 0.0f ? o.residual.data() : nullptr;
        codec::reduce_scratch tiled;
        codec::block_reduce_scratch<host_space> parallel;
        tiled.reserve(c, n, N);
        parallel.reserve(c, n, N, exec::host{});
        for (std::uint64_t round = 0; round < 2; ++round) {
            o.values = mixed_input(comm.rank() + static_cast<int>(round) * 7, n);
            const codec::rounding how{stochastic, 99, round};
            const int g = blocks ? codec::encoded_all_reduce_blocks(c, comm, exec::host{}, o.values.data(), n,
                                                                    parallel, residual, beta, how)
                                 : codec::encoded_all_reduce(c, comm, o.values.data(), n, tiled, residual, beta, how);
            if (g != N) throw std::logic_error("group size");
        }
        o.traffic = comm.traffic();
    });
    return out;
}

// The same values, residual and traffic, bit for bit.
void check_same_outcome(const reduce_outcome& got, const reduce_outcome& want) {
    CHECK(bitwise_equal(got.values, want.values));
    CHECK(bitwise_equal(got.residual, want.residual));
    CHECK(got.traffic == want.traffic);
}

template <class Codec>
void check_block_form(const Codec& c, bool stochastic) {
    for (int N : {1, 2, 3, 4})
        for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{5}, std::size_t{257}, std::size_t{4099}})
            for (float beta : {0.0f, 0.75f}) {
                const auto tiled = reduce_twice(c, N, n, false, beta, stochastic);
                const auto blocks = reduce_twice(c, N, n, true, beta, stochastic);
                for (int r = 0; r < N; ++r) {
                    INFO(Codec::name, ": N = ", N, ", n = ", n, ", beta = ", beta, ", stochastic = ", stochastic,
                         ", rank ", r);
                    const auto R = static_cast<std::size_t>(r);
                    check_same_outcome(blocks[R], tiled[R]);
                    // Every worker decodes the same bytes.
                    CHECK(bitwise_equal(blocks[R].values, blocks[0].values));
                }
            }
}

} // namespace

TEST_CASE_TEMPLATE("encoded_all_reduce_blocks (the device form, run on the host): the tiled form's bits, residuals "
                   "and bytes",
                   C, codec::fp32, codec::bf16, codec::fp16, codec::fp8_e4m3, codec::fp8_e5m2, codec::fp8_block,
                   codec::int8_block, codec::int4_block, codec::sign2_block) {
    check_block_form(C{}, false);
    if constexpr (requires(const float* in, std::byte* out, const codec::philox_words& w) {
                      C{}.encode_block(in, std::size_t{}, out, w, std::size_t{});
                  })
        check_block_form(C{}, true);
}

TEST_CASE("encoded_all_reduce_blocks: other block sizes, codec::any, and the errors of the tiled form") {
    check_block_form(codec::int8_block{.block_size = 7}, true);
    check_block_form(codec::int4_block{.block_size = 300, .symmetric = false}, false);
    check_block_form(codec::any{codec::sign2_block{.block_size = 33}}, true);
    // Stochastic rounding with a codec that has none, and a scratch sized too small: the
    // same invalid_argument as the tiled form, before anything is sent.
    comm::run_local(2, [&](comm::local& comm) {
        std::vector<float> v(100, 1.0f);
        codec::block_reduce_scratch<host_space> s;
        s.reserve(codec::bf16{}, 100, 2, exec::host{});
        CHECK_THROWS_AS(codec::encoded_all_reduce_blocks(codec::bf16{}, comm, exec::host{}, v.data(), 100, s, nullptr,
                                                         0.0f, codec::rounding{true, 1, 0}),
                        invalid_argument);
        CHECK_THROWS_AS(codec::encoded_all_reduce_blocks(codec::bf16{}, comm, exec::host{}, v.data(), 101, s),
                        invalid_argument);
        CHECK(comm.traffic().calls == 0);
        CHECK(v == std::vector<float>(100, 1.0f));
    });
}

namespace {

// A source that computes its values (here: k * a[i], the way DiLoCo's outer gradient is
// computed from the parameters) and a sink that records what it is handed and how often.
struct scaled_source {
    const float* a = nullptr;
    float k = 1.0f;
    void operator()(std::size_t i, std::size_t count, float* out) const {
        for (std::size_t t = 0; t < count; ++t) out[t] = trickle::mul_rn(k, a[i + t]);
    }
};
struct recording_sink {
    float* out = nullptr;
    int* hits = nullptr;
    void operator()(std::size_t i, std::size_t count, const float* in) const {
        for (std::size_t t = 0; t < count; ++t) {
            out[i + t] = in[t];
            ++hits[i + t];
        }
    }
};

// The fused form (a source and a sink) against the array form over the source's values:
// the same sums, residuals and bytes, every value handed to the sink once.
template <class Codec>
void check_fused_form(const Codec& c, bool stochastic) {
    for (int N : {1, 2, 3})
        for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{5}, std::size_t{257}, std::size_t{4099}})
            for (float beta : {0.0f, 0.75f}) {
                std::vector<reduce_outcome> arrays(static_cast<std::size_t>(N)), fused(arrays.size());
                std::vector<std::vector<int>> hits(arrays.size());
                for (const bool with_functors : {false, true})
                    comm::run_local(N, [&](comm::local& comm) {
                        const auto R = static_cast<std::size_t>(comm.rank());
                        reduce_outcome& o = (with_functors ? fused : arrays)[R];
                        o.residual.assign(n, 0.0f);
                        float* residual = beta > 0.0f ? o.residual.data() : nullptr;
                        codec::block_reduce_scratch<host_space> s;
                        s.reserve(c, n, N, exec::host{});
                        for (std::uint64_t round = 0; round < 2; ++round) {
                            const std::vector<float> a = mixed_input(comm.rank() + static_cast<int>(round) * 5, n);
                            const scaled_source source{a.data(), 0.375f};
                            const codec::rounding how{stochastic, 41, round};
                            if (with_functors) {
                                o.values.assign(n, -1.0f);
                                hits[R].assign(n, 0);
                                codec::encoded_all_reduce_blocks_fused(c, comm, exec::host{}, n, s, source,
                                                                       recording_sink{o.values.data(), hits[R].data()},
                                                                       residual, beta, how);
                            } else {
                                o.values.resize(n);
                                source(0, n, o.values.data());
                                codec::encoded_all_reduce_blocks(c, comm, exec::host{}, o.values.data(), n, s, residual,
                                                                 beta, how);
                            }
                        }
                        o.traffic = comm.traffic();
                    });
                for (int r = 0; r < N; ++r) {
                    INFO(Codec::name, ": N = ", N, ", n = ", n, ", beta = ", beta, ", stochastic = ", stochastic,
                         ", rank ", r);
                    const auto R = static_cast<std::size_t>(r);
                    check_same_outcome(fused[R], arrays[R]);
                    CHECK(std::count(hits[R].begin(), hits[R].end(), 1) == static_cast<std::ptrdiff_t>(n));
                }
            }
}

} // namespace

TEST_CASE_TEMPLATE("encoded_all_reduce_blocks_fused: a source and a sink in place of the array, with the array "
                   "form's sums, residuals and bytes",
                   C, codec::fp32, codec::bf16, codec::fp8_e4m3, codec::fp8_block, codec::int8_block, codec::int4_block,
                   codec::sign2_block) {
    check_fused_form(C{}, false);
    if constexpr (requires(const float* in, std::byte* out, const codec::philox_words& w) {
                      C{}.encode_block(in, std::size_t{}, out, w, std::size_t{});
                  })
        check_fused_form(C{}, true);
    check_fused_form(codec::any{C{}}, false);
}

TEST_CASE("codec::fuses_values: every built-in codec takes a source and a sink (a lane coder, or single values)") {
    CHECK(codec::fuses_values(codec::fp32{}));
    CHECK(codec::fuses_values(codec::bf16{}));
    CHECK(codec::fuses_values(codec::fp8_e5m2{}));
    CHECK(codec::fuses_values(codec::int8_block{.block_size = 256}));
    CHECK(codec::fuses_values(codec::sign2_block{}));
    CHECK(codec::fuses_values(codec::any{codec::int4_block{}}));
    CHECK(codec::fuses_values(codec::any{codec::fp16{}}));
}
