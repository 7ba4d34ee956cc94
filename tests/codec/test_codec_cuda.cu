// CUDA: the device encodes every codec to the host's bytes and decodes them to the host's
// values, bit for bit (round to nearest and stochastic rounding); fp32 -> fp8 agrees with
// CUDA's device conversion (the cvt.rn.satfinite instruction on sm_89 and later) on all 2^32
// fp32 patterns, and fp8 -> fp32 with float(__nv_fp8_e4m3 / __nv_fp8_e5m2) on every code.
#include <trickle/codec/codecs.hpp>
#include <trickle/error.hpp>

#include <doctest/doctest.h>

#include <cuda_fp8.h>
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

namespace codec = trickle::codec;

namespace {

template <class T>
struct device_array {
    T* p = nullptr;
    explicit device_array(std::size_t n) { TRICKLE_CUDA_CHECK(cudaMalloc(&p, n * sizeof(T) + 1)); }
    ~device_array() { cudaFree(p); }
    device_array(const device_array&) = delete;
    device_array& operator=(const device_array&) = delete;
};

// One thread per block of the codec: encode (stochastically when `stochastic`), and decode
// the host's bytes.
template <class C>
__global__ void encode_kernel(C c, const float* in, std::size_t n, std::byte* out, bool stochastic) {
    const std::size_t B = c.block_values();
    const std::size_t b = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
    if (b * B >= n) return;
    const std::size_t m = n - b * B < B ? n - b * B : B;
    if constexpr (requires { c.encode_block(in, m, out, codec::philox_words{}, b); }) {
        if (stochastic) {
            c.encode_block(in + b * B, m, out + c.block_offset(b), codec::philox_words{.seed = 5, .stream = 9}, b * B);
            return;
        }
    }
    c.encode_block(in + b * B, m, out + c.block_offset(b));
}

template <class C>
__global__ void decode_kernel(C c, const std::byte* in, std::size_t n, float* out) {
    const std::size_t B = c.block_values();
    const std::size_t b = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
    if (b * B >= n) return;
    const std::size_t m = n - b * B < B ? n - b * B : B;
    c.decode_block(in + c.block_offset(b), m, out + b * B);
}

std::vector<float> test_values(std::size_t n) {
    std::mt19937 rng(17);
    std::normal_distribution<float> normal;
    std::vector<float> x(n);
    for (std::size_t i = 0; i < n; ++i) {
        const int e = static_cast<int>(i / 256 % 40) * 7 - 140; // blocks from subnormal to huge
        x[i] = std::ldexp(normal(rng), e);
    }
    x[5] = std::numeric_limits<float>::quiet_NaN();
    x[77] = std::numeric_limits<float>::infinity();
    x[300] = -std::numeric_limits<float>::infinity();
    for (std::size_t i = 1024; i < 1024 + 200; ++i) x[i] = 0.0f; // an all-zero stretch
    return x;
}

template <class C>
void check_codec(C c, bool stochastic) {
    const std::size_t n = 10007; // a partial last block for every block size
    const std::vector<float> x = test_values(n);
    const std::size_t bytes = c.wire_bytes(n);
    std::vector<std::byte> host(bytes);
    if constexpr (requires { c.encode(x.data(), n, host.data(), codec::philox_words{}); }) {
        if (stochastic)
            c.encode(x.data(), n, host.data(), codec::philox_words{.seed = 5, .stream = 9});
        else
            c.encode(x.data(), n, host.data());
    } else {
        c.encode(x.data(), n, host.data());
    }
    std::vector<float> host_back(n);
    c.decode(host.data(), n, host_back.data());

    device_array<float> din(n), dback(n);
    device_array<std::byte> dwire(bytes);
    TRICKLE_CUDA_CHECK(cudaMemcpy(din.p, x.data(), n * 4, cudaMemcpyHostToDevice));
    const std::size_t blocks = (n + c.block_values() - 1) / c.block_values();
    const unsigned grid = static_cast<unsigned>((blocks + 127) / 128);
    encode_kernel<<<grid, 128>>>(c, din.p, n, dwire.p, stochastic);
    TRICKLE_CUDA_CHECK(cudaGetLastError());
    std::vector<std::byte> device(bytes);
    TRICKLE_CUDA_CHECK(cudaMemcpy(device.data(), dwire.p, bytes, cudaMemcpyDeviceToHost));
    CHECK(std::memcmp(device.data(), host.data(), bytes) == 0);

    TRICKLE_CUDA_CHECK(cudaMemcpy(dwire.p, host.data(), bytes, cudaMemcpyHostToDevice));
    decode_kernel<<<grid, 128>>>(c, dwire.p, n, dback.p);
    TRICKLE_CUDA_CHECK(cudaGetLastError());
    std::vector<float> device_back(n);
    TRICKLE_CUDA_CHECK(cudaMemcpy(device_back.data(), dback.p, n * 4, cudaMemcpyDeviceToHost));
    CHECK(std::memcmp(device_back.data(), host_back.data(), n * 4) == 0);
}

__global__ void fp8_exhaustive_kernel(std::uint64_t first, std::uint64_t count, unsigned long long* bad,
                                      std::uint32_t* example) {
    for (std::uint64_t i = blockIdx.x * static_cast<std::uint64_t>(blockDim.x) + threadIdx.x; i < count;
         i += static_cast<std::uint64_t>(gridDim.x) * blockDim.x) {
        const std::uint32_t u = static_cast<std::uint32_t>(first + i);
        const float x = __uint_as_float(u);
        const bool ok = codec::encode_e4m3(x) == __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3) &&
                        codec::encode_e5m2(x) == __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E5M2);
        if (!ok && atomicAdd(bad, 1ull) == 0) *example = u;
    }
}

__global__ void fp8_decode_kernel(std::uint32_t* out) {
    const int c = threadIdx.x;
    __nv_fp8_e4m3 a;
    a.__x = static_cast<__nv_fp8_storage_t>(c);
    __nv_fp8_e5m2 b;
    b.__x = static_cast<__nv_fp8_storage_t>(c);
    out[4 * c + 0] = __float_as_uint(codec::decode_e4m3(static_cast<std::uint8_t>(c)));
    out[4 * c + 1] = __float_as_uint(static_cast<float>(a));
    out[4 * c + 2] = __float_as_uint(codec::decode_e5m2(static_cast<std::uint8_t>(c)));
    out[4 * c + 3] = __float_as_uint(static_cast<float>(b));
}

} // namespace

TEST_CASE("codecs on the device: the host's bytes and values, bit for bit") {
    for (bool stochastic : {false, true}) {
        check_codec(codec::int8_block{}, stochastic);
        check_codec(codec::int8_block{.block_size = 100, .symmetric = false}, stochastic);
        check_codec(codec::int4_block{}, stochastic);
        check_codec(codec::int4_block{.block_size = 33, .symmetric = false}, stochastic);
        check_codec(codec::sign2_block{}, stochastic);
        check_codec(codec::sign2_block{.block_size = 7}, stochastic);
    }
    check_codec(codec::fp32{}, false);
    check_codec(codec::bf16{}, false);
    check_codec(codec::fp16{}, false);
    check_codec(codec::fp8_e4m3{}, false);
    check_codec(codec::fp8_e5m2{}, false);
}

TEST_CASE("fp8 on the device: all 2^32 fp32 patterns agree with __nv_cvt_float_to_fp8; every code decodes as CUDA's") {
    device_array<unsigned long long> bad(1);
    device_array<std::uint32_t> example(1);
    TRICKLE_CUDA_CHECK(cudaMemset(bad.p, 0, sizeof(unsigned long long)));
    const std::uint64_t total = std::uint64_t{1} << 32;
    fp8_exhaustive_kernel<<<4096, 256>>>(0, total, bad.p, example.p);
    TRICKLE_CUDA_CHECK(cudaGetLastError());
    unsigned long long nbad = 0;
    std::uint32_t ex = 0;
    TRICKLE_CUDA_CHECK(cudaMemcpy(&nbad, bad.p, sizeof nbad, cudaMemcpyDeviceToHost));
    TRICKLE_CUDA_CHECK(cudaMemcpy(&ex, example.p, sizeof ex, cudaMemcpyDeviceToHost));
    INFO("first mismatch: fp32 0x" << std::hex << ex);
    CHECK(nbad == 0);

    device_array<std::uint32_t> out(1024);
    fp8_decode_kernel<<<1, 256>>>(out.p);
    TRICKLE_CUDA_CHECK(cudaGetLastError());
    std::vector<std::uint32_t> h(1024);
    TRICKLE_CUDA_CHECK(cudaMemcpy(h.data(), out.p, h.size() * 4, cudaMemcpyDeviceToHost));
    for (int c = 0; c < 256; ++c) {
        INFO("code 0x" << std::hex << c);
        CHECK(h[4 * c + 0] == h[4 * c + 1]);
        CHECK(h[4 * c + 2] == h[4 * c + 3]);
        CHECK(h[4 * c + 0] == trickle::detail::float_bits(codec::decode_e4m3(static_cast<std::uint8_t>(c))));
        CHECK(h[4 * c + 2] == trickle::detail::float_bits(codec::decode_e5m2(static_cast<std::uint8_t>(c))));
    }
}
