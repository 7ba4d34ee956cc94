// A sparsifier declared outside the library (docs/extending.md, "A sparsifier"): strided_k
// keeps every stride-th value, the offset moving by one each round, so no index is sent.
// It is built on the library's shared-positions all-reduce (the machinery of random_k),
// summed exactly as random_k's packed values are, and runs through trickle::diloco as
// DiLoCo's outer wire, found by argument-dependent lookup.
#include <trickle/algorithm/diloco.hpp>
#include <trickle/codec/any.hpp>
#include <trickle/codec/any_sparsifier.hpp>
#include <trickle/codec/codecs.hpp>
#include <trickle/codec/sparse.hpp>
#include <trickle/comm/local.hpp>
#include <trickle/outer.hpp>
#include <trickle/schedule/any.hpp>
#include <trickle/topology.hpp>

#include "test_support.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

namespace user {

namespace codec = trickle::codec;

// ---- the worked example of docs/extending.md ----

// Positions (offset + j stride) mod n for j < ceil(n / stride), offset = round mod stride:
// distinct, the same on every worker, and every stride rounds visit each position.
template <trickle::codec_policy Values = codec::fp32>
struct strided_k {
    static constexpr const char* name = "strided_k";
    using value_codec = Values;
    template <trickle::codec_policy W>
    using with_values = strided_k<W>; // needed only to be registered (codec::any_sparsifier)
    std::size_t stride = 8;
    Values values{};

    std::string error() const {
        if (stride == 0) return "strided_k: stride must be >= 1, got 0";
        trickle::config_record inner;
        values.describe(inner);
        if (!inner.error().empty()) return "strided_k: value codec: " + inner.error();
        return {};
    }
    void describe(trickle::config_record& rec) const {
        rec.add("sparsifier", name).add("sparse_stride", stride);
        trickle::config_record inner;
        values.describe(inner);
        rec.add_fields("sparse_values_", inner);
        if (const std::string e = error(); !e.empty()) rec.set_error(e);
    }
    std::size_t kept(std::size_t n) const { return stride == 0 ? 0 : (n + stride - 1) / stride; }
    std::size_t payload_bytes(std::size_t n) const { return values.wire_bytes(kept(n)); }
    void positions(std::size_t n, std::uint64_t round, std::uint64_t* pos) const {
        const std::size_t offset = static_cast<std::size_t>(round % stride);
        for (std::size_t j = 0; j < kept(n); ++j) pos[j] = (offset + j * stride) % n;
    }
    void reserve_scratch(codec::sparse_scratch& s, std::size_t n, int ranks) const {
        codec::reserve_shared_positions(values, s, kept(n), ranks);
    }
};

// The sum over workers, found by ADL from the sparsifier's namespace: write the round's
// positions, then the library's shared-positions all-reduce.
template <class Values, trickle::byte_communicator Comm>
int sparse_all_reduce(const strided_k<Values>& sp, Comm& comm, float* buf, std::size_t n, codec::sparse_scratch& s,
                      float* residual = nullptr, float beta = 0.0f, std::uint64_t /*seed*/ = 0,
                      std::uint64_t round = 0) {
    trickle::require(sp.error().empty(), sp.error());
    const std::size_t K = sp.kept(n);
    trickle::require(s.keys.size() >= K, "strided_k: the scratch was reserved for fewer values than ", n);
    if (n == 0) return comm.size();
    sp.positions(n, round, s.keys.data());
    return codec::shared_positions_all_reduce(sp.values, comm, buf, n, s.keys.data(), K, s, residual, beta);
}

// What worker `me` of N sends, by part.
template <class Values>
codec::wire_parts sparse_all_reduce_parts(const strided_k<Values>& sp, std::size_t n, int N, int me) {
    return codec::shared_positions_parts(sp.values, sp.kept(n), N, me);
}

static_assert(codec::sparsifier_policy<strided_k<>> && !trickle::codec_policy<strided_k<>>);

} // namespace user

using namespace trickle;
using trickle_test::bitwise_equal;

namespace {

std::vector<float> input(int r, std::size_t n) {
    std::vector<float> v(n);
    for (std::size_t i = 0; i < n; ++i)
        v[i] = static_cast<float>(std::sin(0.37 * static_cast<double>(i) + r) * (r + 1));
    return v;
}

} // namespace

TEST_CASE("user sparsifier: strided_k sums exactly its round's positions, zeros elsewhere, bytes as announced") {
    const std::size_t n = 103; // not a multiple of the stride
    const user::strided_k<> sp{.stride = 4};
    CHECK(sp.kept(n) == 26);
    for (int N = 1; N <= 4; ++N) {
        for (std::uint64_t round : {0u, 1u, 6u}) {
            CAPTURE(N);
            CAPTURE(round);
            std::vector<std::vector<float>> got(static_cast<std::size_t>(N));
            std::vector<traffic_counters> t(static_cast<std::size_t>(N));
            comm::run_local(N, [&](comm::local& comm) {
                auto v = input(comm.rank(), n);
                codec::sparse_scratch s;
                s.reserve(sp, n, N);
                CHECK(user::sparse_all_reduce(sp, comm, v.data(), n, s, nullptr, 0.0f, 0, round) == N);
                got[static_cast<std::size_t>(comm.rank())] = v;
                t[static_cast<std::size_t>(comm.rank())] = comm.traffic();
            });
            std::vector<std::uint64_t> pos(sp.kept(n));
            sp.positions(n, round, pos.data());
            const std::set<std::uint64_t> chosen(pos.begin(), pos.end());
            CHECK(chosen.size() == pos.size()); // distinct
            for (std::size_t i = 0; i < n; ++i) {
                CAPTURE(i);
                float sum = 0.0f;
                for (int r = 0; r < N; ++r) sum += input(r, n)[i];
                for (int r = 0; r < N; ++r) {
                    const float want = chosen.count(i) ? sum : 0.0f;
                    CHECK(got[static_cast<std::size_t>(r)][i] == doctest::Approx(want).epsilon(1e-6));
                    CHECK(got[static_cast<std::size_t>(r)][i] == got[0][i]);
                }
            }
            for (int r = 0; r < N; ++r) {
                const auto parts = user::sparse_all_reduce_parts(sp, n, N, r);
                CHECK(t[static_cast<std::size_t>(r)].bytes_sent == parts.codes + parts.scales);
                CHECK(parts.codes == trickle::detail::all_reduce_bytes(sp.kept(n), 4, N, r));
            }
        }
    }
    // Through int8 blocks, error feedback on: the same bits everywhere.
    const user::strided_k<codec::int8_block> q{.stride = 3};
    std::vector<std::vector<float>> got(3);
    comm::run_local(3, [&](comm::local& comm) {
        auto v = input(comm.rank(), n);
        std::vector<float> residual(n, 0.0f);
        codec::sparse_scratch s;
        s.reserve(q, n, 3);
        user::sparse_all_reduce(q, comm, v.data(), n, s, residual.data(), 1.0f, 0, 2);
        got[static_cast<std::size_t>(comm.rank())] = v;
    });
    CHECK(bitwise_equal(got[1], got[0]));
    CHECK(bitwise_equal(got[2], got[0]));
}

TEST_CASE("user sparsifier: strided_k as DiLoCo's outer wire: identical replicas, only the round's positions move") {
    const std::size_t n = 50;
    const int N = 3;
    const std::uint64_t H = 2;
    const user::strided_k<> sp{.stride = 5};
    std::vector<std::vector<float>> after(N);
    std::vector<exchange_stats> stats(N);
    std::vector<float> start = input(0, n);
    comm::run_local(N, [&](comm::local& c) {
        std::vector<float> w = start;
        param_group<float> g;
        g.add("w", w.data(), n);
        diloco_engine<outer::average, topology::all_reduce, float, host_space, comm::local, user::strided_k<>> d(
            g, c, {.interval = H}, {}, {}, sp);
        for (std::uint64_t t = 0; t < H; ++t) {
            for (std::size_t i = 0; i < n; ++i) w[i] += 0.01f * static_cast<float>(c.rank() + 1);
            d.step(exec::host{});
        }
        after[static_cast<std::size_t>(c.rank())] = w;
        stats[static_cast<std::size_t>(c.rank())] = d.stats();
    });
    for (int r = 1; r < N; ++r) CHECK(bitwise_equal(after[static_cast<std::size_t>(r)], after[0]));
    // average: params = snapshot - mean change at the positions sent, the snapshot elsewhere.
    std::size_t moved = 0;
    for (std::size_t i = 0; i < n; ++i)
        if (after[0][i] != start[i]) {
            ++moved;
            CHECK(after[0][i] == doctest::Approx(start[i] + 0.04f).epsilon(1e-5)); // mean of 0.02, 0.04, 0.06
        }
    CHECK(moved == sp.kept(n));
    CHECK(stats[0].exchanges == 1);
    CHECK(stats[1].total.bytes_sent > 0);
}

TEST_CASE("any_sparsifier: the registry's names, the settings each takes, fp32 values as the plain policy") {
    CHECK(std::string(codec::any_sparsifier::names()[0]) == "chunk_topk");
    CHECK(std::string(codec::any_sparsifier::names()[1]) == "random_k");
    const auto t = codec::any_sparsifier::from_name("chunk_topk", {.chunk = 32, .k = 3, .fraction = 0.5});
    REQUIRE(std::holds_alternative<codec::chunk_topk<>>(t.held)); // fp32 values: the plain type
    CHECK(std::get<codec::chunk_topk<>>(t.held).chunk == 32);
    CHECK(std::get<codec::chunk_topk<>>(t.held).k == 3);
    const auto r = codec::any_sparsifier::from_name("random_k", {.fraction = 0.25, .values = codec::int8_block{}});
    REQUIRE(std::holds_alternative<codec::random_k<codec::any>>(r.held));
    CHECK(std::get<codec::random_k<codec::any>>(r.held).fraction == 0.25);
    CHECK(std::string(r.held_name()) == "random_k");
    // describe() writes the held policy's fields: equal records for the plain and held forms.
    config_record a, b;
    t.describe(a);
    codec::chunk_topk<>{.chunk = 32, .k = 3}.describe(b);
    CHECK(a.serialize() == b.serialize());
    // Bytes and errors through the variant.
    CHECK(t.payload_bytes(1000) == codec::chunk_topk<>{.chunk = 32, .k = 3}.payload_bytes(1000));
    CHECK(codec::any_sparsifier::from_name("chunk_topk", {.chunk = 4, .k = 5}).error().find("k must be <= chunk") !=
          std::string::npos);
    // An unknown name lists the registered ones, naming the option.
    try {
        (void)codec::any_sparsifier::from_name("top_k", {}, "outer_sparsifier");
        FAIL("no error");
    } catch (const invalid_argument& e) {
        const std::string what = e.what();
        CHECK(what.find("outer_sparsifier") != std::string::npos);
        CHECK(what.find("chunk_topk") != std::string::npos);
        CHECK(what.find("random_k") != std::string::npos);
    }
}

// No lr schedule, one object for every call below: g++ 12 at -O3 reports a false
// -Wmaybe-uninitialized (the variant's index, in the destructor of an empty
// std::optional<schedule::any> temporary) once visit_named's visitor is inlined here.
const std::optional<schedule::any> no_lr_schedule;

TEST_CASE("outer::visit_named: the settings each optimizer has, an lr schedule where one is given") {
    outer::visit_named(
        "momentum", {.lr = 0.3, .momentum = 0.5, .beta1 = 0.1}, no_lr_schedule, [](const auto& o) {
            using O = std::remove_cvref_t<decltype(o)>;
            if constexpr (std::is_same_v<O, outer::maybe_lr_scheduled<outer::momentum, schedule::any>>) {
                CHECK(o.optimizer.lr == 0.3);
                CHECK(o.optimizer.momentum == 0.5);
                CHECK(!o.schedule);
            } else {
                FAIL("momentum came as another type");
            }
        });
    outer::visit_named("adam", {}, std::optional<schedule::any>{schedule::cosine{.end_fraction = 0.1, .steps = 10}},
                       [](const auto& o) {
                           using O = std::remove_cvref_t<decltype(o)>;
                           if constexpr (std::is_same_v<O, outer::maybe_lr_scheduled<outer::adam, schedule::any>>) {
                               CHECK(o.optimizer.lr == outer::adam{}.lr); // unset: the default
                               REQUIRE(o.schedule);
                               // With a schedule: the lr_scheduled record, the schedule's fields included.
                               config_record with;
                               o.describe(with);
                               CHECK(with.serialize().find("outer.lr_") != std::string::npos);
                           } else {
                               FAIL("adam came as another type");
                           }
                       });
    // average has no learning rate: as itself, and a schedule for it is refused.
    outer::visit_named("average", {.lr = 2.0}, no_lr_schedule, [](const auto& o) {
        CHECK(std::is_same_v<std::remove_cvref_t<decltype(o)>, outer::average>);
    });
    CHECK_THROWS_WITH_AS(outer::visit_named("average", {}, std::optional<schedule::any>{schedule::constant{}},
                                            [](const auto&) {}),
                         doctest::Contains("no learning rate to schedule"), invalid_argument);
    CHECK_THROWS_WITH_AS(outer::visit_named("lion", {}, no_lr_schedule, [](const auto&) {}),
                         doctest::Contains("nesterov"), invalid_argument);
}
