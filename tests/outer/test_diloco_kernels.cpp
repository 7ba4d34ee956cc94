// The DiLoCo kernel bodies run by exec::host (and exec::openmp where built): trajectories
// of every outer optimizer for fp32, fp16 and bf16 parameters, averaging semantics,
// weighted averaging, the state layout and the wire policy.
#include "outer_tests.hpp"

#include <doctest/doctest.h>

using namespace trickle;

TEST_CASE_TEMPLATE("diloco kernels: every outer optimizer follows its torch rule over several rounds", T, float, half,
                   bfloat16) {
    const auto host = trickle_test::check_all_trajectories<exec::host, T>(exec::host{});
#if TRICKLE_HAS_OPENMP
    // The bodies do not depend on the order of indices: a parallel run gives the same bits.
    const auto omp = trickle_test::check_all_trajectories<exec::openmp, T>(exec::openmp{.num_threads = 2});
    REQUIRE(omp.size() == host.size());
    for (std::size_t j = 0; j < host.size(); ++j) {
        CHECK(trickle_test::all_same_bits(omp[j].snapshot, host[j].snapshot));
        CHECK(trickle_test::all_same_bits(omp[j].state, host[j].state));
    }
#else
    CHECK(host.size() == 6);
#endif
}

// run(k0, k1) walks the group tensor by tensor; operator()(k) searches the segment table
// for each index. Both must write the same bits, whatever the chunking: chunks of 1, of 5
// (which end inside tensors and step over the empty one), and the host's default.
TEST_CASE_TEMPLATE("diloco kernels: run() over any chunking gives the bits of operator() per index", T, float, half,
                   bfloat16) {
    using rig = trickle_test::diloco_rig<exec::host, T>;
    const auto ref = trickle_test::check_all_trajectories<exec::host, T>(exec::host{}, rig::per_index);
    for (const std::size_t range : {std::size_t{1}, std::size_t{5}, rig::by_ranges}) {
        CAPTURE(range);
        const auto got = trickle_test::check_all_trajectories<exec::host, T>(exec::host{}, range);
        REQUIRE(got.size() == ref.size());
        for (std::size_t j = 0; j < ref.size(); ++j) {
            CHECK(trickle_test::all_same_bits(got[j].snapshot, ref[j].snapshot));
            CHECK(trickle_test::all_same_bits(got[j].state, ref[j].state));
            CHECK(trickle_test::all_same_bits(got[j].params, ref[j].params));
        }
        trickle_test::check_state_isolation<exec::host, T>(exec::host{}, outer::adam{.lr = 0.1}, range);
        trickle_test::check_state_isolation<exec::host, T>(exec::host{}, outer::nesterov{}, range);
        trickle_test::check_snapshot_copy<exec::host, T>(exec::host{}, range);
    }
    CHECK(ranges<host_space>(snapshot_copy_body<T>{}, 40000).calls() == 3);
    CHECK(ranges<cuda_space>(snapshot_copy_body<T>{}, 40000).calls() == 40000);
    CHECK(ranges<host_space>(snapshot_copy_body<T>{}, 0).calls() == 0);
}

TEST_CASE_TEMPLATE("diloco kernels: average keeps a lone idle worker and reaches the mean; sgd{1} is average", T,
                   float, half, bfloat16) {
    trickle_test::check_average_semantics<exec::host, T>(exec::host{});
}

TEST_CASE_TEMPLATE("diloco kernels: weighted averaging through the weight sum", T, float, half, bfloat16) {
    trickle_test::check_weighted<exec::host, T>(exec::host{});
}

TEST_CASE_TEMPLATE("diloco kernels: state layout, chunking and isolation", T, float, half, bfloat16) {
    trickle_test::check_state_isolation<exec::host, T>(exec::host{}, outer::average{});
    trickle_test::check_state_isolation<exec::host, T>(exec::host{}, outer::sgd{.lr = 0.5});
    trickle_test::check_state_isolation<exec::host, T>(exec::host{}, outer::momentum{});
    trickle_test::check_state_isolation<exec::host, T>(exec::host{}, outer::nesterov{});
    trickle_test::check_state_isolation<exec::host, T>(exec::host{}, outer::adam{.lr = 0.1});
}

TEST_CASE_TEMPLATE("diloco kernels: snapshot copy", T, float, half, bfloat16) {
    trickle_test::check_snapshot_copy<exec::host, T>(exec::host{});
}

TEST_CASE_TEMPLATE("diloco kernels: a bf16 wire", T, float, half, bfloat16) {
    trickle_test::check_bf16_wire<exec::host, T>(exec::host{});
}

TEST_CASE("diloco kernels: the bodies are trivially copyable, so they can be launched on a device") {
    static_assert(std::is_trivially_copyable_v<outer_delta_body<half>>);
    static_assert(std::is_trivially_copyable_v<outer_update_body<bfloat16, outer::adam_rule>>);
    static_assert(std::is_trivially_copyable_v<snapshot_copy_body<float>>);
    static_assert(std::is_trivially_copyable_v<range_body<outer_update_body<half, outer::momentum_rule<true>>>>);
    static_assert(wire_sink<dense_wire<half>> && wire_source<dense_wire<float>>);
    struct not_a_wire {
        float* data;
    };
    static_assert(!wire_sink<not_a_wire> && !wire_source<not_a_wire>);
    CHECK(outer_state_index(1, 5, 10) == 15);
    CHECK(outer_state_index(0, 5, 10) == 5);
}
