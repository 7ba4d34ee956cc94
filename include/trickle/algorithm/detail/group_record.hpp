// trickle/algorithm/detail/group_record.hpp: a parameter group's fields in a configuration record.
//
// Workers must agree on the parameters they average: the element type, the memory space,
// the number of tensors and elements and the layout's hash. trickle::ddp describes its
// group here (SPARTA and DiLoCo have the same fields in algorithm/sparta.hpp's
// describe_group, which this repeats so that ddp does not include SPARTA; one of the two
// can go when the engines share their stages).
#pragma once

#include <trickle/config.hpp>
#include <trickle/core/config_record.hpp>
#include <trickle/core/dtype.hpp>
#include <trickle/core/param_group.hpp>

#include <sstream>
#include <string>

TRICKLE_NAMESPACE_BEGIN

namespace detail {

// workers < 0: a membership that changes between rounds ("elastic").
template <class T, class Space>
void describe_group_layout(config_record& rec, const param_group<T, Space>& g, int workers) {
    std::ostringstream hash;
    hash << std::hex << g.layout_hash();
    if (workers < 0)
        rec.add("workers", "elastic");
    else
        rec.add("workers", workers);
    rec.add("dtype", dtype_traits<T>::name)
        .add("memory_space", Space::name)
        .add("tensors", g.tensor_count())
        .add("elements", g.total_size())
        .add("layout_hash", hash.str());
    if (g.empty()) rec.set_error("the parameter group is empty (no tensor with elements)");
}

} // namespace detail

TRICKLE_NAMESPACE_END
