// trickle/schedule.hpp: every fraction schedule.
#pragma once

#include <trickle/schedule/any.hpp>
#include <trickle/schedule/schedule.hpp>
