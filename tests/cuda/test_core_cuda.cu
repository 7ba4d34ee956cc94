// CUDA: the core layer computes on the device exactly what it computes on the host —
// for_each_index coverage, Philox draws, fp16/bf16 conversions, buffers.
#include <trickle/trickle.hpp>

#include "../core/exec_tests.hpp"

#include <doctest/doctest.h>

#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstring>
#include <vector>

using namespace trickle;

namespace {

struct philox_body {
    std::uint32_t* out;
    TRICKLE_HOST_DEVICE void operator()(std::size_t i) const {
        const u32x4 w = random_words(0x0123456789abcdefull + i, i * 7, i * 0x9e3779b97f4a7c15ull);
        for (int j = 0; j < 4; ++j) out[4 * i + j] = w[j];
    }
};

// Every 16-bit pattern through half/bf16 -> float, and a float grid through float -> half/bf16.
struct convert_body {
    std::uint32_t* out;
    TRICKLE_HOST_DEVICE void operator()(std::size_t i) const {
        const auto b = static_cast<std::uint16_t>(i);
        out[4 * i + 0] = detail::float_bits(static_cast<float>(trickle::half::from_bits(b)));
        out[4 * i + 1] = detail::float_bits(static_cast<float>(bfloat16::from_bits(b)));
        const float f = detail::bits_float(static_cast<std::uint32_t>(i) * 0x10001u + 0x33000000u);
        out[4 * i + 2] = trickle::half(f).bits;
        out[4 * i + 3] = bfloat16(f).bits;
    }
};

template <class Body>
std::vector<std::uint32_t> run_both(std::size_t n, std::size_t words, std::vector<std::uint32_t>& host) {
    host.assign(n * words, 0);
    for_each_index(exec::host{}, n, Body{host.data()});
    buffer<std::uint32_t, cuda_space> d(n * words);
    for_each_index(exec::cuda{}, n, Body{d.data()});
    TRICKLE_CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<std::uint32_t> back(n * words);
    copy_elements<host_space, cuda_space>(back.data(), d.data(), back.size());
    return back;
}

} // namespace

TEST_CASE("cuda for_each_index covers every index once") {
    cudaStream_t s;
    TRICKLE_CUDA_CHECK(cudaStreamCreate(&s));
    for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{255}, std::size_t{100003}, std::size_t{5000000}})
        CHECK(trickle_test::is_iota(trickle_test::run_iota(exec::cuda{s}, n)));
    TRICKLE_CUDA_CHECK(cudaStreamDestroy(s));
}

TEST_CASE("cuda philox draws are bit-identical to the host's") {
    std::vector<std::uint32_t> host;
    const auto dev = run_both<philox_body>(200000, 4, host);
    CHECK(dev == host);
}

TEST_CASE("cuda fp16 and bf16 conversions are bit-identical to the host's") {
    std::vector<std::uint32_t> host;
    const auto dev = run_both<convert_body>(65536, 4, host);
    CHECK(dev == host);
}

TEST_CASE("cuda buffers and pointer-space checks") {
    buffer<float, cuda_space> d(1000);
    std::vector<float> h(1000, 1.0f);
    copy_elements<host_space, cuda_space>(h.data(), d.data(), 1000);
    CHECK(h[999] == 0.0f); // zero-initialized
    param_group<float, cuda_space> g;
    CHECK_NOTHROW(g.add("device", d.data(), 1000));
    std::vector<float> host_memory(10);
    CHECK_THROWS_WITH_AS(g.add("host", host_memory.data(), 10), doctest::Contains("points to host memory"),
                         invalid_argument);
    param_group<float, host_space> hg;
    CHECK_THROWS_WITH_AS(hg.add("dev", d.data(), 1000), doctest::Contains("points to CUDA device memory"),
                         invalid_argument);
    CHECK(g.tensor_count() == 1);
    CHECK(hg.tensor_count() == 0);
}

TEST_CASE("cuda errors carry the call, the place and the code") {
    void* p = nullptr;
    try {
        TRICKLE_CUDA_CHECK(cudaMalloc(&p, static_cast<std::size_t>(1) << 62));
        FAIL("an impossible allocation succeeded");
    } catch (const cuda_error& e) {
        CHECK(e.code() == cudaErrorMemoryAllocation);
        CHECK(std::string(e.what()).find("cudaMalloc") != std::string::npos);
        CHECK(e.line() > 0);
    }
    CHECK(cudaGetLastError() == cudaSuccess); // the sticky error was cleared
}
