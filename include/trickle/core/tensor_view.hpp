// trickle/core/tensor_view.hpp: a non-owning, trivially copyable view of one tensor's elements.
#pragma once

#include <trickle/config.hpp>
#include <trickle/core/memory_space.hpp>
#include <trickle/error.hpp>

#include <cstddef>
#include <type_traits>

TRICKLE_NAMESPACE_BEGIN

// A pointer and an element count in memory space Space (host_space or cuda_space).
// Trivially copyable, so kernel bodies hold it by value and copy it to the device.
// trickle never owns a model's memory: the view must not outlive the tensor it views.
template <class T, class Space = host_space>
class tensor_view {
    static_assert(memory_space<Space>, "Space must be trickle::host_space or trickle::cuda_space");

public:
    using element_type = T;
    using value_type = std::remove_cv_t<T>;
    using memory_space = Space;
    using size_type = std::size_t;

    tensor_view() = default;

    // Throws trickle::invalid_argument for a null pointer with a nonzero count.
    tensor_view(T* data, size_type size) : data_(data), size_(size) {
        if (data == nullptr && size != 0)
            throw invalid_argument(detail::concat("tensor_view: null pointer with ", size,
                                                  " elements"));
    }

    // A view of T converts to a view of const T in the same space; never across spaces.
    template <class U>
        requires(std::is_same_v<const U, T> && !std::is_same_v<U, T>)
    tensor_view(const tensor_view<U, Space>& other) : data_(other.data()), size_(other.size()) {}

    TRICKLE_HOST_DEVICE T* data() const { return data_; }
    TRICKLE_HOST_DEVICE size_type size() const { return size_; }
    TRICKLE_HOST_DEVICE bool empty() const { return size_ == 0; }
    TRICKLE_HOST_DEVICE size_type size_bytes() const { return size_ * sizeof(T); }
    TRICKLE_HOST_DEVICE T& operator[](size_type i) const { return data_[i]; }
    TRICKLE_HOST_DEVICE T* begin() const { return data_; }
    TRICKLE_HOST_DEVICE T* end() const { return data_ + size_; }

private:
    T* data_ = nullptr;
    size_type size_ = 0;
};

static_assert(std::is_trivially_copyable_v<tensor_view<float, host_space>>);
static_assert(std::is_trivially_copyable_v<tensor_view<const float, cuda_space>>);

template <class T>
using host_view = tensor_view<T, host_space>;
template <class T>
using cuda_view = tensor_view<T, cuda_space>;

TRICKLE_NAMESPACE_END
