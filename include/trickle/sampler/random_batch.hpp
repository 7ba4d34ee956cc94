// trickle/sampler/random_batch.hpp: Philox lanes for consecutive indices, now in core/random_batch.hpp (kept so that older includes build).
#pragma once

#include <trickle/core/random_batch.hpp>
