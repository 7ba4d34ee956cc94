// trickle/sampler.hpp: every sampler (which positions an exchange averages) and their registry.
#pragma once

#include <trickle/sampler/block.hpp>
#include <trickle/sampler/feistel.hpp>
#include <trickle/sampler/layerwise.hpp>
#include <trickle/sampler/permutation.hpp>
#include <trickle/sampler/registry.hpp>
#include <trickle/sampler/sampler.hpp>
#include <trickle/sampler/uniform.hpp>
