// trickle/schedule/registry.hpp: the schedules a run-time choice can name: schedule::any's alternatives, trickle-sim's --fraction-schedule, Python's schedule=.
//
// `registry` is one list of the named schedules, in the order the front ends list them;
// every front end finds one by the name it declares (its `name`). `warmed` lists those
// that schedule::any also holds behind a warm-up ramp, as warmup<S> (Python's
// warmup_steps): piecewise is not among them, its points being a ramp of their own.
// schedule::any is a variant of the registry followed by those warm-ups, so adding a
// schedule is its header and one line here, two if a warm-up may lead into it
// (docs/extending.md). warmup is a wrapper, not a name of its own.
#pragma once

#include <trickle/config.hpp>
#include <trickle/core/type_list.hpp>
#include <trickle/schedule/schedule.hpp>

TRICKLE_NAMESPACE_BEGIN

namespace schedule {

using registry = type_list<constant, linear, cosine, piecewise>;
using warmed = type_list<constant, linear, cosine>;

static_assert(names_unique<registry>(), "schedule::registry: two schedules share a name");
static_assert([]<class... S>(type_list<S...>*) { return (schedule_policy<S> && ...); }(static_cast<registry*>(nullptr)),
              "schedule::registry: every entry must satisfy schedule_policy");
static_assert([]<class... S>(type_list<S...>*) { return (type_list_contains<registry, S> && ...); }(
                  static_cast<warmed*>(nullptr)),
              "schedule::warmed: every entry must be in schedule::registry");

} // namespace schedule

TRICKLE_NAMESPACE_END
