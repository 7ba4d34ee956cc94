// trickle/schedule.hpp: every fraction schedule and their registry.
#pragma once

#include <trickle/schedule/any.hpp>
#include <trickle/schedule/registry.hpp>
#include <trickle/schedule/schedule.hpp>
