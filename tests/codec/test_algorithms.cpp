// SPARTA, DiLoCo and SPARTA + DiLoCo with codecs: identical replicas, honest bytes, error
// feedback through checkpoints, and bad configurations refused on every worker.
#include <trickle/trickle.hpp>

#include "test_support.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

using namespace trickle;
using trickle_test::run_collect_errors;

namespace {

template <class T>
struct model {
    std::vector<T> a, b;
    param_group<T> group;
    model(int r, std::size_t na = 600, std::size_t nb = 250) : a(na), b(nb) {
        for (std::size_t i = 0; i < na; ++i) a[i] = from_float<T>(0.5f * std::sin(0.05f * static_cast<float>(i) + r));
        for (std::size_t i = 0; i < nb; ++i) b[i] = from_float<T>(0.25f * std::cos(0.07f * static_cast<float>(i) - r));
        group.add("a", a.data(), na).add("b", b.data(), nb);
    }
    std::size_t size() const { return a.size() + b.size(); }
    float get(std::size_t i) const { return to_float(i < a.size() ? a[i] : b[i - a.size()]); }
    void set(std::size_t i, float v) { (i < a.size() ? a[i] : b[i - a.size()]) = from_float<T>(v); }
    void train(int r, int t) {
        for (std::size_t i = 0; i < size(); ++i)
            set(i, get(i) + 0.01f * static_cast<float>(std::sin(0.1 * static_cast<double>(i) * (r + 1) + 0.3 * t)));
    }
    std::vector<float> values() const {
        std::vector<float> v(size());
        for (std::size_t i = 0; i < size(); ++i) v[i] = get(i);
        return v;
    }
};

template <class T>
bool same_bits(const model<T>& x, const model<T>& y) {
    return std::memcmp(x.a.data(), y.a.data(), x.a.size() * sizeof(T)) == 0 &&
           std::memcmp(x.b.data(), y.b.data(), x.b.size() * sizeof(T)) == 0;
}

// Two fp32 runs side by side on N workers: make_a(group, comm) and make_b(group, comm)
// build each worker's two algorithms over its replicas a[r] and b[r] (which start and train
// alike), and both step `steps` times. Returns each run's stats per worker.
struct pair_stats {
    std::vector<exchange_stats> a, b;
};
template <class MakeA, class MakeB>
pair_stats side_by_side(int N, int steps, std::vector<model<float>>& a, std::vector<model<float>>& b, MakeA make_a,
                        MakeB make_b) {
    a.clear();
    b.clear();
    for (int r = 0; r < N; ++r) {
        a.emplace_back(r);
        b.emplace_back(r);
    }
    pair_stats out{std::vector<exchange_stats>(static_cast<std::size_t>(N)),
                   std::vector<exchange_stats>(static_cast<std::size_t>(N))};
    comm::run_local(N, [&](comm::local& c) {
        const int r = c.rank();
        auto x = make_a(a[r].group, c);
        auto y = make_b(b[r].group, c);
        for (int t = 0; t < steps; ++t) {
            a[r].train(r, t);
            b[r].train(r, t);
            x.step(exec::host{});
            y.step(exec::host{});
        }
        out.a[r] = x.stats();
        out.b[r] = y.stats();
    });
    return out;
}

} // namespace

TEST_CASE("sparta with codec::native on a bf16 model: half the bytes of fp32, replicas identical where averaged") {
    const int N = 4, steps = 5;
    const sparta_options o{.fraction = 0.2, .seed = 7};
    std::vector<exchange_stats> fp32_stats(N), native_stats(N);
    std::vector<model<bfloat16>> m;
    for (int r = 0; r < N; ++r) m.emplace_back(r);
    comm::run_local(N, [&](comm::local& c) {
        model<bfloat16> copy(c.rank());
        sparta<> plain(copy.group, c, o);
        sparta<sampler::uniform, schedule::constant, topology::all_reduce, codec::native> s(m[c.rank()].group, c, o);
        for (int t = 0; t < steps; ++t) {
            m[c.rank()].train(c.rank(), t);
            copy.train(c.rank(), t);
            s.step(exec::host{});
            plain.step(exec::host{});
        }
        fp32_stats[c.rank()] = plain.stats();
        native_stats[c.rank()] = s.stats();
    });
    for (int r = 0; r < N; ++r) {
        INFO("rank ", r);
        // Slots of 2-byte values instead of 4-byte ones (each rank's chunk padded to the largest).
        const double ratio = static_cast<double>(native_stats[r].total.bytes_sent) / fp32_stats[r].total.bytes_sent;
        CHECK(ratio == doctest::Approx(0.5).epsilon(0.01));
        CHECK(native_stats[r].exchanges == steps);
    }
    // Every position ends equal on every replica or was never averaged; positions averaged
    // at the last step are equal for sure: count the equal ones.
    std::size_t equal = 0;
    for (std::size_t i = 0; i < m[0].size(); ++i) {
        bool all = true;
        for (int r = 1; r < N; ++r) all = all && m[r].get(i) == m[0].get(i);
        equal += all;
    }
    CHECK(equal >= static_cast<std::size_t>(0.2 * static_cast<double>(m[0].size())));
}

TEST_CASE_TEMPLATE("diloco through a lossy codec: replicas bit-identical after every outer step, fewer bytes", C,
                   codec::int8_block, codec::fp8_e4m3, codec::int4_block, codec::sign2_block) {
    const int N = 3, H = 4;
    std::vector<model<float>> m, ref;
    const pair_stats ps = side_by_side(
        N, 2 * H, m, ref,
        [&](param_group<float>& g, comm::local& c) {
            return diloco<outer::nesterov, topology::all_reduce, C>(g, c, {.interval = H}, {}, {}, C{});
        },
        [&](param_group<float>& g, comm::local& c) { return diloco<outer::nesterov>(g, c, {.interval = H}); });
    const auto& st = ps.a;
    const auto& ref_st = ps.b;
    double worst = 0.0;
    for (int r = 0; r < N; ++r) {
        CHECK(same_bits(m[r], m[0]));
        CHECK(st[r].total.bytes_sent < ref_st[r].total.bytes_sent / 2);
        for (std::size_t i = 0; i < m[r].size(); ++i) worst = std::max(worst, std::abs(double(m[r].get(i)) - ref[r].get(i)));
    }
    // Close to the fp32 run (the outer lr 0.7 and momentum amplify the codec's rounding a little).
    INFO(C::name, ": largest distance to the fp32 run ", worst);
    CHECK(worst < 0.05);
    CHECK(worst > 0.0);
}

TEST_CASE("diloco error feedback: the residual is checkpointed; a resumed run continues bit for bit") {
    const int N = 2, H = 3;
    const diloco_options o{.interval = H, .seed = 4, .error_feedback = 0.9};
    using D = diloco<outer::nesterov, topology::all_reduce, codec::sign2_block>;
    std::vector<model<float>> straight, resumed;
    for (int r = 0; r < N; ++r) {
        straight.emplace_back(r);
        resumed.emplace_back(r);
    }
    std::vector<std::string> ck(N);
    comm::run_local(N, [&](comm::local& c) {
        const int r = c.rank();
        D d(straight[r].group, c, o, {}, {}, codec::sign2_block{.block_size = 32});
        for (int t = 0; t < 2 * H; ++t) {
            straight[r].train(r, t);
            d.step(exec::host{});
        }
        std::ostringstream os;
        d.save(os);
        ck[r] = os.str();
        resumed[r] = straight[r]; // the trainer's own checkpoint of the parameters
        for (int t = 2 * H; t < 4 * H; ++t) {
            straight[r].train(r, t);
            d.step(exec::host{});
        }
    });
    for (auto& x : resumed) {
        x.group = param_group<float>{};
        x.group.add("a", x.a.data(), x.a.size()).add("b", x.b.data(), x.b.size());
    }
    comm::run_local(N, [&](comm::local& c) {
        const int r = c.rank();
        diloco_options ro = o;
        ro.broadcast_initial = false;
        D d(resumed[r].group, c, ro, {}, {}, codec::sign2_block{.block_size = 32});
        std::istringstream is(ck[r]);
        d.load(is);
        for (int t = 2 * H; t < 4 * H; ++t) {
            resumed[r].train(r, t);
            d.step(exec::host{});
        }
    });
    for (int r = 0; r < N; ++r) CHECK(same_bits(resumed[r], straight[r]));

    // Without the residual (error feedback off in the checkpoint's writer) the section is
    // missing: the load fails on every worker and changes nothing.
    std::vector<std::string> no_ef(N);
    const auto errors = run_collect_errors(N, [&](comm::local& c) {
        model<float> x(c.rank());
        diloco_options off = o;
        off.error_feedback = 0.0;
        D writer(x.group, c, off, {}, {}, codec::sign2_block{.block_size = 32});
        std::ostringstream os;
        writer.save(os);
        D reader(x.group, c, o, {}, {}, codec::sign2_block{.block_size = 32});
        std::istringstream is(os.str());
        reader.load(is);
    });
    for (const auto& e : errors) CHECK(e.find("checkpoint") != std::string::npos);
}

TEST_CASE("codecs: bad configurations are refused on every worker, naming what is wrong") {
    const int N = 3;
    auto expect = [&](auto make, const std::string& part) {
        const auto errors = run_collect_errors(N, [&](comm::local& c) {
            model<float> x(c.rank());
            make(x, c);
        });
        for (int r = 0; r < N; ++r) {
            INFO("rank ", r, ": ", errors[static_cast<std::size_t>(r)]);
            CHECK(errors[static_cast<std::size_t>(r)].find(part) != std::string::npos);
        }
    };
    expect([](model<float>& x, comm::local& c) {
        diloco<outer::nesterov, topology::all_reduce, codec::int8_block>(x.group, c, {}, {}, {}, {.block_size = 0});
    }, "codec::int8: block_size must be >= 1, got 0");
    expect([](model<float>& x, comm::local& c) {
        sparta<sampler::uniform, schedule::constant, topology::all_reduce, codec::any>(
            x.group, c, {.fraction = 0.1}, {}, {}, {},
            c.rank() == 1 ? codec::any{codec::int4_block{}} : codec::any{codec::int8_block{}});
    }, "codec: rank 0 has int8, rank 1 has int4");
    using topk = codec::chunk_topk<codec::sign2_block>;
    expect([](model<float>& x, comm::local& c) {
        diloco<outer::nesterov, topology::ring, topk>(x.group, c, {}, {}, {}, topk{});
    }, "diloco: the chunk_topk sparsifier sums through the all_reduce topology, not ring");
    expect([](model<float>& x, comm::local& c) {
        diloco<outer::nesterov, topology::any, topk>(x.group, c, {}, {}, topology::gossip{}, topk{});
    }, "sparsifier sums through the all_reduce topology, not gossip");
    expect([](model<float>& x, comm::local& c) { diloco<>(x.group, c, {.error_feedback = 0.5}); },
           "error_feedback needs a lossy codec");
    expect([](model<float>& x, comm::local& c) {
        diloco<outer::nesterov, topology::all_reduce, codec::int8_block>(x.group, c, {.error_feedback = 1.5});
    }, "error_feedback must be in [0, 1], got 1.5");
}

TEST_CASE("sparta_diloco with a codec for each part; codec::any holding fp32 is today's exchange, bit for bit") {
    const int N = 2, H = 4;
    std::vector<model<float>> a, b, c0;
    for (int r = 0; r < N; ++r) {
        a.emplace_back(r);
        b.emplace_back(r);
        c0.emplace_back(r);
    }
    std::vector<exchange_stats> sa(N), sb(N), sc(N);
    comm::run_local(N, [&](comm::local& c) {
        const int r = c.rank();
        sparta_diloco<> plain(a[r].group, c, {.fraction = 0.1, .seed = 3}, {.interval = H, .seed = 3});
        sparta_diloco<sampler::uniform, schedule::constant, topology::all_reduce, outer::nesterov, codec::any, codec::any>
            any_fp32(b[r].group, c, {.fraction = 0.1, .seed = 3}, {.interval = H, .seed = 3});
        sparta_diloco<sampler::uniform, schedule::constant, topology::all_reduce, outer::nesterov, codec::bf16,
                      codec::int8_block>
            coded(c0[r].group, c, {.fraction = 0.1, .seed = 3}, {.interval = H, .seed = 3});
        for (int t = 0; t < 2 * H; ++t) {
            a[r].train(r, t);
            b[r].train(r, t);
            c0[r].train(r, t);
            plain.step(exec::host{});
            any_fp32.step(exec::host{});
            coded.step(exec::host{});
        }
        sa[r] = plain.stats();
        sb[r] = any_fp32.stats();
        sc[r] = coded.stats();
    });
    for (int r = 0; r < N; ++r) {
        CHECK(same_bits(a[r], b[r]));
        CHECK(sa[r].total == sb[r].total);
        CHECK(same_bits(c0[r], c0[0]));
        CHECK(sc[r].total.bytes_sent < sa[r].total.bytes_sent / 2);
    }
}

TEST_CASE("diloco through a sparsifier (chunk top-k with 2-bit values, error feedback): identical replicas, few bytes") {
    const int N = 3, H = 4;
    using topk = codec::chunk_topk<codec::sign2_block>;
    const topk sp{.chunk = 64, .k = 4, .values = {.block_size = 4}};
    std::vector<model<float>> m, ref;
    const pair_stats ps = side_by_side(
        N, 3 * H, m, ref,
        [&](param_group<float>& g, comm::local& c) {
            return diloco<outer::nesterov, topology::all_reduce, topk>(g, c, {.interval = H, .error_feedback = 1.0}, {},
                                                                       {}, sp);
        },
        [&](param_group<float>& g, comm::local& c) { return diloco<outer::nesterov>(g, c, {.interval = H}); });
    const auto& st = ps.a;
    const auto& ref_st = ps.b;
    for (int r = 0; r < N; ++r) {
        CHECK(same_bits(m[r], m[0]));
        CHECK(st[r].total.bytes_sent * 10 < ref_st[r].total.bytes_sent);
    }
    const auto errors = run_collect_errors(N, [&](comm::local& c) {
        model<float> x(c.rank());
        diloco<outer::nesterov, topology::all_reduce, topk>(x.group, c, {}, {}, {}, topk{.chunk = 8, .k = 9});
    });
    for (const auto& e : errors) CHECK(e.find("k must be") != std::string::npos);
}

TEST_CASE("stochastic rounding: identical replicas, other bits than rounding to nearest, refused where impossible") {
    const int N = 3, H = 3;
    std::vector<model<float>> m, near;
    using D = diloco<outer::nesterov, topology::all_reduce, codec::int4_block>;
    side_by_side(
        N, 2 * H, m, near,
        [&](param_group<float>& g, comm::local& c) { return D(g, c, {.interval = H, .seed = 5, .stochastic_rounding = true}); },
        [&](param_group<float>& g, comm::local& c) { return D(g, c, {.interval = H, .seed = 5}); });
    for (int r = 0; r < N; ++r) CHECK(same_bits(m[r], m[0]));
    CHECK_FALSE(same_bits(m[0], near[0]));
    const auto errors = run_collect_errors(N, [&](comm::local& c) {
        model<float> x(c.rank());
        sparta<sampler::uniform, schedule::constant, topology::all_reduce, codec::bf16>(
            x.group, c, {.fraction = 0.1, .stochastic_rounding = true});
    });
    for (const auto& e : errors) CHECK(e.find("stochastic_rounding needs a codec that rounds stochastically") != std::string::npos);
}

TEST_CASE("diloco through random-k (shared positions, no indices sent): identical replicas") {
    const int N = 3, H = 3;
    using rk = codec::random_k<codec::int8_block>;
    std::vector<model<float>> m;
    for (int r = 0; r < N; ++r) m.emplace_back(r);
    std::vector<exchange_stats> st(N);
    comm::run_local(N, [&](comm::local& c) {
        const int r = c.rank();
        diloco<outer::nesterov, topology::all_reduce, rk> d(m[r].group, c, {.interval = H, .seed = 9, .error_feedback = 0.5},
                                                            {}, {}, rk{.fraction = 0.1});
        for (int t = 0; t < 2 * H; ++t) {
            m[r].train(r, t);
            d.step(exec::host{});
        }
        st[r] = d.stats();
    });
    for (int r = 0; r < N; ++r) CHECK(same_bits(m[r], m[0]));
    CHECK(st[0].exchanges == 2);
}

TEST_CASE_TEMPLATE("diloco's fused codec passes give the bits of the unfused ones", C, codec::int8_block, codec::bf16,
                   codec::sign2_block) {
    // A prune fraction too small to prune anything takes the unfused path (pruning needs the
    // whole outer gradient), with the same values: the parameters must end bit-identical.
    const int N = 3, H = 3;
    std::vector<model<float>> fused, unfused;
    using D = diloco<outer::nesterov, topology::all_reduce, C>;
    const pair_stats ps = side_by_side(
        N, 3 * H, fused, unfused,
        [&](param_group<float>& g, comm::local& c) { return D(g, c, {.interval = H, .seed = 2, .error_feedback = 0.5}); },
        [&](param_group<float>& g, comm::local& c) {
            return D(g, c, {.interval = H, .seed = 2, .prune_fraction = 1e-12, .error_feedback = 0.5});
        });
    const auto& sf = ps.a;
    const auto& su = ps.b;
    for (int r = 0; r < N; ++r) {
        CHECK(same_bits(fused[r], unfused[r]));
        CHECK(sf[r].total == su[r].total);
    }
}
