// trickle/algorithm/flat_params.hpp: the segment and offset tables of a group, held in its memory space.
#pragma once

#include <trickle/config.hpp>
#include <trickle/core/param_group.hpp>
#include <trickle/exec/buffer.hpp>
#include <trickle/exec/cuda.hpp>
#include <trickle/kernels/flat_view.hpp>

#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <vector>

TRICKLE_NAMESPACE_BEGIN

// Builds, once, the tables kernels use to address a param_group as one flat array, and
// keeps them in the group's memory space (copied to the device for cuda_space).
template <class T, class Space>
class flat_params {
public:
    flat_params() = default;

    explicit flat_params(const param_group<T, Space>& group) : flat_params(group, nullptr) {}

    // cuda_space: the tables are allocated and copied stream-ordered on ex's stream.
    flat_params(const param_group<T, Space>& group, const exec::cuda& ex) : flat_params(group, &ex) {}

    flat_view<T> view() const {
        return flat_view<T>{segments_.data(), static_cast<std::uint32_t>(segments_.size()), total_};
    }

private:
    flat_params(const param_group<T, Space>& group, const exec::cuda* ex) : total_(group.total_size()) {
        std::vector<segment<T>>& segs = host_segments_;
        for (const auto& e : group.entries())
            if (e.view.size() != 0) segs.push_back(segment<T>{e.view.data(), e.offset, e.view.size()});
        host_offsets_.reserve(segs.size() + 1);
        for (const auto& s : segs) host_offsets_.push_back(s.offset);
        host_offsets_.push_back(total_);
        if constexpr (std::is_same_v<Space, cuda_space>) {
            if (ex != nullptr) {
                segments_ = buffer<segment<T>, Space>(segs.size(), *ex);
                offsets_ = buffer<std::size_t, Space>(host_offsets_.size(), *ex);
                copy_elements<Space, host_space>(segments_.data(), segs.data(), segs.size(), *ex);
                copy_elements<Space, host_space>(offsets_.data(), host_offsets_.data(), host_offsets_.size(), *ex);
                return;
            }
        }
        segments_ = buffer<segment<T>, Space>(segs.size());
        offsets_ = buffer<std::size_t, Space>(host_offsets_.size());
        copy_elements<Space, host_space>(segments_.data(), segs.data(), segs.size());
        copy_elements<Space, host_space>(offsets_.data(), host_offsets_.data(), host_offsets_.size());
    }

public:
    // The same segments in host memory, for host-side planning (their data pointers are in
    // the group's space: never dereference them on the host for cuda_space).
    flat_view<T> host_view() const {
        return flat_view<T>{host_segments_.data(), static_cast<std::uint32_t>(host_segments_.size()), total_};
    }

    // The layout in the kernels' memory space.
    layout_view layout() const {
        return layout_view{offsets_.data(), static_cast<std::uint32_t>(segments_.size()), total_};
    }

    // The same layout in host memory, for host-side planning.
    layout_view host_layout() const {
        return layout_view{host_offsets_.data(), static_cast<std::uint32_t>(segments_.size()), total_};
    }

    std::size_t total() const { return total_; }

private:
    std::size_t total_ = 0;
    std::vector<std::size_t> host_offsets_;
    std::vector<segment<T>> host_segments_;
    buffer<segment<T>, Space> segments_;
    buffer<std::size_t, Space> offsets_;
};

TRICKLE_NAMESPACE_END
