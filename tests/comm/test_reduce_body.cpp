// kernels/reduce.hpp: rank_sum_body, run on the host, gives comm::local's all-reduce bits
// (comm::local_cuda runs it on a GPU).
#include <trickle/comm/local.hpp>
#include <trickle/exec/host.hpp>
#include <trickle/kernels/reduce.hpp>

#include "test_support.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

using namespace trickle;

namespace {

using trickle_test::mixed;

std::vector<std::vector<float>> inputs(int N, std::size_t n) {
    std::vector<std::vector<float>> v(static_cast<std::size_t>(N), std::vector<float>(n));
    for (int r = 0; r < N; ++r)
        for (std::size_t i = 0; i < n; ++i) v[static_cast<std::size_t>(r)][i] = mixed(r, i);
    return v;
}

// comm::local's all-reduce of the same inputs: the reference bits.
std::vector<std::vector<float>> local_sums(int N, std::size_t n) {
    auto v = inputs(N, n);
    comm::run_local(N, [&](comm::local& c) { c.all_reduce_sum(v[static_cast<std::size_t>(c.rank())].data(), n); });
    return v;
}

// What comm::local_cuda does: one launch per rank over its chunk, here on the host.
void body_sums(std::vector<std::vector<float>>& v, std::size_t n) {
    const int N = static_cast<int>(v.size());
    rank_sum_body body{};
    for (int r = 0; r < N; ++r) {
        body.src[r] = v[static_cast<std::size_t>(r)].data();
        body.dst[r] = v[static_cast<std::size_t>(r)].data();
    }
    body.ranks = N;
    for (int r = 0; r < N; ++r) {
        body.begin = detail::chunk_begin(n, N, r);
        for_each_index(exec::host{}, detail::chunk_size(n, N, r), body);
    }
}

} // namespace

static_assert(std::is_trivially_copyable_v<rank_sum_body>, "a CUDA kernel body must be trivially copyable");

TEST_CASE("rank_sum_body: in place, chunk by chunk, the bits of comm::local's all_reduce_sum") {
    for (int N : {1, 2, 3, 4, 5, 7, 64}) {
        for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{3}, std::size_t{5}, std::size_t{1000},
                              std::size_t{4099}}) {
            INFO("N = ", N, ", n = ", n);
            const auto want = local_sums(N, n);
            auto got = inputs(N, n);
            body_sums(got, n);
            for (std::size_t r = 0; r < got.size(); ++r) REQUIRE(trickle_test::bitwise_equal(got[r], want[r]));
        }
    }
}

TEST_CASE("rank_sum_body: out of place leaves the sources alone") {
    const int N = 3;
    const std::size_t n = 257;
    const auto src = inputs(N, n);
    std::vector<std::vector<float>> dst(N, std::vector<float>(n, 7.0f));
    rank_sum_body body{};
    for (int r = 0; r < N; ++r) {
        body.src[r] = src[static_cast<std::size_t>(r)].data();
        body.dst[r] = dst[static_cast<std::size_t>(r)].data();
    }
    body.ranks = N;
    body.begin = 0;
    for_each_index(exec::host{}, n, body);
    const auto want = local_sums(N, n);
    for (int r = 0; r < N; ++r) CHECK(trickle_test::bitwise_equal(dst[static_cast<std::size_t>(r)], want[0]));
    const auto again = inputs(N, n);
    for (int r = 0; r < N; ++r)
        CHECK(trickle_test::bitwise_equal(src[static_cast<std::size_t>(r)], again[static_cast<std::size_t>(r)]));
}

TEST_CASE("rank_sum_body: the order is rank order (1 + 1e8 - 1e8 is 0, not 1)") {
    // In fp32, (1 + 1e8) rounds to 1e8, so rank order gives 0; any other order gives 1.
    float a = 1.0f, b = 1e8f, c = -1e8f;
    float d0 = 0, d1 = 0, d2 = 0;
    const rank_sum_body body{{&a, &b, &c}, {&d0, &d1, &d2}, 3, 0};
    for_each_index(exec::host{}, 1, body);
    CHECK(d0 == 0.0f);
    CHECK(d1 == 0.0f);
    CHECK(d2 == 0.0f);
    // Summed the other way round the same three values give 1: the checks above would notice.
    volatile float s = c;
    s = s + b;
    s = s + a;
    CHECK(s == 1.0f);
}
