// trickle/outer/outer_optimizer.hpp: the outer_optimizer concept that every DiLoCo outer optimizer satisfies.
//
// An outer optimizer is a small copyable policy struct with public fields, for example
// outer::nesterov{.lr = 0.7, .momentum = 0.9}. It provides:
//
//   static constexpr const char* name;          // "nesterov"; part of the configuration check
//   static constexpr int state_slots;           // fp32 state values kept per parameter
//                                               // (outer::any: int state_slot_count() const,
//                                               // the held optimizer's)
//   void describe(config_record& rec) const;    // adds its fields; reports bad values
//   Rule prepare(std::uint64_t t) const;        // host side, once per outer step t >= 1
//
// describe() adds "outer" (the name) and one "outer.<field>" entry per field, so workers
// that disagree on any hyperparameter are caught by agree(). For an invalid value it calls
// rec.set_error() with a message naming the field instead of throwing: the algorithm
// raises the errors of all ranks collectively, so one bad rank never hangs the others.
//
// prepare(t) is called on the host once per outer step, t counted from 1 as torch counts
// its optimizer steps. Everything that depends only on t and the hyperparameters (bias
// corrections, step sizes, whether this is the first step) is computed there, in double
// and then rounded to float, as torch does with Python floats, so that the per-element
// apply() of the returned outer_rule (kernels/outer_rule.hpp) is a handful of fp32 operations.
// prepare() throws trickle::invalid_argument for t == 0 or invalid fields.
//
// The state of a group of n parameters is state_slots * n floats laid out as structure of
// arrays (outer_state_index in kernels/outer_rule.hpp). A rule must not read its state at t == 1:
// the state is defined by the first step (torch initialises momentum_buffer to the first
// gradient and the Adam moments to zero), so the algorithm never needs to clear it, and
// restarting at t = 1 resets the optimizer.
//
// Writing your own: a struct with the four members above whose prepare() returns a
// trivially copyable rule satisfying outer_rule with the same state_slots; see
// docs/outer-optimizers.md. outer::any (outer/any.hpp) chooses among the registered ones at
// run time: its prepare() returns an outer_rule_choice that the passes visit once each.
#pragma once

#include <trickle/core/config_record.hpp>
#include <trickle/config.hpp>
#include <trickle/error.hpp>
#include <trickle/kernels/outer_rule.hpp>

#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <utility>

TRICKLE_NAMESPACE_BEGIN

// The rule type an outer optimizer's prepare() returns.
template <class O>
using outer_rule_t = std::remove_cvref_t<decltype(std::declval<const O&>().prepare(std::uint64_t{1}))>;

namespace detail {

// An optimizer whose state slots its type fixes (every built-in one): a static
// state_slots and a prepare() that returns an outer_rule with the same count.
template <class O>
concept fixed_slot_outer = requires {
    { O::state_slots } -> std::convertible_to<int>;
} && outer_rule<outer_rule_t<O>> && (O::state_slots >= 0) && (outer_rule_t<O>::state_slots == O::state_slots);

// One chosen at run time among several (outer::any): the held optimizer's slot count, and a
// prepare() that returns an outer_rule_choice holding that optimizer's rule.
template <class O>
concept chosen_slot_outer = requires(const O& o) {
    { o.state_slot_count() } -> std::convertible_to<int>;
} && outer_rule_choice<outer_rule_t<O>>;

} // namespace detail

template <class O>
concept outer_optimizer = std::copyable<O> &&
    requires(const O& o, config_record& rec, std::uint64_t t) {
        { O::name } -> std::convertible_to<const char*>;
        { o.describe(rec) } -> std::same_as<void>;
        o.prepare(t);
    } &&
    (detail::fixed_slot_outer<O> || detail::chosen_slot_outer<O>);

// The fp32 state values per parameter that `o` keeps: O::state_slots, or for an optimizer
// chosen at run time, the held one's.
template <outer_optimizer O>
int outer_state_slots(const O& o) {
    if constexpr (detail::fixed_slot_outer<O>) {
        (void)o;
        return O::state_slots;
    } else {
        return static_cast<int>(o.state_slot_count());
    }
}

// Number of floats of outer-optimizer state for n parameters. Throws
// trickle::invalid_argument when that count does not fit in std::size_t.
template <outer_optimizer O>
std::size_t outer_state_floats(const O& o, std::size_t n) {
    const auto slots = static_cast<std::size_t>(outer_state_slots(o));
    if (slots == 0) return 0;
    require(n <= std::numeric_limits<std::size_t>::max() / slots, "outer_state_floats: ", n, " parameters with ",
            slots, " state slots each overflow std::size_t");
    return slots * n;
}
template <outer_optimizer O>
    requires detail::fixed_slot_outer<O>
std::size_t outer_state_floats(std::size_t n) {
    return outer_state_floats(O{}, n);
}

namespace detail {

// Validation shared by the optimizers: each returns "" when the value is acceptable, else
// a message "outer::<name>: <field> must ..., got <value>". Written so that NaN fails.
inline std::string check_learning_rate(const char* optimizer, double lr) {
    if (std::isfinite(lr) && lr > 0.0) return {};
    return concat("outer::", optimizer, ": lr must be finite and > 0, got ", lr);
}

// For momentum and Adam's betas: a decay factor in [0, 1).
inline std::string check_decay(const char* optimizer, const char* field, double v) {
    if (v >= 0.0 && v < 1.0) return {};
    return concat("outer::", optimizer, ": ", field, " must be in [0, 1), got ", v);
}

inline std::string check_epsilon(const char* optimizer, double eps) {
    if (std::isfinite(eps) && eps > 0.0) return {};
    return concat("outer::", optimizer, ": eps must be finite and > 0, got ", eps);
}

// The first non-empty message, or "".
template <class... Messages>
std::string first_error(Messages&&... messages) {
    std::string out;
    ((out.empty() ? void(out = std::forward<Messages>(messages)) : void()), ...);
    return out;
}

inline void check_outer_step(const char* optimizer, std::uint64_t t) {
    require(t >= 1, "outer::", optimizer, "::prepare: outer steps are counted from 1, got 0");
}

} // namespace detail

TRICKLE_NAMESPACE_END
