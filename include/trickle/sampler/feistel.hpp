// trickle/sampler/feistel.hpp: the Feistel permutation, now in core/feistel.hpp (kept so that older includes build).
#pragma once

#include <trickle/core/feistel.hpp>
