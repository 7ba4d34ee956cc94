// codec::encoded_link: a codec's bytes through the rounds of the ring, gossip, exponential
// and islands topologies. Each worker's result is checked against a reference computed
// here from the codec's own encode and decode (the chain of an island, the ring's three
// terms); members of a group hold identical bits; bytes are the padded encodings; SPARTA
// and DiLoCo (with error feedback) run through them on comm::local.
#include <trickle/codec.hpp>
#include <trickle/comm/local.hpp>
#include <trickle/trickle.hpp>

#include "test_support.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

using namespace trickle;
using trickle_test::bitwise_equal;

namespace {

using host_ws = workspace<float, host_space, 4>;

std::vector<float> payload(int r, std::size_t m, std::uint64_t t) {
    std::vector<float> v(m);
    for (std::size_t i = 0; i < m; ++i)
        v[i] = static_cast<float>(std::sin(0.37 * static_cast<double>(i) + 1.1 * r + 0.5 * static_cast<double>(t)) *
                                  (0.5 + r));
    return v;
}

// What the codec delivers of v: decode(encode(v)).
template <class C>
std::vector<float> delivered(const C& c, const std::vector<float>& v) {
    std::vector<std::byte> wire(c.wire_bytes(v.size()));
    std::vector<float> out(v.size());
    c.encode(v.data(), v.size(), wire.data());
    c.decode(wire.data(), v.size(), out.data());
    return out;
}

std::vector<float> plus(const std::vector<float>& a, const std::vector<float>& b) {
    std::vector<float> s(a.size());
    for (std::size_t i = 0; i < a.size(); ++i) s[i] = a[i] + b[i];
    return s;
}

struct seen {
    std::vector<float> values;
    traffic_counters traffic;
    int group = 0;
};

template <class Top, class C>
std::vector<seen> run_link(const Top& top, const C& c, int N, std::size_t m, std::uint64_t t) {
    std::vector<seen> out(static_cast<std::size_t>(N));
    comm::run_local(N, [&](comm::local& comm) {
        host_ws ws;
        detail::reserve_topology_scratch<Top>(ws, m);
        codec::encoded_link<C, host_space> link;
        link.reserve(c, m, exec::host{});
        link.begin(nullptr, 0.0f, {}, comm.rank());
        seen& s = out[static_cast<std::size_t>(comm.rank())];
        s.values = payload(comm.rank(), m, t);
        s.group = detail::topology_reduce(top, exec::host{}, comm, s.values.data(), m, ws, reduce_context{5, t}, link);
        s.traffic = comm.traffic();
    });
    return out;
}

// The reference result of rank r: its group's sum as the link computes it.
template <class Top, class C>
std::vector<float> reference(const Top& top, const C& c, int N, int r, std::size_t m, std::uint64_t t) {
    const auto x = [&](int q) { return payload(q, m, t); };
    if constexpr (std::is_same_v<Top, topology::ring>) {
        const int left = (r + N - 1) % N, right = (r + 1) % N;
        if (N == 2) return plus(delivered(c, x(r)), delivered(c, x(left)));
        const auto l = delivered(c, x(left)), me = delivered(c, x(r)), rt = delivered(c, x(right));
        std::vector<float> s(m);
        for (std::size_t i = 0; i < m; ++i) s[i] = l[i] + me[i] + rt[i];
        return s;
    } else {
        if constexpr (std::is_same_v<Top, topology::islands>) {
            // The island in its order: a pair, or a chain of running sums.
            std::vector<int> order;
            int first = r;
            for (detail::group_place p = top.place(r, N, 5, t); p.prev >= 0; p = top.place(p.prev, N, 5, t))
                first = p.prev;
            for (int q = first; q >= 0; q = top.place(q, N, 5, t).next) order.push_back(q);
            if (order.size() == 1) return x(r);
            if (top.size == 2) return plus(delivered(c, x(r)), delivered(c, x(r == order[0] ? order[1] : order[0])));
            std::vector<float> s = x(order[0]);
            for (std::size_t j = 1; j < order.size(); ++j) s = plus(x(order[j]), delivered(c, s));
            return delivered(c, s);
        } else {
            const int p = std::is_same_v<Top, topology::gossip> ? topology::gossip::partner(r, N, 5, t)
                                                                 : topology::exponential::partner(r, N, t);
            if (p < 0) return x(r);
            return plus(delivered(c, x(r)), delivered(c, x(p)));
        }
    }
}

template <class Top, class C>
void check_topology(const Top& top, const C& c, int N) {
    const std::size_t m = 301;
    const std::uint64_t padded = (c.wire_bytes(m) + 3) / 4 * 4;
    for (std::uint64_t t = 0; t < 3; ++t) {
        const auto out = run_link(top, c, N, m, t);
        for (int r = 0; r < N; ++r) {
            INFO(std::string(Top::name), " with ", std::string(C::name), ": N = ", N, ", exchange ", t, ", rank ", r);
            const seen& s = out[static_cast<std::size_t>(r)];
            CHECK(bitwise_equal(s.values, reference(top, c, N, r, m, t)));
            // Every send is the padded encoding, never fp32.
            CHECK(s.traffic.bytes_sent % padded == 0);
            if (s.group > 1) CHECK(s.traffic.bytes_sent > 0);
        }
    }
}

} // namespace

TEST_CASE_TEMPLATE("encoded_link through each topology: the codec's values, identical bits within a group, padded "
                   "encodings on the wire",
                   C, codec::bf16, codec::fp8_e4m3, codec::int8_block, codec::sign2_block) {
    const C c{};
    for (int N : {2, 3, 5, 6}) {
        check_topology(topology::gossip{}, c, N);
        check_topology(topology::exponential{}, c, N);
        check_topology(topology::ring{}, c, N);
        check_topology(topology::islands{.size = 2}, c, N);
        if (N >= 3) check_topology(topology::islands{.size = 3}, c, N);
        check_topology(topology::islands{.size = N}, c, N);
    }
}

TEST_CASE("encoded_link: codec::any, stochastic rounding only where the codec has it, capacity checked") {
    check_topology(topology::islands{.size = 3}, codec::any{codec::int4_block{.block_size = 17}}, 5);
    comm::run_local(2, [&](comm::local& comm) {
        host_ws ws;
        detail::reserve_topology_scratch<topology::gossip>(ws, 64);
        std::vector<float> v(64, 1.0f);
        codec::encoded_link<codec::bf16, host_space> link;
        link.reserve(codec::bf16{}, 64, exec::host{});
        link.begin(nullptr, 0.0f, codec::rounding{true, 1, 0}, comm.rank());
        CHECK_THROWS_AS(detail::topology_reduce(topology::gossip{}, exec::host{}, comm, v.data(), 64, ws,
                                                reduce_context{}, link),
                        invalid_argument);
        link.begin(nullptr, 0.0f, {}, comm.rank());
        std::vector<float> big(65, 1.0f);
        CHECK_THROWS_AS(link.prepare(exec::host{}, comm, big.data(), 65), invalid_argument);
    });
}

namespace {

struct replica {
    std::vector<float> w;
    param_group<float> group;
    explicit replica(int r, std::size_t n = 777) : w(n) {
        for (std::size_t i = 0; i < n; ++i) w[i] = 0.5f * std::sin(0.03f * static_cast<float>(i) + static_cast<float>(r));
        group.add("w", w.data(), n);
    }
    void train(int r, int t) {
        for (std::size_t i = 0; i < w.size(); ++i)
            w[i] += 0.01f * static_cast<float>(std::sin(0.1 * static_cast<double>(i) * (r + 1) + 0.3 * t));
    }
};

// N workers train their replicas rs (made here) for `steps` steps with the algorithm make
// builds; returns each worker's stats.
template <class Make>
std::vector<exchange_stats> train_replicas(int N, int steps, std::vector<replica>& rs, Make make) {
    rs.clear();
    for (int r = 0; r < N; ++r) rs.emplace_back(r);
    std::vector<exchange_stats> st(static_cast<std::size_t>(N));
    comm::run_local(N, [&](comm::local& c) {
        const auto R = static_cast<std::size_t>(c.rank());
        auto alg = make(rs[R].group, c);
        for (int t = 0; t < steps; ++t) {
            rs[R].train(c.rank(), t);
            alg.step(exec::host{});
        }
        st[R] = alg.stats();
    });
    return st;
}

double spread(const std::vector<replica>& rs) {
    double worst = 0;
    for (std::size_t i = 0; i < rs[0].w.size(); ++i)
        for (const auto& r : rs) worst = std::max(worst, std::abs(double(r.w[i]) - double(rs[0].w[i])));
    return worst;
}

} // namespace

TEST_CASE("SPARTA and DiLoCo through gossip and islands with a codec: fewer bytes, replicas converge like fp32") {
    const int N = 4, steps = 40;
    // The same run in fp32 and through the codec; compare bytes and the replicas' spread.
    const auto run = [&](auto make) {
        std::vector<replica> rs;
        const auto st = train_replicas(N, steps, rs, make);
        return std::make_pair(spread(rs), st[0].total.bytes_sent);
    };
    const auto [s_fp32, b_fp32] = run([](auto& g, auto& c) {
        return sparta<sampler::uniform, schedule::constant, topology::gossip>(g, c, {.fraction = 0.5, .seed = 1});
    });
    const auto [s_bf16, b_bf16] = run([](auto& g, auto& c) {
        return sparta<sampler::uniform, schedule::constant, topology::gossip, codec::bf16>(g, c,
                                                                                           {.fraction = 0.5, .seed = 1});
    });
    // 2 bytes a value instead of 4, plus 2 bytes of padding for an odd count.
    CHECK(static_cast<double>(b_bf16) / static_cast<double>(b_fp32) == doctest::Approx(0.5).epsilon(0.01));
    CHECK(b_bf16 * 2 >= b_fp32);
    CHECK(s_bf16 < 2 * s_fp32 + 1e-3);
    const auto [d_fp32, db_fp32] = run([](auto& g, auto& c) {
        return diloco<outer::nesterov, topology::islands>(g, c, {.interval = 5, .seed = 2}, {}, topology::islands{.size = 3});
    });
    const auto [d_int8, db_int8] = run([](auto& g, auto& c) {
        return diloco<outer::nesterov, topology::islands, codec::int8_block>(
            g, c, {.interval = 5, .seed = 2, .error_feedback = 1.0}, {}, topology::islands{.size = 3});
    });
    CHECK(db_int8 * 3 < db_fp32);
    CHECK(d_int8 < 2 * d_fp32 + 1e-3);
}

TEST_CASE("DiLoCo through a link keeps its error-feedback residual in the checkpoint; a resumed run continues bit for "
          "bit") {
    const int N = 3;
    using algo = diloco<outer::nesterov, topology::ring, codec::int4_block>;
    const diloco_options opts{.interval = 2, .seed = 9, .error_feedback = 0.7};
    std::vector<replica> straight, resumed;
    for (int r = 0; r < N; ++r) {
        straight.emplace_back(r);
        resumed.emplace_back(r);
    }
    comm::run_local(N, [&](comm::local& c) {
        const auto R = static_cast<std::size_t>(c.rank());
        algo a(straight[R].group, c, opts);
        algo b(resumed[R].group, c, opts);
        for (int t = 0; t < 6; ++t) {
            straight[R].train(c.rank(), t);
            resumed[R].train(c.rank(), t);
            a.step(exec::host{});
            b.step(exec::host{});
        }
        std::stringstream ckpt;
        b.save(ckpt);
        diloco_options later = opts;
        later.broadcast_initial = false;
        algo b2(resumed[R].group, c, later);
        b2.load(ckpt);
        for (int t = 6; t < 12; ++t) {
            straight[R].train(c.rank(), t);
            resumed[R].train(c.rank(), t);
            a.step(exec::host{});
            b2.step(exec::host{});
        }
    });
    for (int r = 0; r < N; ++r) CHECK(bitwise_equal(straight[static_cast<std::size_t>(r)].w, resumed[static_cast<std::size_t>(r)].w));
}

TEST_CASE("stats().sent splits every byte sent into codes, scales, indices and padding") {
    const int N = 3, steps = 8;
    using codec::wire_parts;
    const auto run = [&](auto make) {
        std::vector<replica> rs;
        const auto st = train_replicas(N, steps, rs, make);
        for (int r = 0; r < N; ++r) {
            INFO("rank ", r);
            const exchange_stats& s = st[static_cast<std::size_t>(r)];
            CHECK(s.total.bytes_sent > 0);
            CHECK(s.sent.total() == s.total.bytes_sent);
        }
        return st[1].sent;
    };
    const wire_parts plain = run([](auto& g, auto& c) { return sparta<>(g, c, {.fraction = 0.1, .seed = 1}); });
    CHECK(plain.scales + plain.indices + plain.padding == 0);
    const wire_parts int8 = run([](auto& g, auto& c) {
        return sparta<sampler::uniform, schedule::constant, topology::all_reduce, codec::int8_block>(
            g, c, {.fraction = 0.5, .seed = 1});
    });
    CHECK(int8.scales > 0);
    CHECK(int8.indices == 0);
    CHECK(static_cast<double>(int8.scales) / static_cast<double>(int8.codes) == doctest::Approx(4.0 / 64).epsilon(0.2));
    const wire_parts gossip = run([](auto& g, auto& c) {
        return sparta<sampler::uniform, schedule::constant, topology::gossip, codec::bf16>(g, c, {.fraction = 0.5, .seed = 1});
    });
    CHECK(gossip.scales == 0);
    CHECK(gossip.padding > 0); // 777 / 2 is odd on some steps: 2 bytes of padding a send
    const wire_parts ring = run([](auto& g, auto& c) {
        return diloco<outer::nesterov, topology::ring, codec::sign2_block>(g, c, {.interval = 2, .error_feedback = 1.0});
    });
    CHECK(ring.scales > 0); // block scales and the weights' sum
    using topk = codec::chunk_topk<codec::sign2_block>;
    const wire_parts sparse = run([](auto& g, auto& c) {
        return diloco<outer::nesterov, topology::all_reduce, topk>(g, c, {.interval = 2, .error_feedback = 1.0}, {}, {},
                                                                   topk{.chunk = 64, .k = 4, .values = {.block_size = 4}});
    });
    CHECK(sparse.indices > 0);
    CHECK(sparse.scales > 0);
    const wire_parts rk = run([](auto& g, auto& c) {
        using rk_t = codec::random_k<codec::int8_block>;
        return diloco<outer::nesterov, topology::all_reduce, rk_t>(g, c, {.interval = 2}, {}, {},
                                                                   rk_t{.fraction = 0.1, .values = {}});
    });
    CHECK(rk.indices == 0);
    const wire_parts both = run([](auto& g, auto& c) {
        return sparta_diloco<sampler::uniform, schedule::constant, topology::islands, outer::nesterov, codec::fp8_e4m3,
                             codec::int4_block>(g, c, {.fraction = 0.2, .seed = 2}, {.interval = 4, .seed = 2},
                                                {}, {}, topology::islands{.size = 2});
    });
    CHECK(both.codes > 0);
}
