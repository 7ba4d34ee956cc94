// trickle/trickle.hpp: the whole public surface of trickle.
#pragma once

#include <trickle/core.hpp>
#include <trickle/exec.hpp>
#include <trickle/comm.hpp>
#include <trickle/algorithm/agreement.hpp>
