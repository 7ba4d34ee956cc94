// Streaming DiLoCo: fragments whose outer steps are staggered over the round, each applied
// overlap_steps inner steps late and merged with what the worker learned meanwhile. Checked
// against an independent reference of the rule, over comm::local and comm::async (the same
// bits with and without real overlap), through checkpoints taken while fragments are in
// flight, with codecs, topologies and pruning, and with bad options.
#include <trickle/comm/async.hpp>
#include <trickle/trickle.hpp>

#include "drift_model.hpp"
#include "test_support.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <memory>
#include <thread>
#include <chrono>
#include <atomic>
#include <sstream>
#include <string>
#include <vector>

using namespace trickle;
using trickle_test::bitwise_equal;

namespace {

using model = trickle_test::drift_model;
using trickle_test::drift;
using trickle_test::drift_sizes;

// The streaming rule written out on plain vectors (outer SGD, weights 1 + r/2, all-reduce
// in rank order), independent of the library: what every worker's parameters must be.
// carry: a late average lands plus each worker's progress since its exchange began.
std::vector<std::vector<float>> reference(int N, int steps, std::uint64_t H, std::uint64_t tau, float alpha, float lr,
                                          const std::vector<std::pair<std::size_t, std::size_t>>& frags,
                                          bool carry = false) {
    std::vector<std::vector<float>> p(static_cast<std::size_t>(N)), snap, start;
    for (int r = 0; r < N; ++r) p[static_cast<std::size_t>(r)] = model(r).flat();
    for (int r = 1; r < N; ++r) p[static_cast<std::size_t>(r)] = p[0]; // the initial broadcast
    snap = p;
    start = p;
    const std::size_t n = p[0].size(), F = frags.size();
    std::vector<std::vector<float>> sums(F); // a fragment's summed deltas, then its weight sum
    std::vector<std::int64_t> due(F, -1);
    for (int t = 0; t < steps; ++t) {
        for (int r = 0; r < N; ++r)
            for (std::size_t i = 0; i < n; ++i) p[static_cast<std::size_t>(r)][i] += drift(r, i, t);
        const auto apply = [&](std::size_t f) {
            const auto [first, count] = frags[f];
            const float factor = 1.0f / sums[f][count];
            for (int r = 0; r < N; ++r) {
                auto& pr = p[static_cast<std::size_t>(r)];
                auto& sr = snap[static_cast<std::size_t>(r)];
                for (std::size_t k = 0; k < count; ++k) {
                    const float g = sums[f][k] * factor;
                    const float s = sr[first + k] - lr * g;
                    sr[first + k] = s;
                    if (carry) {
                        const float progress = pr[first + k] - start[static_cast<std::size_t>(r)][first + k];
                        pr[first + k] = s + progress;
                    } else {
                        pr[first + k] = alpha == 0.0f ? s : alpha * pr[first + k] + (1.0f - alpha) * s;
                    }
                }
            }
            due[f] = -1;
        };
        for (std::size_t f = 0; f < F; ++f)
            if (due[f] == t) apply(f);
        for (std::size_t f = 0; f < F; ++f) {
            const std::uint64_t phase = f * H / F, s = static_cast<std::uint64_t>(t) + 1;
            if (s < phase || (s - phase) % H != 0) continue;
            const auto [first, count] = frags[f];
            sums[f].assign(count + 1, 0.0f);
            for (int r = 0; r < N; ++r) {
                const float w = 1.0f + 0.5f * static_cast<float>(r);
                for (std::size_t k = 0; k < count; ++k) {
                    const float d = w * (snap[static_cast<std::size_t>(r)][first + k] - p[static_cast<std::size_t>(r)][first + k]);
                    sums[f][k] = r == 0 ? d : sums[f][k] + d;
                }
                sums[f][count] = r == 0 ? w : sums[f][count] + w;
                for (std::size_t k = 0; k < count; ++k)
                    start[static_cast<std::size_t>(r)][first + k] = p[static_cast<std::size_t>(r)][first + k];
            }
            due[f] = t + static_cast<std::int64_t>(tau);
            if (tau == 0) apply(f);
        }
    }
    return p;
}

// Runs the engine make(group, comm) builds on N workers for `steps` steps (through
// comm::async when overlapped); returns every worker's parameters, and rank 0's fragments.
template <class Make>
std::vector<std::vector<float>> run(int N, int steps, Make make, bool overlapped = false,
                                    std::vector<std::pair<std::size_t, std::size_t>>* frags = nullptr) {
    std::vector<std::vector<float>> out(static_cast<std::size_t>(N));
    comm::run_local(N, [&](comm::local& c) {
        model m(c.rank());
        const auto go = [&](auto& comm) {
            auto alg = make(m.group, comm);
            if constexpr (requires { alg.fragment_ranges(); })
                if (frags != nullptr && c.rank() == 0) *frags = alg.fragment_ranges();
            for (int t = 0; t < steps; ++t) {
                m.train(c.rank(), t);
                alg.step(exec::host{});
            }
        };
        if (overlapped) {
            comm::async<comm::local> ac(c);
            go(ac);
        } else {
            go(c);
        }
        out[static_cast<std::size_t>(c.rank())] = m.flat();
    });
    return out;
}

template <class Outer = outer::sgd, class Topology = topology::all_reduce, class Codec = codec::fp32>
auto engine_of(diloco_options o, Outer outer = {}, Topology top = {}, Codec codec = {}) {
    return [=](const param_group<float>& g, auto& c) {
        return diloco_engine<Outer, Topology, float, host_space, std::remove_reference_t<decltype(c)>, Codec>(
            g, c, o, outer, top, codec);
    };
}

diloco_options streaming(std::uint64_t H, std::uint64_t F, std::uint64_t tau, double alpha, int rank) {
    diloco_options o{.interval = H, .seed = 3};
    o.weight = 1.0f + 0.5f * static_cast<float>(rank);
    o.fragments = F;
    o.overlap_steps = tau;
    o.mix = alpha;
    return o;
}

} // namespace

TEST_CASE("streaming DiLoCo follows the rule: staggered fragments, late application, mixing") {
    const int N = 3, steps = 23;
    for (std::uint64_t F : {1u, 2u, 3u, 5u})
        for (std::uint64_t tau : {0u, 1u, 3u})
            for (float alpha : {0.0f, 0.5f}) {
                INFO("F = ", F, ", tau = ", tau, ", alpha = ", alpha);
                std::vector<std::pair<std::size_t, std::size_t>> frags;
                const auto got = run(
                    N, steps,
                    [&](const param_group<float>& g, auto& c) {
                        return engine_of(streaming(5, F, tau, alpha, c.rank()), outer::sgd{.lr = 0.7})(g, c);
                    },
                    false, &frags);
                if (frags.empty()) frags = {{0, 1000}}; // F = 1, tau = 0, alpha = 0: plain DiLoCo
                CHECK(frags.size() == F);
                const auto want = reference(N, steps, 5, tau, alpha, 0.7f, frags);
                for (int r = 0; r < N; ++r)
                    CHECK(bitwise_equal(got[static_cast<std::size_t>(r)], want[static_cast<std::size_t>(r)]));
            }
}

TEST_CASE("carry_local: a late average lands plus the progress made while it travelled; async, checkpoints") {
    const int N = 3, steps = 23;
    for (std::uint64_t F : {1u, 2u, 3u})
        for (std::uint64_t tau : {1u, 4u}) {
            INFO("F = ", F, ", tau = ", tau);
            std::vector<std::pair<std::size_t, std::size_t>> frags;
            const auto make = [&](const param_group<float>& g, auto& c) {
                diloco_options o = streaming(5, F, tau, 0.0, c.rank());
                o.carry_local = true;
                return engine_of(o, outer::sgd{.lr = 0.7})(g, c);
            };
            const auto got = run(N, steps, make, false, &frags);
            CHECK(frags.size() == F);
            const auto want = reference(N, steps, 5, tau, 0.0f, 0.7f, frags, true);
            const auto overlapped = run(N, steps, make, true);
            for (int r = 0; r < N; ++r) {
                CHECK(bitwise_equal(got[static_cast<std::size_t>(r)], want[static_cast<std::size_t>(r)]));
                CHECK(bitwise_equal(overlapped[static_cast<std::size_t>(r)], want[static_cast<std::size_t>(r)]));
            }
            // Not replacement: the workers keep their own progress, so they differ.
            CHECK(!bitwise_equal(got[0], got[1]));
        }
    // A checkpoint taken while fragments are in flight holds their starting parameters.
    comm::run_local(N, [&](comm::local& c) {
        using engine = diloco_engine<outer::nesterov, topology::all_reduce, float, host_space, comm::local>;
        diloco_options o = streaming(6, 2, 4, 0.0, c.rank());
        o.carry_local = true;
        model a(c.rank()), b(c.rank());
        engine ea(a.group, c, o), eb(b.group, c, o);
        for (int t = 0; t < 8; ++t) {
            a.train(c.rank(), t);
            b.train(c.rank(), t);
            ea.step(exec::host{});
            eb.step(exec::host{});
        }
        REQUIRE(eb.fragments_in_flight() > 0);
        std::stringstream ckpt;
        eb.save(ckpt);
        diloco_options later = o;
        later.broadcast_initial = false;
        engine eb2(b.group, c, later);
        eb2.load(ckpt);
        for (int t = 8; t < 20; ++t) {
            a.train(c.rank(), t);
            b.train(c.rank(), t);
            ea.step(exec::host{});
            eb2.step(exec::host{});
        }
        CHECK(bitwise_equal(a.flat(), b.flat()));
    });
}

TEST_CASE("streaming fragments: balanced at tensor boundaries, or as listed") {
    std::vector<std::pair<std::size_t, std::size_t>> frags;
    run(2, 1, [](const param_group<float>& g, auto& c) { return engine_of(streaming(4, 2, 1, 0, c.rank()))(g, c); },
        false, &frags);
    CHECK(frags == std::vector<std::pair<std::size_t, std::size_t>>{{0, 550}, {550, 450}});
    run(2, 1, [](const param_group<float>& g, auto& c) { return engine_of(streaming(4, 5, 0, 0, c.rank()))(g, c); },
        false, &frags);
    CHECK(frags.size() == 5);
    run(2, 1,
        [](const param_group<float>& g, auto& c) {
            diloco_options o = streaming(4, 1, 0, 0, c.rank());
            o.fragment_tensors = {1, 3, 1};
            return engine_of(o)(g, c);
        },
        false, &frags);
    CHECK(frags == std::vector<std::pair<std::size_t, std::size_t>>{{0, 300}, {300, 257}, {557, 443}});
}

TEST_CASE("streaming over comm::async (the exchanges really overlap the inner steps) gives the same bits") {
    for (std::uint64_t tau : {1u, 4u}) {
        const auto make = [tau](const param_group<float>& g, auto& c) {
            return engine_of(streaming(6, 3, tau, 0.25, c.rank()), outer::nesterov{})(g, c);
        };
        const auto blocking = run(4, 30, make, false);
        const auto overlapped = run(4, 30, make, true);
        for (int r = 0; r < 4; ++r)
            CHECK(bitwise_equal(overlapped[static_cast<std::size_t>(r)], blocking[static_cast<std::size_t>(r)]));
    }
}

TEST_CASE("encoded exchanges overlap too: the route runs the whole encoded all-reduce on the progress thread, "
          "with the blocking bits and bytes") {
    // Streaming through bf16, through int8 blocks and through a top-k sparsifier with error
    // feedback, and overlapped SPARTA through bf16: comm::async against comm::local, bit for bit, bytes by part equal.
    for (std::uint64_t tau : {1u, 4u}) {
        for (int codec_kind = 0; codec_kind < 3; ++codec_kind) {
            INFO("tau = ", tau, ", codec ", codec_kind);
            std::vector<exchange_stats> stats(2);
            std::vector<std::vector<float>> results[2];
            for (int a = 0; a < 2; ++a) {
                results[a].resize(4);
                comm::run_local(4, [&](comm::local& c) {
                    model m(c.rank());
                    const auto go = [&](auto& comm) {
                        diloco_options o = streaming(6, 3, tau, 0.0, c.rank());
                        const auto body = [&](auto& alg) {
                            for (int t = 0; t < 30; ++t) {
                                m.train(c.rank(), t);
                                alg.step(exec::host{});
                            }
                            if (c.rank() == 0) stats[static_cast<std::size_t>(a)] = alg.stats();
                        };
                        using C = std::remove_reference_t<decltype(comm)>;
                        if (codec_kind == 0) {
                            diloco_engine<outer::nesterov, topology::all_reduce, float, host_space, C, codec::bf16> e(
                                m.group, comm, o);
                            body(e);
                        } else if (codec_kind == 1) {
                            o.error_feedback = 1.0;
                            diloco_engine<outer::nesterov, topology::all_reduce, float, host_space, C, codec::int8_block>
                                e(m.group, comm, o);
                            body(e);
                        } else { // a sparsifier (chunked top-k of sign2 values), error feedback on
                            o.error_feedback = 1.0;
                            using topk = codec::chunk_topk<codec::sign2_block>;
                            diloco_engine<outer::nesterov, topology::all_reduce, float, host_space, C, topk> e(
                                m.group, comm, o, {}, {}, topk{});
                            body(e);
                        }
                    };
                    if (a == 1) {
                        comm::async<comm::local> ac(c);
                        go(ac);
                    } else {
                        go(c);
                    }
                    results[a][static_cast<std::size_t>(c.rank())] = m.flat();
                });
            }
            for (int r = 0; r < 4; ++r)
                CHECK(bitwise_equal(results[1][static_cast<std::size_t>(r)], results[0][static_cast<std::size_t>(r)]));
            CHECK(stats[1].total == stats[0].total);
            CHECK(stats[1].sent.codes == stats[0].sent.codes);
            CHECK(stats[1].sent.scales == stats[0].sent.scales);
            CHECK(stats[1].exchanges == stats[0].exchanges);
        }
    }
}

TEST_CASE("an encoded fragment exchange does not block the step that starts it") {
    // Rank 1 holds back its step 5 (the fragment's outer step: H = 6, phase 0) until rank 0
    // has returned from its own, or 10 s passed: rank 0 can only return first if the
    // exchange it started runs on the progress thread.
    std::atomic<bool> returned{false};
    bool returned_first = false;
    std::vector<std::vector<float>> after(2);
    comm::run_local(2, [&](comm::local& c) {
        comm::async<comm::local> ac(c);
        model m(c.rank());
        diloco_options o = streaming(6, 1, 2, 0.0, c.rank());
        diloco_engine<outer::nesterov, topology::all_reduce, float, host_space, comm::async<comm::local>, codec::bf16> e(
            m.group, ac, o);
        for (int t = 0; t < 12; ++t) {
            m.train(c.rank(), t);
            if (c.rank() == 1 && t == 5) {
                const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
                while (!returned.load() && std::chrono::steady_clock::now() < until)
                    std::this_thread::sleep_for(std::chrono::milliseconds(1));
                returned_first = returned.load();
            }
            e.step(exec::host{});
            if (c.rank() == 0 && t == 5) returned.store(true);
        }
        after[static_cast<std::size_t>(c.rank())] = m.flat();
    });
    CHECK(returned_first);
    CHECK(after[0].size() == after[1].size());
}

TEST_CASE("streaming with a codec, error feedback, a topology and pruning: replicas agree where they averaged") {
    const int N = 4, steps = 16;
    const auto got = run(N, steps, [](const param_group<float>& g, auto& c) {
        diloco_options o = streaming(4, 2, 0, 0.0, c.rank());
        o.error_feedback = 1.0;
        o.prune_fraction = 0.25;
        return engine_of(o, outer::nesterov{}, topology::all_reduce{}, codec::int8_block{})(g, c);
    });
    // H = 4, phases 0 and 2: fragment 0 ([0, 550)) took its last outer step after the last
    // inner step (16 = 4 * 4), so the replicas agree on it; fragment 1's last was two inner
    // steps earlier (14), so they differ there.
    bool differ = false;
    for (int r = 1; r < N; ++r) {
        for (std::size_t i = 0; i < 550; ++i) REQUIRE(got[static_cast<std::size_t>(r)][i] == got[0][i]);
        for (std::size_t i = 550; i < 1000; ++i) differ = differ || got[static_cast<std::size_t>(r)][i] != got[0][i];
    }
    CHECK(differ);
    const auto islands = run(N, steps, [](const param_group<float>& g, auto& c) {
        diloco_options o = streaming(4, 3, 2, 0.0, c.rank());
        return engine_of(o, outer::nesterov{}, topology::islands{.size = 2}, codec::bf16{})(g, c);
    });
    CHECK(islands.size() == static_cast<std::size_t>(N));
}

TEST_CASE("streaming checkpoints carry the fragments in flight; a resumed run continues bit for bit") {
    for (const bool overlapped : {false, true}) {
        INFO("overlapped: ", overlapped);
        const int N = 3;
        std::vector<std::vector<float>> straight(N), resumed(N);
        comm::run_local(N, [&](comm::local& c) {
            const auto R = static_cast<std::size_t>(c.rank());
            const auto go = [&](auto& comm) {
                using engine = diloco_engine<outer::adam, topology::all_reduce, float, host_space,
                                             std::remove_reference_t<decltype(comm)>>;
                const diloco_options o = streaming(6, 3, 4, 0.5, c.rank());
                model a(c.rank()), b(c.rank());
                engine ea(a.group, comm, o), eb(b.group, comm, o);
                for (int t = 0; t < 9; ++t) {
                    a.train(c.rank(), t);
                    b.train(c.rank(), t);
                    ea.step(exec::host{});
                    eb.step(exec::host{});
                }
                CHECK(eb.fragments_in_flight() > 0);
                std::stringstream ckpt;
                eb.save(ckpt);
                diloco_options later = o;
                later.broadcast_initial = false;
                engine eb2(b.group, comm, later);
                eb2.load(ckpt);
                CHECK(eb2.fragments_in_flight() == eb.fragments_in_flight());
                for (int t = 9; t < 25; ++t) {
                    a.train(c.rank(), t);
                    b.train(c.rank(), t);
                    ea.step(exec::host{});
                    eb2.step(exec::host{});
                }
                CHECK(eb2.stats().total == ea.stats().total);
                straight[R] = a.flat();
                resumed[R] = b.flat();
            };
            if (overlapped) {
                comm::async<comm::local> ac(c);
                go(ac);
            } else {
                go(c);
            }
        });
        for (int r = 0; r < N; ++r) CHECK(bitwise_equal(straight[static_cast<std::size_t>(r)], resumed[static_cast<std::size_t>(r)]));
    }
}

TEST_CASE("streaming: peak bytes per outer step shrink by the number of fragments") {
    exchange_stats one, four;
    comm::run_local(2, [&](comm::local& c) {
        model a(c.rank()), b(c.rank());
        auto e1 = engine_of(streaming(8, 1, 0, 0, c.rank()))(a.group, c);
        auto e4 = engine_of(streaming(8, 4, 0, 0, c.rank()))(b.group, c);
        std::uint64_t peak1 = 0, peak4 = 0;
        for (int t = 0; t < 16; ++t) {
            e1.step(exec::host{});
            e4.step(exec::host{});
            peak1 = std::max(peak1, e1.stats().last.bytes_sent);
            peak4 = std::max(peak4, e4.stats().last.bytes_sent);
        }
        if (c.rank() == 0) {
            one = e1.stats();
            four = e4.stats();
            CHECK(peak4 * 2 < peak1);
        }
    });
    CHECK(four.exchanges == 4 * one.exchanges);
    CHECK(four.values == one.values + 3 * 2); // each fragment's weight travels with it
}

TEST_CASE("streaming: bad options are refused on every worker, naming the field") {
    const auto expect = [](auto set, const std::string& part) {
        const auto errors = trickle_test::run_collect_errors(2, [&](comm::local& c) {
            model m(c.rank());
            diloco_options o = streaming(5, 1, 0, 0, c.rank());
            set(o);
            diloco<outer::sgd>(m.group, c, o);
        });
        for (const auto& e : errors) {
            INFO(e);
            CHECK(e.find(part) != std::string::npos);
        }
    };
    expect([](diloco_options& o) { o.overlap_steps = 5; }, "overlap_steps (tau) must be < interval (H = 5), got 5");
    expect([](diloco_options& o) { o.fragments = 6; }, "6 fragments but the group has only 5 tensors");
    expect([](diloco_options& o) { o.fragments = 0; }, "fragments must be >= 1, got 0");
    expect([](diloco_options& o) { o.mix = 1.5; }, "mix must be in [0, 1], got 1.5");
    expect([](diloco_options& o) { o.carry_local = true; }, "carry_local needs overlap_steps > 0");
    expect([](diloco_options& o) {
        o.overlap_steps = 2;
        o.mix = 0.5;
        o.carry_local = true;
    }, "carry_local and mix are two ways to land a late average; choose one (mix = 0.5)");
    expect([](diloco_options& o) { o.fragment_tensors = {2, 2}; }, "fragment_tensors sums to 4 tensors, the group has 5");
    expect([](diloco_options& o) { o.fragment_tensors = {0, 5}; }, "every entry of fragment_tensors must be >= 1");
    expect([](diloco_options& o) {
        o.fragments = 3;
        o.fragment_tensors = {1, 4};
    }, "fragments is 3 but fragment_tensors lists 2 fragments");
    // Workers that disagree.
    const auto errors = trickle_test::run_collect_errors(2, [&](comm::local& c) {
        model m(c.rank());
        diloco<outer::sgd>(m.group, c, streaming(5, c.rank() == 0 ? 2 : 3, 0, 0, c.rank()));
    });
    for (const auto& e : errors) CHECK(e.find("fragments") != std::string::npos);
}

namespace {

// SPARTA with overlap, written out: exchange t's mean (rank order) applied at step t + 1 as
// mean + (value now - value gathered), one uniform selection per step (fraction 1: every
// value, so the selection is the identity and the reference needs no sampler).
std::vector<std::vector<float>> sparta_reference(int N, int steps) {
    std::vector<std::vector<float>> p(static_cast<std::size_t>(N));
    for (int r = 0; r < N; ++r) p[static_cast<std::size_t>(r)] = model(0).flat(); // broadcast: rank 0's
    const std::size_t n = p[0].size();
    std::vector<std::vector<float>> gathered;
    std::vector<float> sum;
    bool pending = false;
    for (int t = 0; t < steps; ++t) {
        for (int r = 0; r < N; ++r)
            for (std::size_t i = 0; i < n; ++i) p[static_cast<std::size_t>(r)][i] += drift(r, i, t);
        if (pending) {
            const float scale = 1.0f / static_cast<float>(N);
            for (int r = 0; r < N; ++r)
                for (std::size_t i = 0; i < n; ++i) {
                    auto& x = p[static_cast<std::size_t>(r)][i];
                    x = sum[i] * scale + (x - gathered[static_cast<std::size_t>(r)][i]);
                }
        }
        gathered = p;
        sum = p[0];
        for (int r = 1; r < N; ++r)
            for (std::size_t i = 0; i < n; ++i) sum[i] += p[static_cast<std::size_t>(r)][i];
        pending = true;
    }
    return p;
}

} // namespace

TEST_CASE("overlapped SPARTA: each average lands one step late, corrected by the local change meanwhile") {
    const int N = 3, steps = 9;
    const auto make = [](const param_group<float>& g, auto& c) {
        return sparta<sampler::uniform>(g, c, {.fraction = 1.0, .seed = 1, .overlap = true});
    };
    const auto want = sparta_reference(N, steps);
    for (const bool overlapped : {false, true}) {
        const auto got = run(N, steps, make, overlapped);
        for (int r = 0; r < N; ++r)
            CHECK(bitwise_equal(got[static_cast<std::size_t>(r)], want[static_cast<std::size_t>(r)]));
    }
    // Off by default, and then today's exchange; a small fraction through comm::async gives the
    // blocking bits.
    const auto sparse = [](const param_group<float>& g, auto& c) {
        return sparta<sampler::permutation>(g, c, {.fraction = 0.05, .seed = 4, .overlap = true});
    };
    const auto a = run(4, 12, sparse, false), b = run(4, 12, sparse, true);
    for (int r = 0; r < 4; ++r) CHECK(bitwise_equal(a[static_cast<std::size_t>(r)], b[static_cast<std::size_t>(r)]));
    // Encoded (bf16): the route runs the whole encoded all-reduce on the progress thread.
    const auto encoded = [](const param_group<float>& g, auto& c) {
        return sparta<sampler::permutation, schedule::constant, topology::all_reduce, codec::bf16>(
            g, c, {.fraction = 0.05, .seed = 4, .overlap = true});
    };
    const auto ea = run(4, 12, encoded, false), eb = run(4, 12, encoded, true);
    for (int r = 0; r < 4; ++r) CHECK(bitwise_equal(ea[static_cast<std::size_t>(r)], eb[static_cast<std::size_t>(r)]));
    CHECK(!bitwise_equal(ea[0], a[0])); // (bf16 rounds: not the fp32 exchange)
}

TEST_CASE("overlapped SPARTA: save needs flush() first; sparta_diloco lands the exchange before each outer step") {
    comm::run_local(2, [&](comm::local& c) {
        model m(c.rank());
        sparta<sampler::uniform> s(m.group, c, {.fraction = 0.1, .seed = 2, .overlap = true});
        m.train(c.rank(), 0);
        s.step(exec::host{});
        std::stringstream os;
        CHECK_THROWS_WITH_AS(s.save(os), doctest::Contains("call flush(exec) on every worker first"), invalid_argument);
        s.flush();
        CHECK_NOTHROW(s.save(os));
        CHECK(s.stats().exchanges == 1);
    });
    // SPARTA + DiLoCo with an overlapped SPARTA part: every outer step still leaves the
    // replicas identical (the pending exchange landed before it).
    const auto got = run(3, 12,
                                [](const param_group<float>& g, auto& c) {
                                    return sparta_diloco<>(g, c, {.fraction = 0.1, .seed = 2, .overlap = true},
                                                           {.interval = 4, .seed = 2});
                                },
                                false);
    for (int r = 1; r < 3; ++r) CHECK(bitwise_equal(got[static_cast<std::size_t>(r)], got[0]));
}

TEST_CASE("workers at different speeds: manual outer steps at a deadline, weighted by the tokens each processed") {
    const int N = 3;
    std::vector<std::vector<float>> after(N), before_outer(N);
    std::vector<float> tokens(N);
    comm::run_local(N, [&](comm::local& c) {
        const int r = c.rank();
        model m(r);
        diloco_options o{.interval = 1000, .seed = 1};
        o.manual_outer = true;
        diloco<outer::average> d(m.group, c, o);
        int t = 0;
        for (int round = 0; round < 2; ++round) {
            const int inner = 2 + r + round; // a slower worker fits fewer steps before the deadline
            for (int k = 0; k < inner; ++k) {
                m.train(r, t++);
                d.step(exec::host{});
            }
            tokens[static_cast<std::size_t>(r)] = static_cast<float>(inner * 128);
            d.set_weight(tokens[static_cast<std::size_t>(r)]);
            before_outer[static_cast<std::size_t>(r)] = m.flat();
            d.outer_step(exec::host{});
        }
        after[static_cast<std::size_t>(r)] = m.flat();
        CHECK(d.stats().exchanges == 2);
        CHECK(d.stats().steps == static_cast<std::uint64_t>(2 * (2 + r) + 1));
    });
    // Every replica holds the tokens-weighted mean of the parameters before the last outer
    // step (outer::average: the snapshot becomes the weighted mean), bit-identical.
    double wsum = 0;
    for (float w : tokens) wsum += w;
    for (std::size_t i = 0; i < after[0].size(); ++i) {
        double mean = 0;
        for (int r = 0; r < N; ++r) mean += tokens[static_cast<std::size_t>(r)] * before_outer[static_cast<std::size_t>(r)][i];
        mean /= wsum;
        REQUIRE(after[0][i] == doctest::Approx(mean).epsilon(1e-5).scale(1.0));
    }
    for (int r = 1; r < N; ++r) CHECK(bitwise_equal(after[static_cast<std::size_t>(r)], after[0]));
}

TEST_CASE("manual outer steps: refused where they do not apply, bad weights refused, nothing changed") {
    comm::run_local(2, [&](comm::local& c) {
        model m(c.rank());
        diloco<outer::average> d(m.group, c, {.interval = 3});
        CHECK_THROWS_WITH_AS(d.outer_step(exec::host{}), doctest::Contains("set diloco_options::manual_outer"),
                             invalid_argument);
        CHECK_THROWS_WITH_AS(d.set_weight(-1.0f), doctest::Contains("finite and >= 0, got -1"), invalid_argument);
        CHECK_THROWS_AS(d.set_weight(std::nanf("")), invalid_argument);
        CHECK(d.stats().exchanges == 0);
        sparta<> s(m.group, c, {.fraction = 0.1});
        CHECK_THROWS_WITH_AS(s.outer_step(exec::host{}), doctest::Contains("applies to DiLoCo"), invalid_argument);
        CHECK_THROWS_WITH_AS(s.set_weight(2.0f), doctest::Contains("applies to DiLoCo"), invalid_argument);
    });
    const auto errors = trickle_test::run_collect_errors(2, [&](comm::local& c) {
        model m(c.rank());
        diloco_options o = streaming(5, 2, 0, 0, c.rank());
        o.manual_outer = true;
        diloco<outer::sgd>(m.group, c, o);
    });
    for (const auto& e : errors) CHECK(e.find("manual_outer does not combine with streaming") != std::string::npos);
}
