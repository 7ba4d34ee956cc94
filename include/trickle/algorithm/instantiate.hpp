// trickle/algorithm/instantiate.hpp: CUDA steps for translation units that g++ compiles.
//
// An algorithm's CUDA work (the kernels of a SPARTA exchange or a DiLoCo outer step) is in
// member functions that only nvcc compiles. A trainer compiled by g++ (a libtorch
// program, say) can still construct and step sparta / diloco / sparta_diloco over
// cuda_space parameters: it links against the members that one .cu file of its own
// instantiates explicitly, the way CUB and Thrust users instantiate their algorithms:
//
//   // trickle_instances.cu (nvcc, linked with trickle::cuda)
//   #include <trickle/trickle.hpp>
//   #include <trickle/comm/nccl.hpp>
//   TRICKLE_INSTANTIATE_SPARTA(trickle::sampler::block, trickle::schedule::constant,
//                              trickle::topology::all_reduce, float, trickle::comm::nccl)
//
//   // trainer.cpp (g++, linked with trickle::cuda / trickle::nccl and trickle_instances.cu)
//   trickle::sparta<trickle::sampler::block> s(params, comm, {.fraction = 0.005});
//   s.step(trickle::exec::cuda{stream});
//
// The arguments name the engine exactly as the trainer's objects build it: sparta<S, Sch,
// Top> over param_group<T, cuda_space> and communicator Comm is sparta_engine<S, Sch, Top,
// T, cuda_space, Comm>. A combination that was not instantiated fails to link, naming
// the missing member (exchange_cuda, start_cuda, outer_step_cuda). Arguments must not
// contain top-level commas (use an alias for such a type).
//
// A codec is an optional last argument, as it is the last template parameter of the
// objects (codec::fp32 when it is left out, as there):
//
//   // trainer: trickle::sparta<block, constant, all_reduce, trickle::codec::int8_block>
//   TRICKLE_INSTANTIATE_SPARTA(block, constant, all_reduce, float, comm::nccl, trickle::codec::int8_block)
//   // trainer: trickle::diloco<nesterov, all_reduce, trickle::codec::bf16>
//   TRICKLE_INSTANTIATE_DILOCO(nesterov, all_reduce, float, comm::nccl, trickle::codec::bf16)
//   // trainer: trickle::sparta_diloco<uniform, constant, all_reduce, nesterov, bf16, int8_block>
//   TRICKLE_INSTANTIATE_SPARTA_DILOCO(uniform, constant, all_reduce, nesterov, float, comm::nccl,
//                                     trickle::codec::bf16, trickle::codec::int8_block)
//
// sparta_diloco takes up to two: the SPARTA part's codec, then the DiLoCo part's (each
// codec::fp32 when left out).
#pragma once

#include <trickle/algorithm/diloco.hpp>
#include <trickle/algorithm/sparta.hpp>
#include <trickle/algorithm/sparta_diloco.hpp>
#include <trickle/codec/element.hpp>
#include <trickle/config.hpp>
#include <trickle/core/memory_space.hpp>

#include <cstddef>

TRICKLE_NAMESPACE_BEGIN

namespace detail {

// How many codecs a TRICKLE_INSTANTIATE_* line names (its arguments after Comm).
template <class... Codecs>
inline constexpr std::size_t instantiated_codecs = sizeof...(Codecs);

} // namespace detail

TRICKLE_NAMESPACE_END

// The first and the second of up to two codecs, codec::fp32 for each one left out.
#define TRICKLE_DETAIL_CODEC_1(...)                                                                                    \
    TRICKLE_DETAIL_CODEC_1_(__VA_ARGS__ __VA_OPT__(, )::trickle::codec::fp32, ::trickle::codec::fp32)
#define TRICKLE_DETAIL_CODEC_1_(first, ...) first
#define TRICKLE_DETAIL_CODEC_2(...)                                                                                    \
    TRICKLE_DETAIL_CODEC_2_(__VA_ARGS__ __VA_OPT__(, )::trickle::codec::fp32, ::trickle::codec::fp32)
#define TRICKLE_DETAIL_CODEC_2_(first, second, ...) second

// sparta<Sampler, Schedule, Topology[, Codec]> over cuda_space parameters of type T and Comm.
#define TRICKLE_INSTANTIATE_SPARTA(Sampler, Schedule, Topology, T, Comm, ...)                                        \
    static_assert(::trickle::detail::instantiated_codecs<__VA_ARGS__> <= 1,                                          \
                  "TRICKLE_INSTANTIATE_SPARTA takes one codec at most (after Comm)");                                 \
    template class ::trickle::sparta_engine<Sampler, Schedule, Topology, T, ::trickle::cuda_space, Comm,            \
                                            TRICKLE_DETAIL_CODEC_1(__VA_ARGS__)>;

// diloco<Outer, Topology[, Codec]> over cuda_space parameters of type T and Comm.
#define TRICKLE_INSTANTIATE_DILOCO(Outer, Topology, T, Comm, ...)                                                     \
    static_assert(::trickle::detail::instantiated_codecs<__VA_ARGS__> <= 1,                                          \
                  "TRICKLE_INSTANTIATE_DILOCO takes one codec at most (after Comm)");                                 \
    template class ::trickle::diloco_engine<Outer, Topology, T, ::trickle::cuda_space, Comm,                         \
                                            TRICKLE_DETAIL_CODEC_1(__VA_ARGS__)>;

// sparta_diloco<Sampler, Schedule, Topology, Outer[, Codec[, OuterCodec]]>: both engines it
// is made of, the SPARTA one with Codec, the DiLoCo one with OuterCodec.
#define TRICKLE_INSTANTIATE_SPARTA_DILOCO(Sampler, Schedule, Topology, Outer, T, Comm, ...)                           \
    static_assert(::trickle::detail::instantiated_codecs<__VA_ARGS__> <= 2,                                          \
                  "TRICKLE_INSTANTIATE_SPARTA_DILOCO takes two codecs at most (after Comm): SPARTA's, then DiLoCo's"); \
    TRICKLE_INSTANTIATE_SPARTA(Sampler, Schedule, Topology, T, Comm, TRICKLE_DETAIL_CODEC_1(__VA_ARGS__))            \
    TRICKLE_INSTANTIATE_DILOCO(Outer, Topology, T, Comm, TRICKLE_DETAIL_CODEC_2(__VA_ARGS__))
