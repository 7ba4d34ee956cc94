// Helpers shared by trickle's tests.
#pragma once

#include <trickle/comm/local.hpp>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace trickle_test {

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
