// python/csrc/policies.hpp: the policy types of trickle._C that the engines are instantiated
// with, without torch's or pybind11's headers.
//
// common.hpp (the g++ translation units, which see torch) and the nvcc translation units
// of a CUDA build (cuda_engines.hpp, cuda_*.cu, which must not see torch) both include
// this file, so an engine's type is spelled the same on both sides: the nvcc side defines
// its CUDA members, the g++ side links against them.
#pragma once

#include <trickle/algorithm/diloco.hpp>
#include <trickle/algorithm/sparta.hpp>
#include <trickle/algorithm/sparta_diloco.hpp>
#include <trickle/codec/any.hpp>
#include <trickle/codec/any_sparsifier.hpp>
#include <trickle/core/config_record.hpp>
#include <trickle/core/type_list.hpp>
#include <trickle/outer.hpp>
#include <trickle/outer/any.hpp>
#include <trickle/sampler.hpp>
#include <trickle/schedule/any.hpp>
#include <trickle/topology/any.hpp>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>
#include <variant>

namespace trickle_py {

// The engines' policies: the schedule, the topology, the outer optimizer (outer::any: any
// registered one, with or without an outer_lr_schedule) and SPARTA's codec are the variant
// policies; only the sampler and DiLoCo's wire (codec::any, or codec::any_sparsifier for
// outer_sparsifier=) are template arguments. The sparsifier's engine finds
// sparse_all_reduce and sparse_all_reduce_parts for any_sparsifier by argument-dependent
// lookup (trickle/codec/any_sparsifier.hpp).
using outer_type = trickle::outer::any;

template <class Sampler>
using sparta_algo = trickle::sparta<Sampler, trickle::schedule::any, trickle::topology::any, trickle::codec::any>;

template <class Sampler, class Outer, class Wire>
using sparta_diloco_algo = trickle::sparta_diloco<Sampler, trickle::schedule::any, trickle::topology::any, Outer,
                                                  trickle::codec::any, Wire>;

} // namespace trickle_py
