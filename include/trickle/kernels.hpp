// trickle/kernels.hpp: kernel bodies (functors run by for_each_index on any execution space).
//
// Each pass family keeps its parts together, as CUB splits dispatch, agent and kernel:
// kernels/stream/ (DiLoCo's passes over the whole group), kernels/exchange/ (SPARTA's gather
// and scatter) and kernels/prune/ (outer-gradient pruning), each with body.hpp (what is
// computed: the host reference), agent.hpp (the CUDA agent, where trickle has its own) and
// dispatch.hpp (the launch). Families with a body only keep one file: codec_pass.hpp (the
// encoded all-reduce's codec blocks) and reduce.hpp (rank_sum_body).
#pragma once

#include <trickle/kernels/device_access.hpp>
#include <trickle/kernels/aggregate.hpp>
#include <trickle/kernels/average.hpp>
#include <trickle/kernels/exchange/agent.hpp>
#include <trickle/kernels/exchange/body.hpp>
#include <trickle/kernels/exchange/dispatch.hpp>
#include <trickle/kernels/flat_view.hpp>
#include <trickle/kernels/outer_rule.hpp>
#include <trickle/kernels/plan.hpp>
#include <trickle/kernels/prune/body.hpp>
#include <trickle/kernels/prune/dispatch.hpp>
#include <trickle/kernels/reduce.hpp>
#include <trickle/kernels/stream/agent.hpp>
#include <trickle/kernels/stream/body.hpp>
#include <trickle/kernels/stream/dispatch.hpp>
