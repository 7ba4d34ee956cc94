// trickle/algorithm.hpp: the algorithm objects (SPARTA; DiLoCo and their combination; the dense baseline ddp; any_algorithm, which holds any of them).
#pragma once

#include <trickle/algorithm/agreement.hpp>
#include <trickle/algorithm/any.hpp>
#include <trickle/algorithm/checkpoint.hpp>
#include <trickle/algorithm/cost.hpp>
#include <trickle/algorithm/ddp.hpp>
#include <trickle/algorithm/demo.hpp>
#include <trickle/algorithm/diloco.hpp>
#include <trickle/algorithm/instantiate.hpp>
#include <trickle/algorithm/sparta.hpp>
#include <trickle/algorithm/sparta_diloco.hpp>
#include <trickle/algorithm/stats.hpp>
#include <trickle/algorithm/membership.hpp>
