// Helpers for sampler tests: a layout over given tensor sizes, and a selection's positions.
#pragma once

#include <trickle/sampler.hpp>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace trickle_test {

// Host-memory layout of tensors with the given (non-zero) sizes.
struct test_layout {
    std::vector<std::size_t> offsets;
    explicit test_layout(const std::vector<std::size_t>& sizes) {
        std::size_t o = 0;
        for (auto s : sizes) {
            offsets.push_back(o);
            o += s;
        }
        offsets.push_back(o);
    }
    trickle::layout_view view() const {
        return {offsets.data(), static_cast<std::uint32_t>(offsets.size() - 1), offsets.back()};
    }
    trickle::sampler_context context(std::uint64_t seed, std::uint64_t step, std::uint64_t exchange, double p) const {
        return {seed, step, exchange, p, view(), view()};
    }
};

template <class Selection>
std::vector<std::size_t> positions(const Selection& sel) {
    std::vector<std::size_t> out(sel.count());
    for (std::size_t k = 0; k < out.size(); ++k) out[k] = sel(k);
    return out;
}

// The same positions through the selection's bulk path, sel.positions(k0, m, out), in
// chunks of `chunk` values (chunk >= 1), so chunks start at unaligned k0 and end in a tail.
template <class Selection>
std::vector<std::size_t> bulk_positions(const Selection& sel, std::size_t chunk) {
    const std::size_t count = sel.count();
    std::vector<std::uint64_t> buf(chunk);
    std::vector<std::size_t> out;
    out.reserve(count);
    for (std::size_t k0 = 0; k0 < count; k0 += chunk) {
        const std::size_t m = count - k0 < chunk ? count - k0 : chunk;
        sel.positions(k0, m, buf.data());
        out.insert(out.end(), buf.begin(), buf.begin() + static_cast<std::ptrdiff_t>(m));
    }
    return out;
}

} // namespace trickle_test
