// python/csrc/policies.hpp: the policy types of trickle._C that the engines are instantiated
// with, without torch's or pybind11's headers.
//
// common.hpp (the g++ translation units, which see torch) and the nvcc translation units
// of a CUDA build (cuda_engines.hpp, cuda_*.cu, which must not see torch) both include
// this file, so an engine's type is spelled the same on both sides: the nvcc side defines
// its CUDA members, the g++ side links against them.
#pragma once

#include <trickle/algorithm/diloco.hpp>
#include <trickle/algorithm/sparta.hpp>
#include <trickle/algorithm/sparta_diloco.hpp>
#include <trickle/codec/any.hpp>
#include <trickle/codec/sparse.hpp>
#include <trickle/core/config_record.hpp>
#include <trickle/core/type_list.hpp>
#include <trickle/outer.hpp>
#include <trickle/outer/lr_schedule.hpp>
#include <trickle/sampler.hpp>
#include <trickle/schedule/any.hpp>
#include <trickle/topology/any.hpp>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>
#include <variant>

namespace trickle_py {

// The sparsifiers of DiLoCo's outer gradient (codec/sparse.hpp) that outer_sparsifier=
// names, their values through the outer codec. (The library lists no registry of them:
// a sparsifier wraps a codec; this list is the package's, by the names the C++ policies
// declare.)
using sparsifier_registry =
    trickle::type_list<trickle::codec::chunk_topk<trickle::codec::any>, trickle::codec::random_k<trickle::codec::any>>;

// DiLoCo's outer gradient through a sparsifier (codec/sparse.hpp), chosen at run time: the
// sparsifier holds its values' codec as a codec::any, or, for plain fp32 values, is
// exactly C++'s default codec::chunk_topk<> / codec::random_k<>. One engine instantiation
// covers them all: the exchange route finds sparse_all_reduce and sparse_all_reduce_parts
// for this type by argument-dependent lookup (below), and each visits the held sparsifier.
struct outer_sparsifier {
    using topk_any = trickle::codec::chunk_topk<trickle::codec::any>;
    using randk_any = trickle::codec::random_k<trickle::codec::any>;
    using variant_type =
        std::variant<trickle::codec::chunk_topk<>, trickle::codec::random_k<>, topk_any, randk_any>;
    static constexpr const char* name = "sparsifier";
    variant_type held{};

    const char* held_name() const {
        return std::visit([](const auto& s) -> const char* { return std::remove_cvref_t<decltype(s)>::name; }, held);
    }
    std::size_t payload_bytes(std::size_t n) const {
        return std::visit([&](const auto& s) -> std::size_t { return s.payload_bytes(n); }, held);
    }
    std::size_t kept(std::size_t n) const {
        return std::visit([&](const auto& s) -> std::size_t { return s.kept(n); }, held);
    }
    std::string error() const {
        return std::visit([](const auto& s) -> std::string { return s.error(); }, held);
    }
    void describe(trickle::config_record& rec) const {
        std::visit([&](const auto& s) { s.describe(rec); }, held);
    }
    void reserve_scratch(trickle::codec::sparse_scratch& scratch, std::size_t n, int ranks) const {
        std::visit([&](const auto& s) { s.reserve_scratch(scratch, n, ranks); }, held);
    }
};

template <class Comm>
int sparse_all_reduce(const outer_sparsifier& sp, Comm& comm, float* buf, std::size_t n,
                      trickle::codec::sparse_scratch& scratch, float* residual, float beta, std::uint64_t seed,
                      std::uint64_t round) {
    return std::visit(
        [&](const auto& s) {
            return trickle::codec::sparse_all_reduce(s, comm, buf, n, scratch, residual, beta, seed, round);
        },
        sp.held);
}

inline trickle::codec::wire_parts sparse_all_reduce_parts(const outer_sparsifier& sp, std::size_t n, int N, int me) {
    return std::visit([&](const auto& s) { return trickle::codec::sparse_all_reduce_parts(s, n, N, me); }, sp.held);
}

static_assert(trickle::codec::sparsifier_policy<outer_sparsifier> && !trickle::codec_policy<outer_sparsifier>);


// An outer optimizer with a learning rate, with or without a schedule of it: with one it is
// outer::lr_scheduled<O, schedule::any> (trickle/outer/lr_schedule.hpp: the lr times the
// schedule's multiplier at each outer step, the schedule's fields in the configuration);
// without, O itself (its bits, fields and checkpoints). One instantiation for both: the
// rule that prepare() returns is O's either way.
template <class O>
struct scheduled_outer {
    using scheduled = trickle::outer::lr_scheduled<O, trickle::schedule::any>;
    static constexpr const char* name = O::name;
    static constexpr int state_slots = O::state_slots;

    O optimizer{};
    std::optional<scheduled> schedule{};

    void describe(trickle::config_record& rec) const {
        if (schedule)
            schedule->describe(rec);
        else
            optimizer.describe(rec);
    }
    auto prepare(std::uint64_t t) const { return schedule ? schedule->prepare(t) : optimizer.prepare(t); }
};

// The engines' policies: the schedule, the topology and SPARTA's codec are the variant
// policies; only the sampler, the outer optimizer (as scheduled_outer where it has a
// learning rate) and DiLoCo's wire (codec::any or outer_sparsifier) are template arguments.
template <class O>
using outer_of = std::conditional_t<trickle::outer::has_learning_rate<O>, scheduled_outer<O>, O>;

template <class Sampler>
using sparta_algo = trickle::sparta<Sampler, trickle::schedule::any, trickle::topology::any, trickle::codec::any>;

template <class Sampler, class Outer, class Wire>
using sparta_diloco_algo = trickle::sparta_diloco<Sampler, trickle::schedule::any, trickle::topology::any, Outer,
                                                  trickle::codec::any, Wire>;

} // namespace trickle_py
