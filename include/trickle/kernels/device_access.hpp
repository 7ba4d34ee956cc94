// trickle/kernels/device_access.hpp: 16-byte vector loads and stores of parameters and fp32 arrays on the device.
//
// The CUDA agents move every contiguous piece as a scalar head (until the parameter
// pointer is 16-byte aligned), whole 16-byte vectors (4 fp32 or 8 fp16/bf16 parameters,
// paired with 1 or 2 float4 of fp32 values), and a scalar tail. Conversions are those of
// core/dtype.hpp (round to nearest even on the way back), so a vector moves exactly the
// bits the scalar bodies move. Device code only: declares nothing outside nvcc.
#pragma once

#include <trickle/config.hpp>
#include <trickle/core/dtype.hpp>
#include <trickle/kernels/plan.hpp>

#include <cstddef>
#include <cstdint>
#include <type_traits>

#if TRICKLE_CUDA_COMPILER

TRICKLE_NAMESPACE_BEGIN

namespace detail::device {

// Parameters per 16-byte vector.
template <class T>
inline constexpr int per_vector = static_cast<int>(16 / sizeof(T));

// One parameter, through the read-only (non-coherent) cache: for arrays the kernel never
// writes.
template <class T>
__device__ __forceinline__ float load_nc(const T* p) {
    if constexpr (std::is_same_v<T, float>)
        return __ldg(p);
    else
        return to_float(T::from_bits(__ldg(reinterpret_cast<const unsigned short*>(p))));
}

// The 16-byte word w as per_vector<T> parameters, in fp32.
template <class T>
__device__ __forceinline__ void unpack(const uint4& w, float (&out)[per_vector<T>]) {
    const unsigned words[4] = {w.x, w.y, w.z, w.w};
    if constexpr (std::is_same_v<T, float>) {
        for (int j = 0; j < 4; ++j) out[j] = __uint_as_float(words[j]);
    } else {
        for (int j = 0; j < 4; ++j) {
            out[2 * j] = to_float(T::from_bits(static_cast<std::uint16_t>(words[j] & 0xffffu)));
            out[2 * j + 1] = to_float(T::from_bits(static_cast<std::uint16_t>(words[j] >> 16)));
        }
    }
}

// per_vector<T> fp32 values, each rounded to T, as one 16-byte word.
template <class T>
__device__ __forceinline__ uint4 pack(const float (&in)[per_vector<T>]) {
    unsigned words[4];
    if constexpr (std::is_same_v<T, float>) {
        for (int j = 0; j < 4; ++j) words[j] = __float_as_uint(in[j]);
    } else {
        for (int j = 0; j < 4; ++j)
            words[j] = static_cast<unsigned>(from_float<T>(in[2 * j]).bits) |
                       (static_cast<unsigned>(from_float<T>(in[2 * j + 1]).bits) << 16);
    }
    return make_uint4(words[0], words[1], words[2], words[3]);
}

// One 16-byte store to global memory: st.global.v4.u32, STG.E.128 in SASS. Written in PTX
// because in the tile and stream kernels nvcc split the plain C++ vector stores of
// store_params / store_floats into 4- and 8-byte ones (it loses their alignment on the way:
// no STG.E.128 at all in the fp32 gather, scatter and DiLoCo passes), which
// scripts/check_sass.py catches. Same semantics as the C++ store (a weak store, default
// caching); the "memory" clobber keeps it ordered with the loads and stores around it.
__device__ __forceinline__ void store16_global(void* p, const uint4& w) {
    asm volatile("st.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(w.x), "r"(w.y), "r"(w.z), "r"(w.w)
                 : "memory");
}

// Vector access to 16-byte-aligned parameters: loads through the read-only cache
// (ld.global.nc.v4; no agent reads parameters it also writes) and stores (st.global.v4).
template <class T>
__device__ __forceinline__ void load_params_nc(const T* p, float (&out)[per_vector<T>]) {
    unpack<T>(__ldg(reinterpret_cast<const uint4*>(p)), out);
}
template <class T>
__device__ __forceinline__ void store_params(T* p, const float (&in)[per_vector<T>]) {
    store16_global(p, pack<T>(in));
}

// N (a multiple of 4) fp32 values at a 16-byte-aligned address.
template <int N>
__device__ __forceinline__ void load_floats_nc(const float* p, float (&out)[N]) {
    for (int q = 0; q < N / 4; ++q) {
        const float4 v = __ldg(reinterpret_cast<const float4*>(p) + q);
        out[4 * q] = v.x, out[4 * q + 1] = v.y, out[4 * q + 2] = v.z, out[4 * q + 3] = v.w;
    }
}
template <int N>
__device__ __forceinline__ void load_floats(const float* p, float (&out)[N]) {
    for (int q = 0; q < N / 4; ++q) {
        const float4 v = reinterpret_cast<const float4*>(p)[q];
        out[4 * q] = v.x, out[4 * q + 1] = v.y, out[4 * q + 2] = v.z, out[4 * q + 3] = v.w;
    }
}
template <int N>
__device__ __forceinline__ void store_floats(float* p, const float (&in)[N]) {
    for (int q = 0; q < N / 4; ++q)
        store16_global(p + 4 * q, make_uint4(__float_as_uint(in[4 * q]), __float_as_uint(in[4 * q + 1]),
                                             __float_as_uint(in[4 * q + 2]), __float_as_uint(in[4 * q + 3])));
}

// Walks m contiguous parameters at p with `lanes` cooperating threads (this one is `lane`):
// scalar(j) for the head and tail elements, vector(j) for each 16-byte vector starting at
// element j. When the arrays paired with the piece are not 16-byte aligned where the
// parameters' vectors start (paired(head) false), every element goes through scalar(j).
template <class T, class Paired, class Scalar, class Vector>
__device__ __forceinline__ void walk_piece(const T* p, std::size_t m, unsigned lane, unsigned lanes, const Paired& paired,
                                           const Scalar& scalar, const Vector& vector) {
    const vector_split s = split_for_vectors(p, m);
    if (!paired(s.head)) {
        for (std::size_t j = lane; j < m; j += lanes) scalar(j);
        return;
    }
    for (std::size_t j = lane; j < s.head; j += lanes) scalar(j);
    constexpr std::size_t per = per_vector<T>;
    for (std::size_t v = lane; v < s.vectors; v += lanes) vector(s.head + v * per);
    for (std::size_t j = s.head + s.vectors * per + lane; j < m; j += lanes) scalar(j);
}

// w[j] = float(p[j]) for j < m: a piece of a gather (or a snapshot copy).
template <class T>
__device__ __forceinline__ void gather_piece(const T* __restrict__ p, float* __restrict__ w, std::size_t m,
                                             unsigned lane, unsigned lanes) {
    walk_piece(
        p, m, lane, lanes, [&](std::size_t h) { return aligned16(w + h); },
        [&](std::size_t j) { w[j] = load_nc(p + j); },
        [&](std::size_t j) {
            float v[per_vector<T>];
            load_params_nc(p + j, v);
            store_floats(w + j, v);
        });
}

// p[j] = T(w[j] * scale) (T(w[j]) when !Scaled) for j < m: a piece of a scatter (or a
// restore from the snapshot).
template <class T, bool Scaled>
__device__ __forceinline__ void scatter_piece(T* __restrict__ p, const float* __restrict__ w, float scale,
                                              std::size_t m, unsigned lane, unsigned lanes) {
    walk_piece(
        p, m, lane, lanes, [&](std::size_t h) { return aligned16(w + h); },
        [&](std::size_t j) { p[j] = from_float<T>(Scaled ? __ldg(w + j) * scale : __ldg(w + j)); },
        [&](std::size_t j) {
            float v[per_vector<T>];
            load_floats_nc(w + j, v);
            if constexpr (Scaled)
                for (int q = 0; q < per_vector<T>; ++q) v[q] = v[q] * scale;
            store_params(p + j, v);
        });
}

} // namespace detail::device

TRICKLE_NAMESPACE_END

#endif // TRICKLE_CUDA_COMPILER
