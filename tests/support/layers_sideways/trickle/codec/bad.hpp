// A fixture for the check_layers_refuses_sideways test: a codec header that includes a
// sampler header, which scripts/check_layers.py must refuse.
#pragma once

#include <trickle/sampler/sampler.hpp>
