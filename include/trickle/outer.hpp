// trickle/outer.hpp: the outer optimizers of DiLoCo (average, sgd, momentum, nesterov, adam), their concept, their registry, lr_scheduled, and outer::any (one chosen at run time).
#pragma once

#include <trickle/outer/adam.hpp>
#include <trickle/outer/any.hpp>
#include <trickle/outer/average.hpp>
#include <trickle/outer/lr_schedule.hpp>
#include <trickle/outer/momentum.hpp>
#include <trickle/outer/outer_optimizer.hpp>
#include <trickle/outer/registry.hpp>
#include <trickle/outer/sgd.hpp>
