// trickle/outer.hpp: the outer optimizers of DiLoCo (average, sgd, momentum, nesterov, adam), their concept, their registry, and lr_scheduled.
#pragma once

#include <trickle/outer/adam.hpp>
#include <trickle/outer/average.hpp>
#include <trickle/outer/lr_schedule.hpp>
#include <trickle/outer/momentum.hpp>
#include <trickle/outer/outer_optimizer.hpp>
#include <trickle/outer/registry.hpp>
#include <trickle/outer/sgd.hpp>
