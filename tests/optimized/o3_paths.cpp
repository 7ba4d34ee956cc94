// tests/optimized/o3_paths.cpp: the paths a user's optimized build instantiates, compiled at
// -O3 -Wall -Wextra (-Werror in the presets and CI), with g++ here and with clang++ when it
// is found (the o3_paths_clang test): the headers must stay warning-free where users build,
// not only in the Debug build the other tests use. g++'s flow-sensitive warnings
// (-Wmaybe-uninitialized, -Wstringop-overflow, -Wrestrict) appear only with optimization,
// and they appeared in headers users include (a fused codec outer step's lane coder).
//
// It also runs: 3 workers (comm::local, and comm::async for the overlapped forms) train a
// drifting model under each path and must end with identical replicas after an outer
// step, and identical averaged positions; exit 1 names the path that did not.
#include <trickle/algorithm/demo.hpp>
#include <trickle/comm/async.hpp>
#include <trickle/comm/elastic.hpp>
#include <trickle/trickle.hpp>

#include "forwarding_elastic.hpp"

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

namespace {

using namespace trickle;

constexpr int workers = 3;
constexpr std::size_t sizes[] = {700, 33, 256, 1031};

struct model {
    std::vector<std::vector<float>> ts;
    param_group<float> group;
    explicit model(int w) {
        for (std::size_t k = 0; k < std::size(sizes); ++k) {
            std::vector<float> v(sizes[k]);
            for (std::size_t i = 0; i < v.size(); ++i)
                v[i] = 0.2f * static_cast<float>(std::cos(0.05 * static_cast<double>(i + k))) + 0.01f * static_cast<float>(w);
            ts.push_back(std::move(v));
        }
        // (The name built by append: g++ 12 at -O3 reports a false -Wrestrict in
        // operator+(const char*, std::string&&) here.)
        for (std::size_t k = 0; k < ts.size(); ++k) {
            std::string name = "t";
            name += std::to_string(k);
            group.add(name, ts[k].data(), ts[k].size());
        }
    }
    void train(int w, int t) {
        std::size_t i = 0;
        for (auto& v : ts)
            for (float& x : v) x += 0.01f * static_cast<float>(std::sin(0.1 * static_cast<double>(i++) * (w + 1) + t));
    }
    std::vector<float> flat() const {
        std::vector<float> out;
        for (const auto& v : ts) out.insert(out.end(), v.begin(), v.end());
        return out;
    }
};

// Runs make(group, comm) on every worker for `steps` steps (over comm::async when
// `overlapped`) and says whether the replicas ended bit-identical.
template <class Make>
bool replicas_agree(int steps, bool overlapped, Make make) {
    std::vector<std::vector<float>> out(workers);
    comm::run_local(workers, [&](comm::local& c) {
        model m(c.rank());
        const auto go = [&](auto& on) {
            auto alg = make(m.group, on);
            for (int t = 0; t < steps; ++t) {
                m.train(c.rank(), t);
                alg.step(exec::host{});
            }
            if constexpr (requires { alg.flush(); }) alg.flush();
        };
        if (overlapped) {
            comm::async<comm::local> a(c);
            go(a);
        } else {
            go(c);
        }
        out[static_cast<std::size_t>(c.rank())] = m.flat();
    });
    for (int r = 1; r < workers; ++r)
        if (std::memcmp(out[static_cast<std::size_t>(r)].data(), out[0].data(), out[0].size() * sizeof(float)) != 0)
            return false;
    return true;
}

// DeMo (the optimizer step itself): equal replicas, a gradient of each worker's own, the
// vectors in 1-D chunks and two tensors as matrices (33 x 31 and 8 x 32, partial tiles);
// says whether the replicas stayed bit-identical.
template <class Select, class Values>
bool demo_agrees(int steps, Values values) {
    std::vector<std::vector<float>> out(workers);
    comm::run_local(workers, [&](comm::local& c) {
        model m(0);
        std::vector<std::vector<float>> g;
        param_group<float> grads;
        for (std::size_t k = 0; k < m.ts.size(); ++k) {
            g.emplace_back(m.ts[k].size());
            grads.add(std::string("g") + std::to_string(k), g.back().data(), g.back().size());
        }
        const std::vector<demo_shape> shapes = {{1, 700}, {1, 33}, {8, 32}, {1, 1031}};
        demo_engine<comm::local, Select, Values> demo(m.group, grads, shapes, c, {.lr = 1e-3, .chunk = 16, .k = 5},
                                                      values);
        for (int t = 0; t < steps; ++t) {
            std::size_t i = 0;
            for (auto& v : g)
                for (float& x : v) x = static_cast<float>(std::sin(0.1 * static_cast<double>(i++) * (c.rank() + 1) + t));
            demo.step(exec::host{});
        }
        out[static_cast<std::size_t>(c.rank())] = m.flat();
    });
    for (int r = 1; r < workers; ++r)
        if (std::memcmp(out[static_cast<std::size_t>(r)].data(), out[0].data(), out[0].size() * sizeof(float)) != 0)
            return false;
    return true;
}

// DiLoCo over an elastic world of `workers`, 16 steps with H = 4; a fourth worker asks to
// join at step 8 and is admitted at the next outer step (the donor's state, and the trainer
// state when the communicator carries one); says whether the four replicas end
// bit-identical. Bare: through trickle_test::forwarding_elastic, which carries no trainer
// state, so the join's welcome knows at compile time that there is none (g++ 12 at -O3 once
// turned that into a -Warray-bounds error in the header's trainer-state branch); otherwise
// through comm::elastic_local itself.
template <bool Bare>
bool elastic_agrees() {
    using namespace std::chrono_literals;
    comm::elastic_local_world world(workers + 1, 5000ms, workers);
    std::vector<std::vector<float>> out(workers + 1);
    std::atomic<bool> released{false};
    std::atomic<int> errors{0};
    const auto run = [&](int id, bool join) {
        try {
            comm::elastic_local inner = world.worker(id);
            trickle_test::forwarding_elastic bare{inner};
            auto& c = [&]() -> auto& {
                if constexpr (Bare) return bare; else return inner;
            }();
            using C = std::remove_reference_t<decltype(c)>;
            model m(join ? 7 : id);
            diloco_options o{.interval = 4, .seed = 3};
            o.join = join;
            diloco_engine<outer::nesterov, topology::all_reduce, float, host_space, C> alg(m.group, c, o);
            for (std::uint64_t t = alg.stats().steps; t < 16; ++t) {
                if (!join && t == 8) { // the members wait until the joiner has asked
                    released.store(true);
                    const auto deadline = std::chrono::steady_clock::now() + 5s;
                    while (world.joiners_waiting() < 1 && std::chrono::steady_clock::now() < deadline)
                        std::this_thread::yield();
                }
                m.train(id, static_cast<int>(t));
                alg.step(exec::host{});
            }
            out[static_cast<std::size_t>(id)] = m.flat();
        } catch (const std::exception& e) {
            std::printf("worker %d: %s\n", id, e.what());
            ++errors;
        }
    };
    std::vector<std::thread> th;
    for (int id = 0; id < workers; ++id) th.emplace_back(run, id, false);
    th.emplace_back([&] {
        while (!released.load()) std::this_thread::yield();
        run(workers, true);
    });
    for (auto& t : th) t.join();
    if (errors.load() != 0) return false;
    for (std::size_t r = 1; r < out.size(); ++r)
        if (out[r] != out[0]) return false;
    return true;
}

} // namespace

int main() {
    int failed = 0;
    const auto check = [&](const char* name, bool ok) {
        std::printf("%-60s %s\n", name, ok ? "ok" : "REPLICAS DIFFER");
        failed += ok ? 0 : 1;
    };
    // DiLoCo, the fused host outer step through each codec family (element, block, lane
    // emulation of fp8 blocks), 8 steps with H = 4: the replicas agree after the last.
    check("diloco fp8_block (fused, lanes)", replicas_agree(8, false, [](const param_group<float>& g, auto& c) {
              return diloco<outer::nesterov, topology::all_reduce, codec::fp8_block>(g, c, {.interval = 4});
          }));
    check("diloco int8_block + error feedback", replicas_agree(8, false, [](const param_group<float>& g, auto& c) {
              return diloco<outer::adam, topology::all_reduce, codec::int8_block>(
                  g, c, {.interval = 4, .error_feedback = 1.0});
          }));
    check("diloco bf16 through a ring (the codec's link)", replicas_agree(8, false, [](const param_group<float>& g, auto& c) {
              return diloco<outer::nesterov, topology::ring, codec::bf16>(g, c, {.interval = 4});
          }));
    // One island of every worker: a chain through the codec's link, the total relayed as the
    // same bytes, so the replicas agree; the first send rounds stochastically.
    check("diloco int8_block, islands' link, stochastic rounding", replicas_agree(8, false, [](const param_group<float>& g, auto& c) {
              diloco_options o{.interval = 4};
              o.stochastic_rounding = true;
              return diloco<outer::nesterov, topology::islands, codec::int8_block>(g, c, o, topology::islands{.size = workers});
          }));
    check("diloco top-k sparsifier", replicas_agree(8, false, [](const param_group<float>& g, auto& c) {
              using topk = codec::chunk_topk<codec::sign2_block>;
              return diloco<outer::nesterov, topology::all_reduce, topk>(g, c, {.interval = 4}, {}, {}, topk{});
          }));
    check("diloco pruned, robust (trimmed mean)", replicas_agree(8, false, [](const param_group<float>& g, auto& c) {
              diloco_options o{.interval = 4};
              o.prune_fraction = 0.25;
              o.aggregate = aggregate::parse("trimmed:1");
              return diloco<outer::nesterov>(g, c, o);
          }));
    // The delayed outer step, encoded and overlapped (the route's flight on the progress
    // thread): H = 4, tau = 3, outer steps after steps 3, 7, 11 landing after 6, 10, 14; the
    // 11th step (index 10) lands one, and the parameters become the global ones.
    check("streaming int8_block over comm::async (tau 3)", replicas_agree(11, true, [](const param_group<float>& g, auto& c) {
              diloco_options o{.interval = 4};
              o.overlap_steps = 3;
              return diloco<outer::nesterov, topology::all_reduce, codec::int8_block>(g, c, o);
          }));
    // SPARTA through codecs and samplers, blocking and overlapped: every position of the
    // last exchange is averaged, so with fraction 1 the replicas agree.
    check("sparta bf16, uniform, fraction 1", replicas_agree(5, false, [](const param_group<float>& g, auto& c) {
              return sparta<sampler::uniform, schedule::constant, topology::all_reduce, codec::bf16>(
                  g, c, {.fraction = 1.0, .seed = 2});
          }));
    check("sparta int4_block, block sampler, fraction 1", replicas_agree(5, false, [](const param_group<float>& g, auto& c) {
              return sparta<sampler::block, schedule::constant, topology::all_reduce, codec::int4_block>(
                  g, c, {.fraction = 1.0, .seed = 2}, sampler::block{.block_size = 32});
          }));
    check("sparta overlapped, fp16, over comm::async", replicas_agree(5, true, [](const param_group<float>& g, auto& c) {
              return sparta<sampler::permutation, schedule::constant, topology::all_reduce, codec::fp16>(
                  g, c, {.fraction = 1.0, .seed = 2, .overlap = true});
          }));
    check("sparta_diloco (H = 4)", replicas_agree(8, false, [](const param_group<float>& g, auto& c) {
              return sparta_diloco<>(g, c, {.fraction = 0.05, .seed = 2}, {.interval = 4, .seed = 2});
          }));
    // Elastic DiLoCo (a join at step 8): over comm::elastic_local, which carries a trainer
    // state, and over a communicator that carries none.
    check("diloco elastic, a join (comm::elastic_local)", elastic_agrees<false>());
    check("diloco elastic, a join (no trainer state carried)", elastic_agrees<true>());
    check("ddp", replicas_agree(3, false, [](const param_group<float>& g, auto& c) { return ddp(g, c); }));
    check("demo top_k, fp32 values", demo_agrees<demo_select::top_k>(6, codec::fp32{}));
    check("demo shared, sign2_block values", demo_agrees<demo_select::shared>(6, codec::sign2_block{}));
    return failed == 0 ? 0 : 1;
}
