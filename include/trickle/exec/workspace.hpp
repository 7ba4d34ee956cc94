// trickle/exec/workspace.hpp: growable scratch arrays in one memory space, reused across steps.
#pragma once

#include <trickle/config.hpp>
#include <trickle/exec/buffer.hpp>

#include <array>
#include <cstddef>

TRICKLE_NAMESPACE_BEGIN

// A few numbered scratch arrays of T. get(slot, n) returns at least n elements,
// reallocating (and so losing the contents) only when the slot is too small; capacity
// grows by at least half each time so a slowly rising fraction reallocates rarely.
template <class T, class Space, std::size_t Slots = 4>
class workspace {
public:
    T* get(std::size_t slot, std::size_t n) {
        buffer<T, Space>& b = slots_.at(slot);
        if (b.size() < n) {
            const std::size_t grown = b.size() + b.size() / 2;
            b = buffer<T, Space>(n > grown ? n : grown);
        }
        return b.data();
    }
    std::size_t capacity(std::size_t slot) const { return slots_.at(slot).size(); }

private:
    std::array<buffer<T, Space>, Slots> slots_;
};

TRICKLE_NAMESPACE_END
