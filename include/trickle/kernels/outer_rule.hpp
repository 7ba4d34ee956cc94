// trickle/kernels/outer_rule.hpp: the per-element update rule of an outer optimizer, and where its state lives.
//
// It lives in the kernels layer because the DiLoCo kernel bodies (kernels/stream/body.hpp) apply
// rules; the optimizers that prepare them (outer/*.hpp, a policy layer) include it.
#pragma once

#include <trickle/config.hpp>

#include <concepts>
#include <cstddef>
#include <type_traits>
#include <utility>

TRICKLE_NAMESPACE_BEGIN

// An outer_rule is what outer_optimizer::prepare(t) returns for one outer step: a small
// trivially copyable value (it travels into CUDA kernels by value) with
//   static constexpr int state_slots;                               // fp32 values per element
//   TRICKLE_HOST_DEVICE void apply(float& p, float g, float* state) const;
// apply() updates one parameter p given its outer gradient g. state points to that
// element's state_slots values, gathered into registers by the kernel (so apply never sees
// the memory layout); it is nullptr when state_slots == 0.
template <class R>
concept outer_rule = std::is_trivially_copyable_v<R> && requires(const R& r, float& p, float g, float* state) {
    { R::state_slots } -> std::convertible_to<int>;
    { r.apply(p, g, state) } -> std::same_as<void>;
};

// A rule chosen at run time among several (outer::any's prepare() returns one): it is
// never applied per element; whoever runs a pass hands it a callable with visit(f), which
// calls f once with the held outer_rule, so each pass runs one concrete rule's body and the
// choice costs one branch per pass, never one per element.
namespace detail {
// What outer_rule_choice hands visit() to check it (a named callable, not a lambda: nvcc's
// front end takes no lambda inside a requires-expression).
struct rule_probe {
    template <class R>
    void operator()(const R&) const {}
};
} // namespace detail

template <class R>
concept outer_rule_choice = !outer_rule<R> && requires(const R& r) {
    r.visit(detail::rule_probe{});
};

// f(rule) for a plain rule; for a choice, f with the rule it holds.
template <class R, class F>
    requires outer_rule<R> || outer_rule_choice<R>
decltype(auto) with_rule(const R& rule, F&& f) {
    if constexpr (outer_rule<R>)
        return std::forward<F>(f)(rule);
    else
        return rule.visit(std::forward<F>(f));
}

// Layout of the outer-optimizer state of a group of n elements: structure of arrays,
// slot s of element i at state[s * n + i], n * state_slots floats in all.
//
// Why not element-major (state[i * slots + s])? Consecutive GPU threads handle consecutive
// elements, so with this layout each slot read or write by a warp is one contiguous
// 128-byte transaction, for any slot count and with no stride. Each slot is also a
// parameter-shaped fp32 array of its own, exactly like torch's per-parameter state tensors
// (momentum_buffer; exp_avg, exp_avg_sq), so checkpoints convert with plain copies, and
// one slot can be zeroed, inspected or compared without touching the others.
TRICKLE_HOST_DEVICE std::size_t outer_state_index(int slot, std::size_t i, std::size_t n) {
    return static_cast<std::size_t>(slot) * n + i;
}

// a * b, rounded once and never contracted with a following addition into a fused
// multiply-add. nvcc contracts a * b + c by default; rules use this for every product
// that feeds a sum, so they follow torch's operation order and give the same bits on the
// host and on the device. (Host compilers do not contract for x86-64's baseline ISA; with
// -march flags that enable FMA, also pass -ffp-contract=off to keep host results exact.)
TRICKLE_HOST_DEVICE float mul_rn(float a, float b) {
#if TRICKLE_ON_DEVICE
    return __fmul_rn(a, b);
#else
    return a * b;
#endif
}

// a + b and a - b, rounded once, for sums whose operand may be a product (the same
// contraction rule as mul_rn).
TRICKLE_HOST_DEVICE float add_rn(float a, float b) {
#if TRICKLE_ON_DEVICE
    return __fadd_rn(a, b);
#else
    return a + b;
#endif
}

TRICKLE_HOST_DEVICE float sub_rn(float a, float b) {
#if TRICKLE_ON_DEVICE
    return __fsub_rn(a, b);
#else
    return a - b;
#endif
}

TRICKLE_NAMESPACE_END
