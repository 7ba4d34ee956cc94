// trickle/exec/workspace.hpp: growable scratch arrays in one memory space, reused across steps.
#pragma once

#include <trickle/config.hpp>
#include <trickle/exec/buffer.hpp>
#include <trickle/exec/cuda.hpp>

#include <array>
#include <type_traits>
#include <cstddef>

TRICKLE_NAMESPACE_BEGIN

// A few numbered scratch arrays of T. get(slot, n) returns at least n elements,
// reallocating (and so losing the contents) only when the slot is too small; capacity
// grows by at least half each time so a slowly rising fraction reallocates rarely.
// Algorithms reserve() every slot they use at construction, so their steps never
// allocate. A cuda_space workspace bound to an exec::cuda allocates stream-ordered on its
// stream (exec/buffer.hpp).
template <class T, class Space, std::size_t Slots = 4>
class workspace {
public:
    void bind(const exec::cuda& ex) {
        ex_ = ex;
        bound_ = true;
    }

    void reserve(std::size_t slot, std::size_t n) {
        if (slots_.at(slot).size() < n) slots_.at(slot) = make(n);
    }

    T* get(std::size_t slot, std::size_t n) {
        buffer<T, Space>& b = slots_.at(slot);
        if (b.size() < n) {
            const std::size_t grown = b.size() + b.size() / 2;
            b = make(n > grown ? n : grown);
        }
        return b.data();
    }
    std::size_t capacity(std::size_t slot) const { return slots_.at(slot).size(); }

private:
    buffer<T, Space> make(std::size_t n) const {
        if constexpr (std::is_same_v<Space, cuda_space>)
            if (bound_) return buffer<T, Space>(n, ex_);
        return buffer<T, Space>(n);
    }

    std::array<buffer<T, Space>, Slots> slots_;
    exec::cuda ex_{};
    bool bound_ = false;
};

TRICKLE_NAMESPACE_END
