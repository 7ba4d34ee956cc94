// trickle/core/param_group.hpp: a model's named tensors of one dtype, as one flat index space.
#pragma once

#include <trickle/config.hpp>
#include <trickle/core/dtype.hpp>
#include <trickle/core/memory_space.hpp>
#include <trickle/core/search.hpp>
#include <trickle/core/tensor_view.hpp>
#include <trickle/error.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

TRICKLE_NAMESPACE_BEGIN

// One tensor of a group: its name, its view and where it starts in the flat index space.
template <class T, class Space>
struct param_entry {
    std::string name;
    tensor_view<T, Space> view;
    std::size_t offset; // first flat index of this tensor
};

// The parameters trickle exchanges: tensors of one element type T (float, trickle::half,
// trickle::bfloat16) in one memory space, in the order they were added. Flat index i
// refers to element i - offset of the tensor whose [offset, offset + size) holds i.
// All workers must add the same tensors, with the same names and sizes, in the same order.
template <class T, class Space = host_space>
class param_group {
    static_assert(element_type<T>, "param_group: T must be float, trickle::half or trickle::bfloat16");
    static_assert(memory_space<Space>, "Space must be trickle::host_space or trickle::cuda_space");

public:
    using value_type = T;
    using memory_space = Space;
    using entry = param_entry<T, Space>;

    struct named_tensor {
        std::string name;
        T* data;
        std::size_t size;
    };

    param_group() = default;

    // Builds a group from {name, pointer, count} triples; validated as add() does.
    param_group(std::initializer_list<named_tensor> tensors) {
        for (const auto& t : tensors) add(t.name, t.data, t.size);
    }

    // Appends a tensor. Throws trickle::invalid_argument, leaving the group unchanged,
    // for an empty or duplicate name, a null pointer with a nonzero count, a pointer in
    // the wrong memory space (where the CUDA runtime can tell), or memory that overlaps a
    // tensor already in the group.
    param_group& add(std::string name, T* data, std::size_t size) {
        require(!name.empty(), "param_group::add: tensor name is empty");
        require(data != nullptr || size == 0, "param_group::add: tensor '", name,
                "' has a null pointer and ", size, " elements");
        for (const auto& e : entries_) {
            require(e.name != name, "param_group::add: duplicate tensor name '", name, "'");
            if (size != 0 && e.view.size() != 0) {
                const std::less<const T*> lt;
                const T* b = e.view.data();
                const bool overlap = lt(data, b + e.view.size()) && lt(b, data + size);
                require(!overlap, "param_group::add: tensor '", name, "' overlaps tensor '", e.name, "'");
            }
        }
        detail::check_pointer_space<Space>(data, "param_group::add: tensor '" + name + "'");
        entries_.push_back(entry{std::move(name), tensor_view<T, Space>(data, size), total_});
        total_ += size;
        return *this;
    }

    param_group& add(std::string name, tensor_view<T, Space> view) {
        return add(std::move(name), view.data(), view.size());
    }

    std::size_t tensor_count() const { return entries_.size(); }
    std::size_t total_size() const { return total_; }
    std::size_t total_bytes() const { return total_ * sizeof(T); }
    bool empty() const { return total_ == 0; }
    const std::vector<entry>& entries() const { return entries_; }
    const entry& operator[](std::size_t i) const { return entries_.at(i); }

    // The entry with this name, or nullptr.
    const entry* find(std::string_view name) const {
        for (const auto& e : entries_)
            if (e.name == name) return &e;
        return nullptr;
    }

    // Index of the tensor that holds flat index i (i < total_size()).
    std::size_t tensor_of(std::size_t i) const {
        require(i < total_, "param_group::tensor_of: index ", i, " out of range ", total_);
        // The last entry starting at or before i: an empty entry shares its offset with the
        // next one, which is the one that holds i.
        return detail::last_where(static_cast<std::uint32_t>(entries_.size()),
                                  [&](std::uint32_t s) { return entries_[s].offset <= i; });
    }

    // A 64-bit FNV-1a hash of the dtype, the names and the sizes, in order: two workers
    // with equal hashes have the same layout (pointers are not part of it).
    std::uint64_t layout_hash() const {
        std::uint64_t h = 0xcbf29ce484222325ull;
        auto mix = [&h](const void* p, std::size_t n) {
            const auto* b = static_cast<const unsigned char*>(p);
            for (std::size_t i = 0; i < n; ++i) {
                h ^= b[i];
                h *= 0x100000001b3ull;
            }
        };
        const auto id = static_cast<std::uint8_t>(dtype_traits<T>::id);
        mix(&id, 1);
        for (const auto& e : entries_) {
            mix(e.name.data(), e.name.size());
            const std::uint64_t n = e.view.size();
            mix(&n, sizeof n);
        }
        return h;
    }

private:
    std::vector<entry> entries_;
    std::size_t total_ = 0;
};

TRICKLE_NAMESPACE_END
