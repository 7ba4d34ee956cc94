// trickle/sampler/registry.hpp: the samplers a run-time choice can name: trickle-sim's --sampler, Python's sampler=.
//
// One list, in the order the front ends list the names; every front end finds a sampler by
// the name it declares (its `name`) and compiles one algorithm per entry (a sampler is a
// template argument of SPARTA, never a variant: its selection is inlined into the
// exchange's loops). Adding a sampler is its header and one line here (docs/extending.md).
#pragma once

#include <trickle/config.hpp>
#include <trickle/core/type_list.hpp>
#include <trickle/sampler/block.hpp>
#include <trickle/sampler/layerwise.hpp>
#include <trickle/sampler/permutation.hpp>
#include <trickle/sampler/sampler.hpp>
#include <trickle/sampler/uniform.hpp>

TRICKLE_NAMESPACE_BEGIN

namespace sampler {

using registry = type_list<uniform, permutation, block, layerwise>;

static_assert(names_unique<registry>(), "sampler::registry: two samplers share a name");
static_assert([]<class... S>(type_list<S...>*) { return (sampler_policy<S> && ...); }(static_cast<registry*>(nullptr)),
              "sampler::registry: every entry must satisfy sampler_policy");

} // namespace sampler

TRICKLE_NAMESPACE_END
