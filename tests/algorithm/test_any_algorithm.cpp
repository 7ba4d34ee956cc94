// any_algorithm: one owning handle for SPARTA, DiLoCo, SPARTA + DiLoCo or ddp chosen at run
// time. Handles of different algorithms in one vector, stepped in one loop, give the bits,
// stats and checkpoints of the objects they were made from; the moved-from objects are
// empty; calls that do not apply are refused as the objects refuse them.
#include <trickle/trickle.hpp>

#include "test_support.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

using namespace trickle;
using trickle_test::bitwise_equal;

static_assert(!std::is_copy_constructible_v<any_algorithm>);
static_assert(std::is_nothrow_move_constructible_v<any_algorithm>);
// Built from an rvalue only: an lvalue would be left empty behind the caller's back.
static_assert(std::is_constructible_v<any_algorithm, ddp&&>);
static_assert(!std::is_constructible_v<any_algorithm, ddp&>);
static_assert(!std::is_constructible_v<any_algorithm, const sparta<>&>);
static_assert(!std::is_constructible_v<any_algorithm, int>);

namespace {

constexpr int N = 3;
constexpr int steps = 8;
const char* const names[] = {"sparta", "diloco", "sparta_diloco", "ddp"};

struct replica {
    std::vector<float> w;
    param_group<float> group;
    explicit replica(int r) : w(257) {
        for (std::size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(std::sin(0.3 * static_cast<double>(i) + r));
        group.add("w", w.data(), w.size());
    }
    void train(int r, int t) {
        for (std::size_t i = 0; i < w.size(); ++i)
            w[i] += 0.01f * static_cast<float>(static_cast<int>((i * 5 + static_cast<std::size_t>(r + t)) % 7) - 3);
    }
};

// The trainer's choice at run time: the algorithm named `name`.
any_algorithm make(const std::string& name, const param_group<float>& g, comm::local& c) {
    if (name == "sparta") return sparta<sampler::permutation>(g, c, {.fraction = 0.1, .seed = 7});
    if (name == "diloco") return diloco<outer::nesterov>(g, c, {.interval = 3}, {.lr = 0.7, .momentum = 0.9});
    if (name == "sparta_diloco") return sparta_diloco<>(g, c, {.fraction = 0.05, .seed = 2}, {.interval = 4});
    if (name == "ddp") return ddp(g, c, {.interval = 2});
    throw invalid_argument("unknown algorithm " + name);
}

std::string save_of(const detail::erased_handle& a) {
    std::ostringstream os;
    a.save(os);
    return os.str();
}

bool same_stats(const exchange_stats& a, const exchange_stats& b) {
    return a.steps == b.steps && a.exchanges == b.exchanges && a.values == b.values && a.total == b.total &&
           a.dense_bytes == b.dense_bytes && a.initial == b.initial && a.sent.codes == b.sent.codes &&
           a.sent.scales == b.sent.scales;
}

} // namespace

TEST_CASE("any_algorithm: handles of four algorithms stepped in one loop give the objects' bits, stats and checkpoints") {
    constexpr int A = 4;
    // Run 1: a vector of handles, one per algorithm, each over a replica of its own.
    // Run 2: the concrete objects, stepped the same way.
    std::vector<std::vector<replica>> viah(A), direct(A);
    for (int a = 0; a < A; ++a)
        for (int r = 0; r < N; ++r) {
            viah[a].emplace_back(r);
            direct[a].emplace_back(r);
        }
    std::vector<std::vector<std::string>> saved_h(A, std::vector<std::string>(N)), saved_d = saved_h;
    std::vector<std::vector<exchange_stats>> st_h(A, std::vector<exchange_stats>(N)), st_d = st_h;
    std::vector<std::vector<exchange_stats>> sp_h = st_h, ou_h = st_h, sp_d = st_h, ou_d = st_h;
    comm::run_local(N, [&](comm::local& c) {
        const int r = c.rank();
        std::vector<any_algorithm> algos;
        for (int a = 0; a < A; ++a) algos.push_back(make(names[a], viah[a][r].group, c));
        for (int a = 0; a < A; ++a) {
            CHECK(algos[static_cast<std::size_t>(a)]);
            CHECK(std::strcmp(algos[static_cast<std::size_t>(a)].kind(), names[a]) == 0);
        }
        for (int t = 0; t < steps; ++t)
            for (int a = 0; a < A; ++a) {
                viah[a][r].train(r, t);
                algos[static_cast<std::size_t>(a)].step(exec::host{});
            }
        for (int a = 0; a < A; ++a) {
            const any_algorithm& h = algos[static_cast<std::size_t>(a)];
            saved_h[a][r] = save_of(h);
            st_h[a][r] = h.stats();
            sp_h[a][r] = h.sparse_stats();
            ou_h[a][r] = h.outer_stats();
            CHECK(h.membership().workers == N);
        }

        sparta<sampler::permutation> s(direct[0][r].group, c, {.fraction = 0.1, .seed = 7});
        diloco<outer::nesterov> d(direct[1][r].group, c, {.interval = 3}, {.lr = 0.7, .momentum = 0.9});
        sparta_diloco<> sd(direct[2][r].group, c, {.fraction = 0.05, .seed = 2}, {.interval = 4});
        ddp dd(direct[3][r].group, c, {.interval = 2});
        for (int t = 0; t < steps; ++t) {
            direct[0][r].train(r, t);
            s.step(exec::host{});
            direct[1][r].train(r, t);
            d.step(exec::host{});
            direct[2][r].train(r, t);
            sd.step(exec::host{});
            direct[3][r].train(r, t);
            dd.step(exec::host{});
        }
        const detail::erased_handle* objs[A] = {&s, &d, &sd, &dd};
        for (int a = 0; a < A; ++a) {
            saved_d[a][r] = save_of(*objs[a]);
            st_d[a][r] = objs[a]->stats();
        }
        sp_d[2][r] = sd.sparse_stats();
        ou_d[2][r] = sd.outer_stats();
    });
    for (int a = 0; a < A; ++a) {
        CAPTURE(names[a]);
        for (int r = 0; r < N; ++r) {
            CHECK(bitwise_equal(viah[a][r].w, direct[a][r].w));
            CHECK(saved_h[a][r] == saved_d[a][r]);
            CHECK(same_stats(st_h[a][r], st_d[a][r]));
            CHECK(st_h[a][r].exchanges > 0);
            if (a == 2) {
                CHECK(same_stats(sp_h[a][r], sp_d[a][r]));
                CHECK(same_stats(ou_h[a][r], ou_d[a][r]));
            } else {
                CHECK(same_stats(sp_h[a][r], st_h[a][r]));
                CHECK(same_stats(ou_h[a][r], st_h[a][r]));
            }
        }
    }
}

TEST_CASE("any_algorithm: assigned from an object, which is left empty; reassigned; loads what it saved") {
    comm::run_local(2, [](comm::local& c) {
        replica m(c.rank());
        any_algorithm h;
        CHECK(!h);
        ddp dense(m.group, c);
        h = std::move(dense);
        CHECK(h);
        CHECK(!dense); // its engine now belongs to h
        CHECK(std::strcmp(h.kind(), "ddp") == 0);
        h.step(exec::host{});
        CHECK(h.stats().exchanges == 1);
        const std::string at1 = save_of(h);
        h.step(exec::host{});
        std::istringstream is(at1);
        h.load(is);
        CHECK(h.stats().steps == 1);
        // Reassigned: the DiLoCo object replaces the dense one.
        h = diloco<outer::average>(m.group, c, {.interval = 2, .manual_outer = true});
        CHECK(std::strcmp(h.kind(), "diloco") == 0);
        h.set_weight(0.5f);
        h.step(exec::host{});
        h.outer_step(exec::host{});
        CHECK(h.stats().exchanges == 1);
        // Moved between handles.
        any_algorithm other = std::move(h);
        CHECK(!h);
        CHECK(other.stats().steps == 1);
        // Built from a handle the other objects share (as factories return them).
        detail::erased_handle plain = sparta<>(m.group, c, {.fraction = 0.5});
        any_algorithm from_plain(std::move(plain));
        CHECK(std::strcmp(from_plain.kind(), "sparta") == 0);
        CHECK(!plain);
    });
}

TEST_CASE("any_algorithm: calls that do not apply are refused as by the object; an empty handle says it is empty") {
    comm::run_local(2, [](comm::local& c) {
        replica m(c.rank());
        any_algorithm s = sparta<>(m.group, c, {.fraction = 0.5});
        CHECK_THROWS_WITH_AS(s.set_weight(2.0f), doctest::Contains("sparta: set_weight applies to DiLoCo"),
                             invalid_argument);
        CHECK_THROWS_WITH_AS(s.outer_step(exec::host{}), doctest::Contains("sparta: outer_step applies to DiLoCo"),
                             invalid_argument);
        CHECK_THROWS_WITH_AS(s.step(exec::cuda{}), doctest::Contains("sparta::step: the parameters are in host memory"),
                             invalid_argument);
        CHECK_NOTHROW(s.flush());
    });
    any_algorithm none;
    CHECK_THROWS_WITH_AS(none.step(exec::host{}), doctest::Contains("step: this algorithm object is empty"), invalid_argument);
    CHECK_THROWS_WITH_AS(none.kind(), doctest::Contains("kind: this algorithm object is empty"), invalid_argument);
    CHECK_THROWS_WITH_AS(none.sparse_stats(), doctest::Contains("sparse_stats: this algorithm object is empty"),
                         invalid_argument);
    CHECK_THROWS_AS(none.stats(), invalid_argument);
    std::ostringstream os;
    CHECK_THROWS_AS(none.save(os), invalid_argument);
}
