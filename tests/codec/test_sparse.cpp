// codec::chunk_topk and codec::random_k: selection against a brute-force reference, index
// packing, exact payload sizes, codec::sparse_all_reduce (identical bits on every worker,
// honest bytes, comm::local's sums with k = C), shared random positions, error feedback, and
// bad parameters.
#include <trickle/codec/any.hpp>
#include <trickle/codec/codecs.hpp>
#include <trickle/codec/sparse.hpp>
#include <trickle/comm/local.hpp>

#include "test_support.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

using namespace trickle;
using trickle_test::bitwise_equal;
using trickle_test::mixed;

namespace {

constexpr float nan_f = std::numeric_limits<float>::quiet_NaN();
constexpr float inf_f = std::numeric_limits<float>::infinity();

// The kept in-chunk indices of chunk top-k, by sorting: NaN first, then |x| descending, then
// the lower index; the first min(k, m) of each chunk, ascending.
std::vector<std::uint32_t> reference_topk(const std::vector<float>& x, std::size_t C, std::size_t k) {
    std::vector<std::uint32_t> out;
    for (std::size_t c0 = 0; c0 < x.size(); c0 += C) {
        const std::size_t m = std::min(C, x.size() - c0);
        std::vector<std::uint32_t> order(m);
        std::iota(order.begin(), order.end(), 0u);
        std::sort(order.begin(), order.end(), [&](std::uint32_t a, std::uint32_t b) {
            const float xa = x[c0 + a], xb = x[c0 + b];
            const bool na = std::isnan(xa), nb = std::isnan(xb);
            if (na != nb) return na;
            if (!na) {
                const double ma = std::fabs(static_cast<double>(xa)), mb = std::fabs(static_cast<double>(xb));
                if (ma != mb) return ma > mb;
            }
            return a < b;
        });
        order.resize(std::min(k, m));
        std::sort(order.begin(), order.end());
        out.insert(out.end(), order.begin(), order.end());
    }
    return out;
}

// Values with many ties, both zeros, infinities, NaNs and negative values.
std::vector<float> tie_values(std::size_t n, std::uint32_t seed) {
    std::mt19937 g(seed);
    const float pool[] = {0.0f, -0.0f, 1.0f, -1.0f, 2.0f, -2.0f, 0.5f, -0.5f, 3.0f, -3.0f, inf_f, -inf_f, nan_f, 1e-40f};
    std::vector<float> x(n);
    for (auto& v : x) {
        const auto u = g() % 40;
        v = u < sizeof pool / sizeof pool[0] ? pool[u] : std::ldexp(static_cast<float>(g() % 2001) - 1000.0f, -9);
    }
    return x;
}

std::vector<float> smooth(int r, std::size_t n) {
    std::vector<float> v(n);
    for (std::size_t i = 0; i < n; ++i)
        v[i] = static_cast<float>(std::sin(0.013 * static_cast<double>(i) * (r + 1) + r) * (1.0 + 0.1 * r));
    return v;
}

std::vector<float> mixed_input(int r, std::size_t n) {
    std::vector<float> v(n);
    for (std::size_t i = 0; i < n; ++i) v[i] = mixed(r, i);
    return v;
}

// Runs sparse_all_reduce on N workers (inputs input(r, n)); each worker's result and traffic.
template <class Sp>
void run(const Sp& sp, int N, std::size_t n, std::vector<std::vector<float>>& out, std::vector<traffic_counters>& t,
         std::vector<float> (*input)(int, std::size_t), std::uint64_t seed = 0, std::uint64_t round = 0) {
    out.assign(static_cast<std::size_t>(N), {});
    t.assign(static_cast<std::size_t>(N), {});
    comm::run_local(N, [&](comm::local& comm) {
        auto v = input(comm.rank(), n);
        codec::sparse_scratch s;
        s.reserve(sp, n, N);
        const int g = codec::sparse_all_reduce(sp, comm, v.data(), n, s, nullptr, 0.0f, seed, round);
        if (g != N) throw std::logic_error("group size");
        out[static_cast<std::size_t>(comm.rank())] = v;
        t[static_cast<std::size_t>(comm.rank())] = comm.traffic();
    });
}

} // namespace

static_assert(codec::sparsifier_policy<codec::chunk_topk<codec::sign2_block>>);
static_assert(codec::sparsifier_policy<codec::random_k<codec::any>>);

TEST_CASE("chunk_topk selection: the brute-force order (ties by index, NaN first, negative values, partial chunks)") {
    const std::pair<std::size_t, std::size_t> params[] = {{1, 1},  {2, 1},  {3, 2},   {8, 8},   {64, 1},
                                                          {64, 4}, {64, 9}, {100, 7}, {100, 60}, {256, 3}};
    std::uint32_t seed = 1;
    for (const auto& p : params) {
        const std::size_t C = p.first, k = p.second;
        for (std::size_t n : {std::size_t{1}, C - 1 + (C == 1), C, 3 * C + C / 2 + 1, 5 * C}) {
            const auto x = tie_values(n, seed++);
            const codec::chunk_topk<> sp{.chunk = C, .k = k};
            std::vector<std::uint32_t> idx(sp.kept(n));
            std::vector<float> vals(sp.kept(n));
            std::vector<std::uint64_t> keys(C);
            sp.select(x.data(), n, idx.data(), vals.data(), keys.data());
            INFO("C = ", C, ", k = ", k, ", n = ", n);
            const auto ref = reference_topk(x, C, k);
            REQUIRE(ref.size() == sp.kept(n));
            CHECK(idx == ref);
            for (std::size_t j = 0; j < ref.size(); ++j) {
                const std::size_t pos = j / k * C + ref[j];
                CHECK(trickle::detail::float_bits(vals[j]) == trickle::detail::float_bits(x[pos]));
            }
        }
    }
}

TEST_CASE("chunk_topk selection: explicit cases") {
    const codec::chunk_topk<> sp{.chunk = 8, .k = 3};
    std::vector<std::uint32_t> idx(3);
    std::vector<std::uint64_t> keys(8);
    auto sel = [&](std::vector<float> x) {
        const std::size_t kk = sp.select_chunk(x.data(), x.size(), idx.data(), keys.data());
        return std::vector<std::uint32_t>(idx.begin(), idx.begin() + static_cast<std::ptrdiff_t>(kk));
    };
    CHECK(sel({1, -5, 2, 0, 4, -3, 0, 0}) == std::vector<std::uint32_t>{1, 4, 5});
    CHECK(sel({1, 1, 1, 1, 1, 1, 1, 1}) == std::vector<std::uint32_t>{0, 1, 2});          // ties: lower index
    CHECK(sel({-2, 2, 1, -2, 0, 0, 0, 0}) == std::vector<std::uint32_t>{0, 1, 3});        // sign ignored
    CHECK(sel({1, nan_f, inf_f, 9, -inf_f, 0, 0, 0}) == std::vector<std::uint32_t>{1, 2, 4}); // NaN above Inf
    CHECK(sel({-0.0f, 0.0f, -0.0f, 0.0f, 0, 0, 0, 0}) == std::vector<std::uint32_t>{0, 1, 2});
    CHECK(sel({5, 4}) == std::vector<std::uint32_t>{0, 1}); // a partial chunk of m < k values keeps them all
}

TEST_CASE("index packing: little-endian bit stream, round trip for C = 2, 3, 64, 100, 256, 4096 and more") {
    CHECK(codec::detail::index_bits(1) == 0);
    CHECK(codec::detail::index_bits(2) == 1);
    CHECK(codec::detail::index_bits(3) == 2);
    CHECK(codec::detail::index_bits(64) == 6);
    CHECK(codec::detail::index_bits(65) == 7);
    CHECK(codec::detail::index_bits(100) == 7);
    CHECK(codec::detail::index_bits(256) == 8);
    CHECK(codec::detail::index_bits(4096) == 12);
    CHECK(codec::detail::index_bits(std::size_t{1} << 32) == 32);
    { // the layout: 6-bit fields 1, 2, 63 -> bits 000001 | 000010 | 111111
        const std::uint32_t v[] = {1, 2, 63};
        std::byte out[3] = {};
        codec::detail::pack_bits(v, 3, 6, out);
        CHECK(std::to_integer<unsigned>(out[0]) == 0x81u); // 1 | (2 << 6)
        CHECK(std::to_integer<unsigned>(out[1]) == 0xf0u); // (2 >> 2) | (63 << 4)
        CHECK(std::to_integer<unsigned>(out[2]) == 0x03u); // 63 >> 4, then zero bits
    }
    std::mt19937_64 g(7);
    for (std::uint64_t C : {2ull, 3ull, 64ull, 100ull, 256ull, 4096ull, 5ull, 1000003ull, 1ull << 32})
        for (std::size_t count : {0, 1, 2, 3, 7, 8, 9, 63, 64, 65, 1000}) {
            const unsigned b = codec::detail::index_bits(C);
            std::vector<std::uint32_t> v(count), w(count, 12345u);
            for (auto& x : v) x = static_cast<std::uint32_t>(g() % C);
            if (count > 0) v[0] = static_cast<std::uint32_t>(C - 1); // the largest index
            const std::size_t bytes = codec::detail::packed_bytes(count, b);
            CHECK(bytes == (count * b + 7) / 8);
            std::vector<std::byte> buf(bytes + 1, std::byte{0xA5});
            codec::detail::pack_bits(v.data(), count, b, buf.data());
            CHECK(buf[bytes] == std::byte{0xA5}); // nothing past packed_bytes
            if (count * b % 8 != 0) // the unused high bits of the last byte are zero
                CHECK((std::to_integer<unsigned>(buf[bytes - 1]) >> (count * b % 8)) == 0u);
            codec::detail::unpack_bits(buf.data(), count, b, w.data());
            INFO("C = ", C, ", count = ", count);
            CHECK(v == w);
        }
}

TEST_CASE("chunk_topk payload: exact bytes, round trip") {
    // C = 64, k = 4, fp32: 6-bit indices, 4-byte values.
    const codec::chunk_topk<> a{.chunk = 64, .k = 4};
    CHECK(a.index_bits() == 6);
    CHECK(a.payload_bytes(0) == 0);
    CHECK(a.payload_bytes(128) == 8 + 32);       // 48 bits -> 6 bytes -> 8; 8 values
    CHECK(a.payload_bytes(130) == 8 + 40);       // 10 kept: 60 bits -> 8 bytes; 10 values
    CHECK(a.payload_bytes(64 * 1000) == 3000 + 16000);
    // 2-bit values, one sign2 record (4-byte scale + 1 byte of codes, padded to 8) per chunk.
    const codec::chunk_topk<codec::sign2_block> b{.chunk = 64, .k = 4};
    CHECK(b.payload_bytes(128) == 8 + 16);
    CHECK(b.payload_bytes(64 * 1000 + 3) == 3004 + 8000 + 8); // 4003 kept: 24018 bits -> 3003 bytes -> 3004
    // block_size < k: two records per chunk.
    const codec::chunk_topk<codec::int8_block> c{.chunk = 100, .k = 10, .values = {.block_size = 8}};
    CHECK(c.payload_bytes(200) == 20 + 2 * (12 + 8)); // 20 kept * 7 bits = 140 bits -> 18 -> 20
    // fp8 values, k = 1: 6 bits and 1 byte a chunk.
    CHECK(codec::chunk_topk<codec::fp8_e4m3>{.chunk = 64, .k = 1}.payload_bytes(64 * 1000) == 752 + 1000);
    // bf16 values: 2 bytes each, one array for all (k % 1 == 0).
    const codec::chunk_topk<codec::bf16> d{.chunk = 3, .k = 2};
    CHECK(d.payload_bytes(7) == 4 + 2 * 5); // 5 kept * 2 bits -> 2 bytes -> 4

    auto roundtrip = [](const auto& sp, std::size_t n) {
        std::vector<float> x = smooth(3, n);
        x[n / 2] = -7.0f;
        codec::sparse_scratch s;
        s.reserve(sp, n, 1);
        std::vector<std::byte> wire(sp.payload_bytes(n) + 3, std::byte{0x5A});
        sp.encode(x.data(), n, wire.data() + 1, s);
        CHECK(wire[0] == std::byte{0x5A});
        CHECK(wire[wire.size() - 2] == std::byte{0x5A}); // encode wrote exactly payload_bytes(n)
        std::vector<float> y(n, 99.0f);
        sp.decode(wire.data() + 1, n, y.data(), s);
        const auto ref = reference_topk(x, sp.chunk, sp.k);
        std::vector<char> kept(n, 0);
        for (std::size_t j = 0; j < ref.size(); ++j) kept[j / sp.k * sp.chunk + ref[j]] = 1;
        std::size_t nonzero = 0;
        for (std::size_t i = 0; i < n; ++i) {
            if (!kept[i]) CHECK(trickle::detail::float_bits(y[i]) == 0u); // +0 where nothing was sent
            nonzero += kept[i];
        }
        CHECK(nonzero == sp.kept(n));
        return std::make_pair(x, y);
    };
    for (std::size_t n : {1, 63, 64, 65, 1000, 4097}) {
        auto [x, y] = roundtrip(a, n);
        const auto ref = reference_topk(x, 64, 4);
        for (std::size_t j = 0; j < ref.size(); ++j) {
            const std::size_t pos = j / 4 * 64 + ref[j];
            CHECK(y[pos] == x[pos]); // fp32 values: exact
        }
        roundtrip(b, n);
        roundtrip(c, n);
        roundtrip(codec::chunk_topk<codec::any>{.chunk = 64, .k = 4, .values = codec::int4_block{.block_size = 4}}, n);
    }
}

TEST_CASE("chunk_topk sparse_all_reduce: identical bits on every worker, rank-order sums, (N - 1) payloads of bytes") {
    const codec::chunk_topk<> sp{.chunk = 64, .k = 4};
    for (int N = 1; N <= 5; ++N)
        for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{100}, std::size_t{1000}}) {
            std::vector<std::vector<float>> got;
            std::vector<traffic_counters> t;
            run(sp, N, n, got, t, smooth);
            // Reference: every worker's dense top-k, assigned for rank 0 then added in rank order.
            std::vector<float> ref(n, 0.0f);
            for (int r = 0; r < N; ++r) {
                const auto x = smooth(r, n);
                const auto idx = reference_topk(x, 64, 4);
                std::vector<float> dense(n, 0.0f);
                for (std::size_t j = 0; j < idx.size(); ++j) dense[j / 4 * 64 + idx[j]] = x[j / 4 * 64 + idx[j]];
                for (std::size_t i = 0; i < n; ++i) ref[i] = r == 0 ? dense[i] : ref[i] + dense[i];
            }
            for (int r = 0; r < N; ++r) {
                INFO("N = ", N, ", n = ", n, ", rank ", r);
                CHECK(bitwise_equal(got[static_cast<std::size_t>(r)], ref));
                CHECK(t[static_cast<std::size_t>(r)].bytes_sent ==
                      static_cast<std::uint64_t>(N - 1) * sp.payload_bytes(n));
                CHECK(t[static_cast<std::size_t>(r)].bytes_received == t[static_cast<std::size_t>(r)].bytes_sent);
                CHECK(t[static_cast<std::size_t>(r)].calls == (n == 0 ? 0u : 1u));
            }
        }
}

TEST_CASE("chunk_topk with k = C and fp32 values: comm::local all_reduce_sum's bits") {
    for (std::size_t C : {1, 3, 64})
        for (int N = 1; N <= 5; ++N)
            for (std::size_t n : {std::size_t{1}, std::size_t{7}, std::size_t{1001}}) {
                std::vector<std::vector<float>> got, ref(static_cast<std::size_t>(N));
                std::vector<traffic_counters> t;
                run(codec::chunk_topk<>{.chunk = C, .k = C}, N, n, got, t, mixed_input);
                comm::run_local(N, [&](comm::local& comm) {
                    auto v = mixed_input(comm.rank(), n);
                    comm.all_reduce_sum(v.data(), n);
                    ref[static_cast<std::size_t>(comm.rank())] = v;
                });
                for (int r = 0; r < N; ++r) {
                    INFO("C = ", C, ", N = ", N, ", n = ", n, ", rank ", r);
                    CHECK(bitwise_equal(got[static_cast<std::size_t>(r)], ref[static_cast<std::size_t>(r)]));
                }
            }
}

TEST_CASE_TEMPLATE("chunk_topk through a lossy value codec: the same bits everywhere, bytes as announced", V,
                   codec::bf16, codec::fp8_e4m3, codec::int8_block, codec::int4_block, codec::sign2_block,
                   codec::any) {
    const int N = 4;
    const std::size_t n = 3001;
    const codec::chunk_topk<V> sp{.chunk = 64, .k = 3};
    std::vector<std::vector<float>> got;
    std::vector<traffic_counters> t;
    run(sp, N, n, got, t, smooth);
    for (int r = 1; r < N; ++r) CHECK(bitwise_equal(got[static_cast<std::size_t>(r)], got[0]));
    CHECK(t[0].bytes_sent == 3 * sp.payload_bytes(n));
    std::size_t nonzero = 0;
    for (float v : got[0]) nonzero += v != 0.0f;
    CHECK(nonzero > 0);
    CHECK(nonzero <= static_cast<std::size_t>(N) * sp.kept(n));
}

TEST_CASE("random_k: the same positions on every worker, new ones every round, round(p n) of them") {
    const codec::random_k<> sp{.fraction = 0.05};
    const std::size_t n = 1000;
    CHECK(sp.kept(n) == 50);
    CHECK(sp.kept(3) == 1); // at least one
    CHECK(sp.payload_bytes(n) == 200);
    CHECK(codec::random_k<codec::int8_block>{.fraction = 0.05}.payload_bytes(n) == 4 + 52);
    const int N = 4;
    std::vector<std::vector<std::uint64_t>> pos(N);
    comm::run_local(N, [&](comm::local& comm) {
        std::vector<std::uint64_t> p;
        for (std::uint64_t round = 0; round < 3; ++round) {
            std::vector<std::uint64_t> q(sp.kept(n));
            sp.positions(n, 42, round, q.data());
            p.insert(p.end(), q.begin(), q.end());
        }
        pos[static_cast<std::size_t>(comm.rank())] = p;
    });
    for (int r = 1; r < N; ++r) CHECK(pos[static_cast<std::size_t>(r)] == pos[0]);
    const std::size_t K = sp.kept(n);
    std::vector<std::set<std::uint64_t>> rounds(3);
    for (std::size_t round = 0; round < 3; ++round) {
        rounds[round] = std::set<std::uint64_t>(pos[0].begin() + static_cast<std::ptrdiff_t>(round * K),
                                                pos[0].begin() + static_cast<std::ptrdiff_t>((round + 1) * K));
        CHECK(rounds[round].size() == K); // distinct
        CHECK(*rounds[round].rbegin() < n);
    }
    CHECK(rounds[0] != rounds[1]);
    CHECK(rounds[1] != rounds[2]);
    std::vector<std::uint64_t> other(K);
    sp.positions(n, 43, 0, other.data());
    CHECK(std::set<std::uint64_t>(other.begin(), other.end()) != rounds[0]); // another seed, other positions
}

TEST_CASE("random_k sparse_all_reduce: the packed all-reduce's bits at the positions, zeros elsewhere") {
    const std::size_t n = 2000;
    for (int N = 1; N <= 5; ++N) {
        const codec::random_k<> sp{.fraction = 0.03};
        std::vector<std::vector<float>> got;
        std::vector<traffic_counters> t;
        run(sp, N, n, got, t, mixed_input, 9, 5);
        const std::size_t K = sp.kept(n);
        std::vector<std::uint64_t> pos(K);
        sp.positions(n, 9, 5, pos.data());
        std::vector<float> ref_packed;
        comm::run_local(N, [&](comm::local& comm) {
            const auto x = mixed_input(comm.rank(), n);
            std::vector<float> p(K);
            for (std::size_t j = 0; j < K; ++j) p[j] = x[pos[j]];
            comm.all_reduce_sum(p.data(), K);
            if (comm.rank() == 0) ref_packed = p;
        });
        std::vector<float> ref(n, 0.0f);
        for (std::size_t j = 0; j < K; ++j) ref[pos[j]] = ref_packed[j];
        for (int r = 0; r < N; ++r) {
            INFO("N = ", N, ", rank ", r);
            CHECK(bitwise_equal(got[static_cast<std::size_t>(r)], ref));
            CHECK(t[static_cast<std::size_t>(r)].bytes_sent == trickle::detail::all_reduce_bytes(K, 4, N, r));
        }
        // Through int8: the same bits everywhere, 2 (N - 1) slots of bytes.
        const codec::random_k<codec::int8_block> q{.fraction = 0.03};
        run(q, N, n, got, t, smooth, 9, 5);
        for (int r = 1; r < N; ++r) CHECK(bitwise_equal(got[static_cast<std::size_t>(r)], got[0]));
        CHECK(t[0].bytes_sent ==
              2 * static_cast<std::uint64_t>(N - 1) * codec::reduce_scratch::slot_bytes(q.values, K, N));
        std::size_t nonzero = 0;
        for (float v : got[0]) nonzero += v != 0.0f;
        CHECK(nonzero <= K);
        CHECK(nonzero > K / 2);
    }
}

TEST_CASE("error feedback: unsent values are carried over whole, the running mean converges to the signal") {
    const std::size_t n = 640;
    std::vector<float> signal(n);
    for (std::size_t i = 0; i < n; ++i) signal[i] = static_cast<float>(std::sin(0.3 * static_cast<double>(i)) + 0.2);
    comm::local_world world(1);
    auto comm = world.rank(0);

    SUBCASE("the residual after one call: e - sent") {
        const codec::chunk_topk<> sp{.chunk = 64, .k = 4};
        codec::sparse_scratch s;
        s.reserve(sp, n, 1);
        std::vector<float> v = signal, r(n, 0.5f);
        std::vector<float> e(n);
        for (std::size_t i = 0; i < n; ++i) e[i] = signal[i] + 0.5f * 0.5f;
        codec::sparse_all_reduce(sp, comm, v.data(), n, s, r.data(), 0.5f);
        for (std::size_t i = 0; i < n; ++i) {
            if (v[i] != 0.0f) {
                CHECK(v[i] == e[i]); // sent exactly (fp32), nothing left
                CHECK(r[i] == 0.0f);
            } else {
                CHECK(r[i] == e[i]); // not sent: carried over whole
            }
        }
        // random_k the same way.
        const codec::random_k<> rk{.fraction = 0.1};
        codec::sparse_scratch s2;
        s2.reserve(rk, n, 1);
        v = signal;
        std::fill(r.begin(), r.end(), 0.5f);
        codec::sparse_all_reduce(rk, comm, v.data(), n, s2, r.data(), 0.5f, 1, 2);
        std::size_t sent = 0;
        for (std::size_t i = 0; i < n; ++i) {
            if (v[i] != 0.0f) {
                CHECK(r[i] == 0.0f);
                ++sent;
            } else {
                CHECK(r[i] == e[i]);
            }
        }
        CHECK(sent == rk.kept(n));
    }

    auto mean_error = [&](const auto& sp, bool feedback, int rounds) {
        codec::sparse_scratch s;
        s.reserve(sp, n, 1);
        std::vector<float> residual(n, 0.0f);
        std::vector<double> total(n, 0.0);
        for (int k = 0; k < rounds; ++k) {
            std::vector<float> v = signal;
            codec::sparse_all_reduce(sp, comm, v.data(), n, s, feedback ? residual.data() : nullptr, 1.0f, 7,
                                     static_cast<std::uint64_t>(k));
            for (std::size_t i = 0; i < n; ++i) total[i] += v[i];
        }
        double err = 0.0;
        for (std::size_t i = 0; i < n; ++i) err = std::max(err, std::abs(total[i] / rounds - signal[i]));
        return err;
    };
    SUBCASE("chunk top-k, fp32 and 2-bit values") {
        const codec::chunk_topk<> a{.chunk = 64, .k = 4};
        const codec::chunk_topk<codec::sign2_block> b{.chunk = 64, .k = 4};
        for (int which = 0; which < 2; ++which) {
            const double without = which == 0 ? mean_error(a, false, 400) : mean_error(b, false, 400);
            const double with = which == 0 ? mean_error(a, true, 400) : mean_error(b, true, 400);
            INFO("values ", std::string(which == 0 ? "fp32" : "sign2"), ": max error of the mean without feedback ", without,
                 ", with ", with);
            CHECK(without > 0.5);
            CHECK(with < 0.1 * without);
        }
    }
    SUBCASE("random-k, fp32 and int8 values") {
        const double without = mean_error(codec::random_k<>{.fraction = 0.1}, false, 2000);
        const double with = mean_error(codec::random_k<>{.fraction = 0.1}, true, 2000);
        const double with8 = mean_error(codec::random_k<codec::int8_block>{.fraction = 0.1}, true, 2000);
        INFO("max error of the mean without feedback ", without, ", with ", with, ", with int8 values ", with8);
        CHECK(without > 0.5);
        CHECK(with < 0.1 * without);
        CHECK(with8 < 0.1 * without);
    }
}

TEST_CASE("sparsifiers: bad parameters give clear errors") {
    auto err = [](const auto& sp) {
        config_record rec("test");
        sp.describe(rec);
        return rec.error();
    };
    CHECK(err(codec::chunk_topk<>{}).empty());
    CHECK(err(codec::chunk_topk<>{.chunk = 0}) == "codec::chunk_topk: chunk must be >= 1, got 0");
    CHECK(err(codec::chunk_topk<>{.chunk = 64, .k = 0}) == "codec::chunk_topk: k must be >= 1, got 0");
    CHECK(err(codec::chunk_topk<>{.chunk = 64, .k = 65}) == "codec::chunk_topk: k must be <= chunk, got k = 65 > chunk = 64");
    CHECK(err(codec::chunk_topk<codec::sign2_block>{.chunk = 64, .k = 4, .values = {.block_size = 0}}) ==
          "codec::chunk_topk: value codec: codec::sign2: block_size must be >= 1, got 0");
    CHECK(err(codec::random_k<>{}).empty());
    CHECK(err(codec::random_k<>{.fraction = 0.0}) == "codec::random_k: fraction must be in (0, 1], got 0");
    CHECK(err(codec::random_k<>{.fraction = 1.5}) == "codec::random_k: fraction must be in (0, 1], got 1.5");
    CHECK(err(codec::random_k<>{.fraction = std::nan("")}).rfind("codec::random_k: fraction must be in (0, 1]", 0) == 0);
    CHECK(err(codec::random_k<codec::int8_block>{.fraction = 0.1, .values = {.block_size = 0}}) ==
          "codec::random_k: value codec: codec::int8: block_size must be >= 1, got 0");

    // The record names every parameter, the value codec's under sparse_values_.
    config_record rec("test");
    codec::chunk_topk<codec::sign2_block>{.chunk = 32, .k = 2}.describe(rec);
    CHECK(rec.serialize() == "test\nsparsifier=chunk_topk\nsparse_chunk=32\nsparse_k=2\nsparse_values_codec=sign2\n"
                             "sparse_values_codec_block_size=64\nsparse_values_codec_scheme=midrise\n!");

    // sparse_all_reduce refuses them with the same message, before any communication.
    comm::local_world world(1);
    auto comm = world.rank(0);
    std::vector<float> v(100, 1.0f);
    codec::sparse_scratch s;
    CHECK_THROWS_WITH_AS(codec::sparse_all_reduce(codec::chunk_topk<>{.chunk = 8, .k = 9}, comm, v.data(), 100, s),
                         "codec::chunk_topk: k must be <= chunk, got k = 9 > chunk = 8", invalid_argument);
    CHECK_THROWS_WITH_AS(codec::sparse_all_reduce(codec::random_k<>{.fraction = 0.0}, comm, v.data(), 100, s),
                         "codec::random_k: fraction must be in (0, 1], got 0", invalid_argument);
    // An unreserved scratch is refused too.
    CHECK_THROWS_AS(codec::sparse_all_reduce(codec::chunk_topk<>{}, comm, v.data(), 100, s), invalid_argument);
    CHECK(comm.traffic().calls == 0);
}
