// Helpers shared by trickle's tests.
#pragma once

#include <trickle/comm/local.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

namespace trickle_test {

// Rank r's value at index i for sum tests: values over many binades, with signed zeros and
// subnormals, so that the order of the additions shows in the rounded sums.
inline float mixed(int r, std::size_t i) {
    if (i % 97 == 5) return -0.0f;
    if (i % 89 == 3) return std::numeric_limits<float>::denorm_min() * static_cast<float>(r + 1);
    const double base = std::sin(0.37 * static_cast<double>(i) + 1.3 * r) * (1.0 + r) + 1e-3 * r;
    const int e = static_cast<int>((i * 7 + static_cast<std::size_t>(r) * 3) % 13) * 3 - 18;
    return static_cast<float>(std::ldexp(base, e));
}

// Bitwise equality of two arrays (distinguishes -0 from +0 and compares NaN payloads).
template <class T>
bool bitwise_equal(const std::vector<T>& a, const std::vector<T>& b) {
    return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

// Runs fn(comm) on `workers` threads over one comm::local_world and collects each
// rank's exception message ("" when the rank returned normally).
template <class Fn>
std::vector<std::string> run_collect_errors(int workers, Fn&& fn) {
    trickle::comm::local_world world(workers);
    std::vector<std::string> errors(static_cast<std::size_t>(workers));
    std::vector<std::thread> threads;
    for (int r = 0; r < workers; ++r)
        threads.emplace_back([&, r] {
            auto c = world.rank(r);
            try {
                fn(c);
            } catch (const std::exception& e) {
                errors[static_cast<std::size_t>(r)] = e.what();
            }
        });
    for (auto& t : threads) t.join();
    return errors;
}

} // namespace trickle_test
