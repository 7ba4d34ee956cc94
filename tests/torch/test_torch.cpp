// trickle::torch: params(module), the model wrappers over process groups, autograd's rule.
#include "torch_support.hpp"

#include <trickle/comm/local.hpp>

#include <doctest/doctest.h>
#include <test_support.hpp>

#include <cstdint>
#include <functional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

using namespace trickle;
using trickle_torch_test::flat;
using trickle_torch_test::net;
using trickle_torch_test::perturb;
using trickle_torch_test::require_all;
using trickle_torch_test::require_ok;
using trickle_torch_test::run_gloo;

namespace {

template <class Fn>
std::string error_of(Fn&& fn) {
    try {
        fn();
    } catch (const std::exception& e) {
        return e.what();
    }
    return "";
}

} // namespace

TEST_CASE("params: one group per dtype, in module order, named as named_parameters() names them") {
    net m(3, 5, 2, 1);
    m->fc2->to(at::kBFloat16);
    const auto p = trickle::torch::params(*m);
    REQUIRE(p.groups.size() == 2);
    CHECK((p.groups[0].dtype == at::kFloat));
    CHECK((p.groups[1].dtype == at::kBFloat16));
    CHECK(p.groups[0].names == std::vector<std::string>{"fc1.weight", "fc1.bias"});
    CHECK(p.groups[1].names == std::vector<std::string>{"fc2.weight", "fc2.bias"});
    CHECK(p.elements() == 3 * 5 + 5 + 5 * 2 + 2);
    const auto& g1 = std::get<param_group<bfloat16>>(p.groups[1].group);
    CHECK(static_cast<const void*>(g1[0].view.data()) == m->fc2->weight.data_ptr());
    CHECK(g1[0].view.size() == 10);
}

TEST_CASE("params: a tensor listed twice (tied weights) is kept once; bad tensors are named in the error") {
    at::Tensor w = at::ones({4, 4});
    at::Tensor b = at::zeros({4});
    const auto tied = trickle::torch::params(std::vector<std::pair<std::string, at::Tensor>>{{"w", w}, {"b", b}, {"w_tied", w}});
    REQUIRE(tied.groups.size() == 1);
    CHECK(tied.groups[0].names == std::vector<std::string>{"w", "b"});

    CHECK(error_of([&] { trickle::torch::params({{"wt", w.t()}}); }).find("parameter 'wt' is not contiguous") !=
          std::string::npos);
    CHECK(error_of([&] { trickle::torch::params({{"i", at::ones({3}, at::kInt)}}); }).find("parameter 'i' has dtype Int") !=
          std::string::npos);
    CHECK(error_of([&] { trickle::torch::params({{"d", at::ones({3}, at::kDouble)}}); }).find("has dtype Double") !=
          std::string::npos);
    CHECK(error_of([&] { trickle::torch::params({{"u", at::Tensor()}}); }).find("undefined") != std::string::npos);
    CHECK(error_of([&] { trickle::torch::params({{"m", at::ones({3}, at::TensorOptions().device(at::kMeta))}}); })
              .find("is on device meta") != std::string::npos);
    // Two views of one storage that overlap without being the same tensor.
    at::Tensor big = at::zeros({10});
    CHECK(error_of([&] { trickle::torch::params({{"x", big.narrow(0, 0, 6)}, {"y", big.narrow(0, 4, 6)}}); })
              .find("overlaps") != std::string::npos);
}

TEST_CASE("torch::sparta over Gloo: replicas start equal, and every step gives comm::local's bits") {
    const int N = 3;
    const int steps = 6;
    const sparta_options opts{.fraction = 0.2, .seed = 5};
    // The wrapper over process groups.
    std::vector<std::vector<float>> got(N);
    std::vector<exchange_stats> st(N);
    std::vector<std::uint64_t> model_bytes(N, 0);
    require_ok(run_gloo(N, [&](comm::process_group& c) {
        net m(4, 16, 3, 100 + static_cast<std::uint64_t>(c.rank())); // different weights on every rank
        trickle::torch::sparta<sampler::permutation> s(m, c, opts);
        for (int t = 0; t < steps; ++t) {
            perturb(*m, c.rank(), t);
            s.step();
            // The cost model of each exchange: an all-reduce of the values it selected.
            model_bytes[static_cast<std::size_t>(c.rank())] +=
                trickle_torch_test::all_reduce_bytes(c, s.stats().last_values);
        }
        got[static_cast<std::size_t>(c.rank())] = flat(*m);
        st[static_cast<std::size_t>(c.rank())] = s.stats();
    }));
    // The same run through trickle::sparta over comm::local, on copies of the tensors.
    std::vector<std::vector<float>> ref(N);
    comm::run_local(N, [&](comm::local& c) {
        net m(4, 16, 3, 100 + static_cast<std::uint64_t>(c.rank()));
        param_group<float> g;
        for (const auto& item : m->named_parameters()) g.add(item.key(), item.value().data_ptr<float>(), item.value().numel());
        trickle::sparta<sampler::permutation> s(g, c, opts);
        for (int t = 0; t < steps; ++t) {
            perturb(*m, c.rank(), t);
            s.step(exec::host{});
        }
        ref[static_cast<std::size_t>(c.rank())] = flat(*m);
    });
    const std::size_t n = got[0].size();
    for (int r = 0; r < N; ++r) {
        INFO("rank ", r);
        CHECK(trickle_test::bitwise_equal(got[static_cast<std::size_t>(r)], ref[static_cast<std::size_t>(r)]));
        const exchange_stats& s = st[static_cast<std::size_t>(r)];
        CHECK(s.exchanges == steps);
        CHECK(s.total.bytes_sent == model_bytes[static_cast<std::size_t>(r)]);
        CHECK(s.values >= static_cast<std::uint64_t>(steps) * (n / 5));
        // The initial broadcast, on its own line: rank 0 sends n floats to each other rank.
        CHECK(s.initial.bytes_sent == (r == 0 ? static_cast<std::uint64_t>(N - 1) * n * 4 : 0u));
        CHECK(s.initial.bytes_received == (r == 0 ? 0u : static_cast<std::uint64_t>(n) * 4));
    }
}

TEST_CASE("torch::diloco over Gloo: replicas identical everywhere after an outer step; mixed dtypes step together") {
    const int N = 3;
    std::vector<std::vector<float>> got(N);
    require_ok(run_gloo(N, [&](comm::process_group& c) {
        net m(4, 8, 2, 7 + static_cast<std::uint64_t>(c.rank()));
        m->fc2->to(at::kHalf); // a second group, in fp16
        trickle::torch::diloco<outer::nesterov> d(m, c, {.interval = 3}, {.lr = 0.7f, .momentum = 0.9f});
        if (d.group_count() != 2) throw std::logic_error("expected two groups");
        for (int t = 0; t < 3; ++t) {
            perturb(*m, c.rank(), t);
            d.step();
        }
        if (d.stats().exchanges != 2) throw std::logic_error("one outer step per group");
        got[static_cast<std::size_t>(c.rank())] = flat(*m);
    }));
    for (int r = 1; r < N; ++r) CHECK(trickle_test::bitwise_equal(got[static_cast<std::size_t>(r)], got[0]));
}

TEST_CASE("torch::ddp over Gloo: every interval-th step, each group's mean, comm::local's bits on every rank") {
    const int N = 3;
    std::vector<std::vector<float>> got(N), before(N);
    require_ok(run_gloo(N, [&](comm::process_group& c) {
        net m(4, 8, 2, 11 + static_cast<std::uint64_t>(c.rank()));
        m->fc2->to(at::kHalf); // a second group: fp16 values travel as their exact fp32 images
        trickle::torch::ddp d(m, c, {.interval = 2});
        if (d.group_count() != 2) throw std::logic_error("expected two groups");
        perturb(*m, c.rank(), 0);
        d.step();
        if (d.stats().exchanges != 0) throw std::logic_error("no exchange before the interval");
        perturb(*m, c.rank(), 1);
        before[static_cast<std::size_t>(c.rank())] = flat(*m);
        d.step();
        if (d.stats().exchanges != 2) throw std::logic_error("one exchange per group");
        got[static_cast<std::size_t>(c.rank())] = flat(*m);
    }));
    for (int r = 1; r < N; ++r) CHECK(trickle_test::bitwise_equal(got[static_cast<std::size_t>(r)], got[0]));
    // The first group (fp32) is the rank-order sum times 1/N, as comm::local adds.
    const std::size_t n32 = 4 * 8 + 8;
    for (std::size_t i = 0; i < n32; ++i) {
        float sum = before[0][i];
        for (int r = 1; r < N; ++r) sum += before[static_cast<std::size_t>(r)][i];
        CHECK(got[0][i] == sum * (1.0f / N));
    }
}

TEST_CASE("torch::sparta_diloco: one initial broadcast (the DiLoCo part's), per-part stats") {
    const int N = 2;
    require_ok(run_gloo(N, [&](comm::process_group& c) {
        net m(4, 8, 2, 3);
        trickle::torch::sparta_diloco<> sd(m, c, {.fraction = 0.5, .seed = 2}, {.interval = 4, .seed = 2});
        for (int t = 0; t < 8; ++t) sd.step();
        const std::size_t n = trickle::torch::params(*m).elements();
        if (sd.outer_stats().exchanges != 2 || sd.sparse_stats().exchanges != 6) throw std::logic_error("parts");
        if (sd.sparse_stats().initial.calls != 0) throw std::logic_error("SPARTA part broadcast");
        if (sd.stats().initial.calls != 1) throw std::logic_error("one broadcast");
        const std::uint64_t expect = c.rank() == 0 ? n * 4 : 0;
        if (sd.stats().initial.bytes_sent != expect) throw std::logic_error("broadcast bytes");
        if (sd.stats().total.bytes_sent != sd.sparse_stats().total.bytes_sent + sd.outer_stats().total.bytes_sent)
            throw std::logic_error("sum of parts");
    }));
}

TEST_CASE("torch wrappers: a checkpoint continues bit for bit") {
    const int N = 2;
    std::vector<std::vector<float>> straight(N), resumed(N);
    std::vector<std::string> state(N);
    std::vector<std::vector<at::Tensor>> saved_params(N);
    require_ok(run_gloo(N, [&](comm::process_group& c) {
        const auto R = static_cast<std::size_t>(c.rank());
        net m(4, 8, 2, 11 + R);
        trickle::torch::sparta_diloco<sampler::permutation> sd(m, c, {.fraction = 0.3, .seed = 9}, {.interval = 3, .seed = 9});
        for (int t = 0; t < 4; ++t) {
            perturb(*m, c.rank(), t);
            sd.step();
        }
        state[R] = sd.save_bytes();
        for (const auto& p : m->parameters()) saved_params[R].push_back(p.detach().clone());
        for (int t = 4; t < 9; ++t) {
            perturb(*m, c.rank(), t);
            sd.step();
        }
        straight[R] = flat(*m);
    }));
    require_ok(run_gloo(N, [&](comm::process_group& c) {
        const auto R = static_cast<std::size_t>(c.rank());
        net m(4, 8, 2, 50); // other weights: the checkpoint's parameters are restored below
        {
            ::torch::NoGradGuard no_grad;
            auto ps = m->parameters();
            for (std::size_t i = 0; i < ps.size(); ++i) ps[i].copy_(saved_params[R][i]);
        }
        trickle::torch::sparta_diloco<sampler::permutation> sd(m, c, {.fraction = 0.3, .seed = 9},
                                                               {.interval = 3, .seed = 9, .broadcast_initial = false});
        sd.load_bytes(state[R]);
        for (int t = 4; t < 9; ++t) {
            perturb(*m, c.rank(), t);
            sd.step();
        }
        resumed[R] = flat(*m);
    }));
    for (int r = 0; r < N; ++r)
        CHECK(trickle_test::bitwise_equal(resumed[static_cast<std::size_t>(r)], straight[static_cast<std::size_t>(r)]));
}

TEST_CASE("torch wrappers: a damaged or extended two-group state is refused on every rank and changes nothing") {
    const int N = 2;
    // Two groups (fp32 and fp16): their checkpoints follow each other in the state, so a
    // refusal in the second group must put the first group back.
    auto attempt = [&](const std::function<void(std::string&)>& damage) {
        return run_gloo(N, [&](comm::process_group& c) {
            net m(4, 8, 2, 3);
            m->fc2->to(at::kHalf);
            trickle::torch::diloco<outer::nesterov> d(m, c, {.interval = 2, .broadcast_initial = false},
                                                      {.lr = 0.7f, .momentum = 0.9f});
            if (d.group_count() != 2) throw std::logic_error("expected two groups");
            for (int t = 0; t < 2; ++t) {
                perturb(*m, c.rank(), t);
                d.step();
            }
            std::string state = d.save_bytes();
            for (int t = 2; t < 5; ++t) {
                perturb(*m, c.rank(), t);
                d.step();
            }
            const std::string before = d.save_bytes();
            damage(state);
            try {
                d.load_bytes(state);
            } catch (const trickle::error&) {
                if (d.save_bytes() != before) throw std::logic_error("state changed by a failed load");
                throw;
            }
        });
    };
    require_all(attempt([](std::string& s) { s += "x"; }), "checkpoint: unexpected bytes after the end marker");
    require_all(attempt([](std::string& s) { s.back() = static_cast<char>(s.back() ^ 1); }),
                "checkpoint: checksum mismatch in end marker");
    require_all(attempt([](std::string& s) { s[40] = static_cast<char>(s[40] ^ 0x20); }), "checkpoint: ");
    require_ok(attempt([](std::string&) {}));
}

TEST_CASE("torch::sparta over a process group with the checks in the payload: one collective per exchange, "
          "the same bits") {
    // A small model: every exchange is one all-gather, and the argument check travels in it.
    const int N = 4;
    const int steps = 5;
    const sparta_options opts{.fraction = 0.05, .seed = 9};
    for (const auto checks : {comm::argument_checks::collective, comm::argument_checks::in_payload}) {
        std::vector<std::vector<float>> got(N);
        std::vector<std::uint64_t> per_step(N);
        require_ok(run_gloo(
            N,
            [&](comm::process_group& c) {
                net m(4, 16, 3, 7 + static_cast<std::uint64_t>(c.rank()));
                trickle::torch::sparta<sampler::uniform> s(m, c, opts);
                const std::uint64_t before = c.collectives();
                for (int t = 0; t < steps; ++t) {
                    perturb(*m, c.rank(), t);
                    s.step();
                }
                per_step[static_cast<std::size_t>(c.rank())] = (c.collectives() - before) / steps;
                if ((c.collectives() - before) % steps != 0) throw std::logic_error("uneven collectives per step");
                got[static_cast<std::size_t>(c.rank())] = flat(*m);
            },
            comm::process_group_options{.checks = checks}));
        std::vector<std::vector<float>> ref(N);
        comm::run_local(N, [&](comm::local& c) {
            net m(4, 16, 3, 7 + static_cast<std::uint64_t>(c.rank()));
            trickle::torch::sparta<sampler::uniform> s(m, c, opts);
            for (int t = 0; t < steps; ++t) {
                perturb(*m, c.rank(), t);
                s.step();
            }
            ref[static_cast<std::size_t>(c.rank())] = flat(*m);
        });
        for (int r = 0; r < N; ++r) {
            INFO("rank ", r, ", in_payload ", checks == comm::argument_checks::in_payload);
            CHECK(trickle_test::bitwise_equal(got[static_cast<std::size_t>(r)], ref[static_cast<std::size_t>(r)]));
            CHECK(per_step[static_cast<std::size_t>(r)] == (checks == comm::argument_checks::in_payload ? 1u : 2u));
        }
    }
}

TEST_CASE("torch wrappers: bad input throws the same kind of error on every rank, without a hang") {
    const int N = 3;
    SUBCASE("fraction 1.5") {
        require_all(run_gloo(N,
                             [&](comm::process_group& c) {
                                 net m(4, 8, 2, 1);
                                 trickle::torch::sparta<> s(m, c, {.fraction = 1.5});
                             }),
                    "fraction must be in (0, 1], got 1.5");
    }
    SUBCASE("models that differ between ranks") {
        require_all(run_gloo(N,
                             [&](comm::process_group& c) {
                                 net m(4, c.rank() == 1 ? 9 : 8, 2, 1);
                                 trickle::torch::sparta<> s(m, c, {.fraction = 0.1});
                             }),
                    "workers disagree on the torch.sparta configuration: group0's tensors in order: rank 0 has 4, "
                    "rank 1 has 4; the first that differs is number 0: rank 0 has 'fc1.weight [8, 4]', rank 1 has "
                    "'fc1.weight [9, 4]'");
    }
    SUBCASE("a non-contiguous parameter on one rank") {
        require_all(run_gloo(N,
                             [&](comm::process_group& c) {
                                 net m(4, 8, 2, 1);
                                 if (c.rank() == 2) m->fc1->weight.set_data(m->fc1->weight.data().t());
                                 trickle::torch::diloco<> d(m, c, {.interval = 2});
                             }),
                    "rank 2: trickle::torch::params: parameter 'fc1.weight' is not contiguous");
    }
    SUBCASE("an empty model") {
        require_all(run_gloo(N,
                             [&](comm::process_group& c) {
                                 ::torch::nn::Sequential empty;
                                 trickle::torch::sparta<> s(*empty, c);
                             }),
                    "sparta: the model has no parameters");
    }
}

TEST_CASE("torch wrappers: misuse on one worker is caught where it happens") {
    comm::local_world world(1);
    auto c = world.rank(0);
    SUBCASE("an empty wrapper") {
        trickle::torch::sparta<> s;
        CHECK_THROWS_WITH_AS(s.step(), doctest::Contains("this object is empty"), invalid_argument);
        trickle::sparta<> plain;
        CHECK_THROWS_WITH_AS(plain.step(exec::host{}), doctest::Contains("this algorithm object is empty"),
                             invalid_argument);
    }
    SUBCASE("a parameter reallocated after the wrapper was built") {
        net m(4, 8, 2, 1);
        trickle::torch::sparta<> s(m, c, {.fraction = 0.5});
        m->fc2->bias.set_data(m->fc2->bias.data().clone());
        CHECK_THROWS_WITH_AS(s.step(), doctest::Contains("parameter 'fc2.bias' was moved or reallocated"),
                             invalid_argument);
    }
}

TEST_CASE("autograd: stepping between forward and backward makes backward fail loudly") {
    comm::local_world world(1);
    auto c = world.rank(0);
    net m(4, 8, 2, 1);
    trickle::torch::sparta<> s(m, c, {.fraction = 0.5});
    const at::Tensor x = at::randn({5, 4});
    SUBCASE("the documented order works") {
        auto loss = m->forward(x).pow(2).sum();
        loss.backward();
        s.step();
        CHECK(m->fc2->weight.grad().defined());
    }
    SUBCASE("a step inside forward/backward: PyTorch's in-place error, not silent corruption") {
        auto loss = m->forward(x).pow(2).sum();
        s.step(); // writes fc2.weight, which the graph saved
        CHECK_THROWS_WITH(loss.backward(), doctest::Contains("modified by an inplace operation"));
    }
}
