// benchmarks/host_copy.hpp: the host benchmarks' reference copy (B_copy) and their aligned arrays,
// shared by bench_host and bench_codec so that both report against the same measurement.
#pragma once

#include "cases.hpp"
#include "common.hpp"

#include <trickle/config.hpp>

#include <benchmark/benchmark.h>

#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <new>
#include <utility>

namespace trickle_bench {

// A streaming copy with ordinary stores, as every trickle kernel stores. The multiply by
// a value the compiler cannot see is there so it cannot turn the loop into memcpy, whose
// non-temporal stores skip the read-for-ownership the kernels pay.
__attribute__((noinline)) inline void copy_loop(float* TRICKLE_RESTRICT dst, const float* TRICKLE_RESTRICT src,
                                                std::size_t n, float one) {
    for (std::size_t i = 0; i < n; ++i) dst[i] = src[i] * one;
}

inline volatile float runtime_one = 1.0f;

// TRICKLE_BENCH_HUGE_PAGES=1 backs the parameters and the copy's arrays with transparent
// huge pages (2 MB, madvise before first touch), to show how much of the random samplers'
// cost is address translation: with 4 KB pages every random line of a 267 MB group is
// also a TLB miss and a page walk.
inline bool huge_pages() {
    const char* s = std::getenv("TRICKLE_BENCH_HUGE_PAGES");
    return s != nullptr && s[0] != '\0' && s[0] != '0';
}

// Zeroed storage for n values of T, 2 MB aligned, with huge pages when asked for.
template <class T>
class bench_array {
public:
    static constexpr std::size_t align = std::size_t{2} << 20;

    bench_array() = default;
    explicit bench_array(std::size_t n) : n_(n) {
        const std::size_t bytes = (n * sizeof(T) + align - 1) / align * align;
        p_ = static_cast<T*>(::operator new(bytes, std::align_val_t{align}));
        if (huge_pages()) madvise(p_, bytes, MADV_HUGEPAGE);
        std::memset(static_cast<void*>(p_), 0, bytes);
    }
    bench_array(bench_array&& o) noexcept : p_(std::exchange(o.p_, nullptr)), n_(o.n_) {}
    bench_array& operator=(bench_array&& o) noexcept {
        std::swap(p_, o.p_);
        std::swap(n_, o.n_);
        return *this;
    }
    ~bench_array() {
        if (p_) ::operator delete(p_, std::align_val_t{align});
    }
    T* data() const { return p_; }
    std::size_t size() const { return n_; }

private:
    T* p_ = nullptr;
    std::size_t n_ = 0;
};

inline std::size_t copy_elements() { return smoke() ? (std::size_t{1} << 16) : (std::size_t{64} << 20); }

// Best of ten copies of 256 MB into another 256 MB (16x a 32 MB L3), bytes read + written per second.
inline double measure_b_copy() {
    const std::size_t n = copy_elements();
    bench_array<float> a(n), b(n);
    for (std::size_t i = 0; i < n; ++i) a.data()[i] = static_cast<float>(i & 1023);
    double best = 0;
    const float one = runtime_one;
    for (int rep = 0; rep < (smoke() ? 2 : 11); ++rep) {
        const auto t0 = std::chrono::steady_clock::now();
        copy_loop(b.data(), a.data(), n, one);
        const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        benchmark::DoNotOptimize(b.data());
        if (rep > 0) best = std::max(best, 2.0 * static_cast<double>(n) * sizeof(float) / dt);
    }
    return best;
}

// The body of the copy benchmarks: n floats copied by memcpy or by copy_loop (B_copy's
// loop), reported against b_copy.
inline void run_copy(benchmark::State& state, bool use_memcpy, std::size_t n, double b_copy) {
    bench_array<float> a(n), b(n);
    const float one = runtime_one;
    for (auto _ : state) {
        if (use_memcpy)
            std::memcpy(b.data(), a.data(), n * sizeof(float));
        else
            copy_loop(b.data(), a.data(), n, one);
        benchmark::ClobberMemory();
    }
    const double bytes = 2.0 * static_cast<double>(n) * sizeof(float) * static_cast<double>(state.iterations());
    report(state, {bytes, bytes}, b_copy);
}

} // namespace trickle_bench
