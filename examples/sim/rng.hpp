// examples/sim/rng.hpp: the simulator's small seeded generator (corpus, initialisation, batches).
//
// std::*_distribution differ between standard libraries, so a corpus or an initialisation
// drawn with them would differ between machines; this one gives the same numbers
// everywhere for a given seed.
#pragma once

#include <cmath>
#include <cstdint>
#include <numbers>

namespace trickle_sim {

// SplitMix64: one 64-bit add and a mixing function per draw; plenty for sampling data.
class rng {
public:
    explicit rng(std::uint64_t seed) : state_(seed) {}

    // A generator for one purpose (stream) of one seed, independent of the others.
    static rng stream(std::uint64_t seed, std::uint64_t stream) {
        rng g(seed ^ mix(stream + 0x632be59bd9b4e019ull));
        g.next();
        return g;
    }

    std::uint64_t next() {
        state_ += 0x9e3779b97f4a7c15ull;
        return mix(state_);
    }

    // Uniform in [0, 1) with 53 random bits.
    double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

    // Uniform integer in [0, n), n >= 1 (Lemire's multiply-shift; the bias is below 2^-32
    // for the sizes used here).
    std::uint64_t below(std::uint64_t n) {
        __extension__ typedef unsigned __int128 u128;
        return static_cast<std::uint64_t>((static_cast<u128>(next()) * n) >> 64);
    }

    // Standard normal (Box-Muller; one of the pair is discarded to keep the state simple).
    double normal() {
        const double u1 = 1.0 - uniform(); // (0, 1]: log stays finite
        const double u2 = uniform();
        return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
    }

private:
    static std::uint64_t mix(std::uint64_t z) {
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        return z ^ (z >> 31);
    }

    std::uint64_t state_;
};

} // namespace trickle_sim
