// tests/cuda/sass_probe.cu: instantiates the device agents whose machine code scripts/check_sass.py reads.
//
// Compiled (never run) into an object for every CMAKE_CUDA_ARCHITECTURES with ptxas -v:
// the block sampler's tile gather and scatter (fp32 and bf16) and the DiLoCo passes
// (delta, update with outer::nesterov's rule, snapshot copy and restore; fp32 and bf16),
// each reached through the dispatch function the engines call, so the kernels are the
// very instantiations sparta_engine::exchange_cuda and diloco_engine::outer_step_cuda
// launch. The check then requires 128-bit global loads and stores and no local memory
// in them (tests/cuda/CMakeLists.txt). It also instantiates the encoded all-reduce's
// three warp-cooperative passes for int8_block (encode, sum, decode: for_each_lane_group
// with the bodies codec/reduce.hpp launches), which must touch no local memory either;
// their accesses are 4-byte quads of a block, so no 128-bit access is required of them;
// and the same encode and decode with DiLoCo's fused outer step (the outer gradient as the
// source, nesterov's update as the sink; fp32 and bf16 parameters).
#include <trickle/codec/block.hpp>
#include <trickle/codec/lanes.hpp>
#include <trickle/core/dtype.hpp>
#include <trickle/exec/cuda.hpp>
#include <trickle/kernels/device_exchange.hpp>
#include <trickle/kernels/device_stream.hpp>
#include <trickle/kernels/diloco.hpp>
#include <trickle/kernels/codec_pass.hpp>
#include <trickle/kernels/flat_view.hpp>
#include <trickle/kernels/lane_group.hpp>
#include <trickle/outer/momentum.hpp>
#include <trickle/sampler/block.hpp>

#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace trickle_sass_probe {

using trickle::bfloat16;
namespace td = trickle::detail;

// The gather and scatter of one exchange of the block sampler, re-keyed on the device
// (exchange_cuda's calls, without the communication between them).
template <class T>
void block_exchange(const trickle::exec::cuda& ex, const trickle::flat_view<T>& params,
                    const trickle::sampler::block::selection_type& sel,
                    const td::device_exchange_state<trickle::sampler::block::selection_type>& st, float* buf) {
    td::device_move<true>(ex, params, sel, st, buf, 1.0f, td::rekey_selection<trickle::sampler::block>{0});
    td::device_move<false>(ex, params, sel, st, buf, 0.5f);
}

// The four passes of DiLoCo over a group, as diloco_engine launches them.
template <class T>
void diloco_passes(const trickle::exec::cuda& ex, const trickle::flat_view<T>& params, const std::uint32_t* tile_seg,
                   std::size_t n, float* snapshot, float* state, float* buf) {
    td::device_stream(ex, params, tile_seg, 0, n, td::snapshot_piece<T>{snapshot});
    td::device_stream(ex, params, tile_seg, 0, n, td::restore_piece<T>{snapshot});
    const trickle::outer_delta_body<T> delta{params, snapshot, trickle::dense_wire<float>{buf}, 1.0f, buf + n, 0};
    td::device_stream(ex, params, tile_seg, 0, n, td::delta_piece<T>{delta});
    const auto rule = trickle::outer::nesterov{}.prepare(1);
    using rule_type = std::remove_cvref_t<decltype(rule)>;
    const trickle::outer_update_body<T, rule_type> update{params, snapshot, state, trickle::dense_wire<float>{buf},
                                                          rule, 1.0f, buf + n, 0};
    td::device_stream(ex, params, tile_seg, 0, n, td::update_piece<T, rule_type>{update});
}

// The encoded all-reduce's passes of a block codec (codec/reduce.hpp's encoded_all_reduce_blocks).
template <class Codec>
void codec_lanes(const trickle::exec::cuda& ex, const trickle::slot_layout& at, float* buf, float* residual,
                 float* sum, std::byte* send, const std::byte* recv) {
    using lanes = trickle::codec::lane_coder<Codec>;
    const lanes lc{{Codec{}}};
    const unsigned shift = trickle::lane_group_shift(at.B);
    trickle::for_each_lane_group(ex, at.blocks, shift,
                                 trickle::encode_slots_lanes<lanes>{lc, at, {buf}, residual, 0.9f, send, {}});
    trickle::for_each_lane_group(ex, at.chunk_blocks(0), shift,
                                 trickle::sum_slots_lanes<lanes>{lc, at, 0, recv, sum, send, {}});
    trickle::for_each_lane_group(ex, at.blocks, shift, trickle::decode_slots_lanes<lanes>{lc, at, recv, {buf}});
}

// DiLoCo's fused outer step with int8_block: the encode pass producing the outer gradient
// (outer_delta_source), the decode pass applying nesterov's update (outer_update_sink).
template <class T>
void fused_outer_lanes(const trickle::exec::cuda& ex, const trickle::flat_view<T>& params, const trickle::slot_layout& at,
                       float* snapshot, float* state, float* weight_sum, float* residual, std::byte* send,
                       const std::byte* recv) {
    using codec_type = trickle::codec::int8_block;
    using lanes = trickle::codec::lane_coder<codec_type>;
    const lanes lc{{codec_type{}}};
    const unsigned shift = trickle::lane_group_shift(at.B);
    const auto rule = trickle::outer::nesterov{}.prepare(1);
    using rule_type = std::remove_cvref_t<decltype(rule)>;
    const trickle::outer_update_body<T, rule_type> update{params, snapshot, state, {}, rule, 1.0f, weight_sum, 0};
    trickle::for_each_lane_group(
        ex, at.blocks, shift,
        trickle::encode_slots_lanes<lanes, trickle::nearest_words, trickle::outer_delta_source<T>>{
            lc, at, {params, snapshot, 1.0f}, residual, 0.9f, send, {}});
    trickle::for_each_lane_group(ex, at.blocks, shift,
                                 trickle::decode_slots_lanes<lanes, trickle::outer_update_sink<T, rule_type>>{
                                     lc, at, recv, {update}});
}

// Never called: taking the addresses keeps every instantiation in the object.
using exchange_fn_f32 = decltype(&block_exchange<float>);
using exchange_fn_bf16 = decltype(&block_exchange<bfloat16>);
using passes_fn_f32 = decltype(&diloco_passes<float>);
using passes_fn_bf16 = decltype(&diloco_passes<bfloat16>);
using lanes_fn_int8 = decltype(&codec_lanes<trickle::codec::int8_block>);
using fused_fn_f32 = decltype(&fused_outer_lanes<float>);
using fused_fn_bf16 = decltype(&fused_outer_lanes<bfloat16>);

struct probes {
    exchange_fn_f32 exchange_f32;
    exchange_fn_bf16 exchange_bf16;
    passes_fn_f32 passes_f32;
    passes_fn_bf16 passes_bf16;
    lanes_fn_int8 lanes_int8;
    fused_fn_f32 fused_f32;
    fused_fn_bf16 fused_bf16;
};

} // namespace trickle_sass_probe

// An external symbol, so nothing above can be discarded as unused.
extern const trickle_sass_probe::probes trickle_sass_probes;
const trickle_sass_probe::probes trickle_sass_probes{
    &trickle_sass_probe::block_exchange<float>,
    &trickle_sass_probe::block_exchange<trickle::bfloat16>,
    &trickle_sass_probe::diloco_passes<float>,
    &trickle_sass_probe::diloco_passes<trickle::bfloat16>,
    &trickle_sass_probe::codec_lanes<trickle::codec::int8_block>,
    &trickle_sass_probe::fused_outer_lanes<float>,
    &trickle_sass_probe::fused_outer_lanes<trickle::bfloat16>,
};
