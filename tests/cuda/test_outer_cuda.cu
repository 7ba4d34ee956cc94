// The DiLoCo kernel bodies run by exec::cuda: the host suites' checks on the device, and
// device results equal to the host's bit for bit (rules avoid fused multiply-adds).
#include "../outer/outer_tests.hpp"

#include <doctest/doctest.h>

using namespace trickle;

namespace {

// A stream of its own, so the bodies are checked off the legacy default stream.
struct stream_guard {
    cudaStream_t stream = nullptr;
    stream_guard() { TRICKLE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking)); }
    ~stream_guard() { cudaStreamDestroy(stream); }
    stream_guard(const stream_guard&) = delete;
    stream_guard& operator=(const stream_guard&) = delete;
};

} // namespace

TEST_CASE_TEMPLATE("cuda diloco kernels: every outer optimizer, and the same bits as the host", T, float, half,
                   bfloat16) {
    stream_guard s;
    const auto device = trickle_test::check_all_trajectories<exec::cuda, T>(exec::cuda{s.stream});
    const auto host = trickle_test::check_all_trajectories<exec::host, T>(exec::host{});
    REQUIRE(device.size() == host.size());
    for (std::size_t j = 0; j < host.size(); ++j) {
        INFO(trickle::detail::concat("optimizer #", j));
        CHECK(trickle_test::all_same_bits(device[j].snapshot, host[j].snapshot));
        CHECK(trickle_test::all_same_bits(device[j].state, host[j].state));
        CHECK(trickle_test::all_same_bits(device[j].params, host[j].params));
    }
}

TEST_CASE_TEMPLATE("cuda diloco kernels: averaging, weights, state layout, snapshot copy, bf16 wire", T, float, half,
                   bfloat16) {
    stream_guard s;
    const exec::cuda ex{s.stream};
    trickle_test::check_average_semantics<exec::cuda, T>(ex);
    trickle_test::check_weighted<exec::cuda, T>(ex);
    // Compared bit for bit with rule.apply run on the host.
    trickle_test::check_state_isolation<exec::cuda, T>(ex, outer::average{});
    trickle_test::check_state_isolation<exec::cuda, T>(ex, outer::sgd{.lr = 0.5});
    trickle_test::check_state_isolation<exec::cuda, T>(ex, outer::momentum{});
    trickle_test::check_state_isolation<exec::cuda, T>(ex, outer::nesterov{});
    trickle_test::check_state_isolation<exec::cuda, T>(ex, outer::adam{.lr = 0.1});
    trickle_test::check_snapshot_copy<exec::cuda, T>(ex);
    trickle_test::check_bf16_wire<exec::cuda, T>(ex);
}

TEST_CASE("cuda diloco kernels: a large group crosses many blocks and grid-stride iterations") {
    stream_guard s;
    // 3M elements: more than one grid-stride pass at the default launch shape.
    trickle_test::check_trajectory<exec::cuda, float>(exec::cuda{s.stream}, outer::nesterov{}, 2, 2e-5,
                                                      std::size_t{3} << 20, 2);
}
