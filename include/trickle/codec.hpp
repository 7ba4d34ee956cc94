// trickle/codec.hpp: the codec policy family: values on the wire (codec/codecs.hpp), the
// registered codecs (codec/registry.hpp), codecs chosen at run time and the parameters'
// own precision (codec/any.hpp), and the sum of encoded values over workers
// (codec/reduce.hpp), sparsifiers for DiLoCo's outer gradient (codec/sparse.hpp).
#pragma once

#include <trickle/codec/any.hpp>
#include <trickle/codec/any_sparsifier.hpp>
#include <trickle/codec/codecs.hpp>
#include <trickle/codec/link.hpp>
#include <trickle/codec/reduce.hpp>
#include <trickle/codec/registry.hpp>
#include <trickle/codec/sparse.hpp>
