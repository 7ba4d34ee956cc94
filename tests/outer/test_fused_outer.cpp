// DiLoCo's quantized outer step on the device fuses the outer gradient into the codec's
// encode pass (outer_delta_source) and the update into its decode pass
// (outer_update_sink, codec::encoded_all_reduce_blocks_fused). Run here on the host (the
// lane emulation, comm::local workers) against the unfused passes the engine ran before:
// the delta pass into a wire, the encoded all-reduce of the wire, the update pass. Same
// parameters, snapshot, state and residual, bit for bit, over tensors whose quads straddle
// a tensor boundary and an empty tensor.
#include "outer_tests.hpp"

#include <trickle/codec.hpp>
#include <trickle/comm/local.hpp>

#include <doctest/doctest.h>

using namespace trickle;

namespace {

struct worker_result {
    std::vector<float> params, snapshot, state, residual;
};

template <class T, class Codec, class Outer>
std::vector<worker_result> outer_rounds(const Codec& c, const Outer& outer, int N, std::size_t n, float beta,
                                        bool fused) {
    std::vector<worker_result> out(static_cast<std::size_t>(N));
    constexpr int slots = std::remove_cvref_t<decltype(outer.prepare(1))>::state_slots;
    comm::run_local(N, [&](comm::local& comm) {
        const int r = comm.rank();
        trickle_test::diloco_rig<exec::host, T> rig(exec::host{}, n, slots);
        std::vector<float> p(n);
        for (std::size_t i = 0; i < n; ++i) p[i] = std::sin(0.37f * static_cast<float>(i) + 1.3f * static_cast<float>(r));
        rig.set_params(p);
        rig.copy_snapshot();
        std::vector<float> state(static_cast<std::size_t>(slots) * n, 0.0f), residual(n, 0.0f);
        if (slots > 0) copy_elements<host_space, host_space>(rig.state.data(), state.data(), state.size());
        codec::block_reduce_scratch<host_space> s;
        s.reserve(c, n, N, exec::host{});
        float* res = beta > 0.0f ? residual.data() : nullptr;
        for (std::uint64_t round = 0; round < 3; ++round) {
            // The inner steps: every worker moves its parameters its own way.
            std::vector<float> q = rig.params();
            for (std::size_t i = 0; i < n; ++i) q[i] += 0.01f * std::cos(static_cast<float>(i * (round + 2) + r));
            rig.set_params(q);
            const float w = 1.0f + 0.5f * static_cast<float>(r);
            const auto rule = outer.prepare(round + 1);
            using rule_type = std::remove_cvref_t<decltype(rule)>;
            const codec::rounding how{false, 5, round};
            float* wire = rig.wire.data();
            if (fused) {
                float* weight_sum = rig.weight_sum.data();
                for_each_index(exec::host{}, 1, store_scalar_body{weight_sum, w});
                comm.all_reduce_sum(weight_sum, 1);
                const outer_update_body<T, rule_type> update{rig.view(), rig.snapshot.data(), rig.state.data(), {}, rule,
                                                             1.0f, weight_sum, 0};
                codec::encoded_all_reduce_blocks_fused(c, comm, exec::host{}, n, s,
                                                       outer_delta_source<T>{rig.view(), rig.snapshot.data(), w},
                                                       outer_update_sink<T, rule_type>{update}, res, beta, how);
            } else {
                rig.launch(n, outer_delta_body<T>{rig.view(), rig.snapshot.data(), dense_wire<float>{wire}, w, wire + n, 0});
                codec::encoded_all_reduce_blocks(c, comm, exec::host{}, wire, n, s, res, beta, how);
                comm.all_reduce_sum(wire + n, 1);
                rig.launch(n, outer_update_body<T, rule_type>{rig.view(), rig.snapshot.data(), rig.state.data(),
                                                              dense_wire<float>{wire}, rule, 1.0f, wire + n, 0});
            }
        }
        worker_result& o = out[static_cast<std::size_t>(r)];
        o.params = rig.params();
        o.snapshot.assign(rig.snapshot.data(), rig.snapshot.data() + n);
        o.state.assign(rig.state.data(), rig.state.data() + rig.state.size());
        o.residual = residual;
    });
    return out;
}

template <class T, class Codec, class Outer>
void check_fused(const Codec& c, const Outer& outer) {
    for (int N : {1, 2, 3})
        for (std::size_t n : {std::size_t{1}, std::size_t{7}, std::size_t{200}, std::size_t{1001}})
            for (float beta : {0.0f, 0.5f}) {
                const auto a = outer_rounds<T>(c, outer, N, n, beta, false);
                const auto b = outer_rounds<T>(c, outer, N, n, beta, true);
                for (int r = 0; r < N; ++r) {
                    INFO(Codec::name, ": N = ", N, ", n = ", n, ", beta = ", beta, ", rank ", r);
                    const auto R = static_cast<std::size_t>(r);
                    CHECK(trickle_test::all_same_bits(b[R].params, a[R].params));
                    CHECK(trickle_test::all_same_bits(b[R].snapshot, a[R].snapshot));
                    CHECK(trickle_test::all_same_bits(b[R].state, a[R].state));
                    CHECK(trickle_test::all_same_bits(b[R].residual, a[R].residual));
                }
            }
}

} // namespace

TEST_CASE_TEMPLATE("fused outer step (the device's, run on the host): the unfused passes' bits", T, float, bfloat16) {
    check_fused<T>(codec::int8_block{}, outer::nesterov{});
    check_fused<T>(codec::sign2_block{.block_size = 32}, outer::adam{.lr = 0.1});
    check_fused<T>(codec::fp8_block{}, outer::average{});
    check_fused<T>(codec::bf16{}, outer::nesterov{});
    check_fused<T>(codec::fp8_e4m3{}, outer::momentum{});
}

TEST_CASE("fused outer step: the source and the sink are trivially copyable (launchable on a device)") {
    static_assert(value_source<outer_delta_source<bfloat16>>);
    static_assert(value_sink<outer_update_sink<float, outer::adam_rule>>);
    static_assert(value_source<array_source> && value_sink<array_sink>);
}
