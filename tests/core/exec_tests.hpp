// Execution-space test bodies, written once and run for every execution space (host
// suites in test_exec.cpp, CUDA suites in tests/cuda).
#pragma once

#include <trickle/exec.hpp>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace trickle_test {

// A kernel body: out[i] = i * 3 + 1, as uint32.
struct iota_body {
    std::uint32_t* out;
    TRICKLE_HOST_DEVICE void operator()(std::size_t i) const { out[i] = static_cast<std::uint32_t>(i * 3 + 1); }
};

// Runs iota_body over n elements in Exec's space and returns the result on the host.
template <class Exec>
std::vector<std::uint32_t> run_iota(const Exec& ex, std::size_t n) {
    using space = typename Exec::memory_space;
    trickle::buffer<std::uint32_t, space> buf(n);
    trickle::for_each_index(ex, n, iota_body{buf.data()});
    std::vector<std::uint32_t> host(n);
    if constexpr (!std::is_same_v<space, trickle::host_space>) {
#if TRICKLE_HAS_CUDA
        TRICKLE_CUDA_CHECK(cudaStreamSynchronize(ex.stream));
#endif
    }
    trickle::copy_elements<trickle::host_space, space>(host.data(), buf.data(), n);
    return host;
}

inline bool is_iota(const std::vector<std::uint32_t>& v) {
    for (std::size_t i = 0; i < v.size(); ++i)
        if (v[i] != static_cast<std::uint32_t>(i * 3 + 1)) return false;
    return true;
}

} // namespace trickle_test
