// trickle/aggregate.hpp: how DiLoCo's outer step combines the workers' outer gradients (mean, trimmed mean, median, centered clipping).
#pragma once

#include <trickle/aggregate/aggregate.hpp>
