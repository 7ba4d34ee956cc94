// A fixture for the check_layers_refuses_sideways test (see ../codec/bad.hpp).
#pragma once
