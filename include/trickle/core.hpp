// trickle/core.hpp: the core layer (element types, views, parameter groups, Philox, configuration records, CRC-32C, type lists).
#pragma once

#include <trickle/config.hpp>
#include <trickle/core/config_record.hpp>
#include <trickle/core/crc32c.hpp>
#include <trickle/core/dtype.hpp>
#include <trickle/core/fields.hpp>
#include <trickle/core/memory_space.hpp>
#include <trickle/core/param_group.hpp>
#include <trickle/core/philox.hpp>
#include <trickle/core/stream.hpp>
#include <trickle/core/tensor_view.hpp>
#include <trickle/core/type_list.hpp>
#include <trickle/error.hpp>
