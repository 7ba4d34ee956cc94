// trickle/outer/registry.hpp: the outer optimizers a run-time choice can name: trickle-sim's --outer, Python's outer=.
//
// One list, in the order the front ends list the names; every front end finds an
// optimizer by the name it declares (its `name`) and compiles one algorithm per entry.
// Adding an outer optimizer is its header and one line here (docs/extending.md).
#pragma once

#include <trickle/config.hpp>
#include <trickle/core/type_list.hpp>
#include <trickle/outer/adam.hpp>
#include <trickle/outer/average.hpp>
#include <trickle/outer/momentum.hpp>
#include <trickle/outer/outer_optimizer.hpp>
#include <trickle/outer/sgd.hpp>

TRICKLE_NAMESPACE_BEGIN

namespace outer {

using registry = type_list<sgd, momentum, nesterov, adam, average>;

static_assert(names_unique<registry>(), "outer::registry: two outer optimizers share a name");
static_assert([]<class... O>(type_list<O...>*) { return (outer_optimizer<O> && ...); }(static_cast<registry*>(nullptr)),
              "outer::registry: every entry must satisfy outer_optimizer");

} // namespace outer

TRICKLE_NAMESPACE_END
