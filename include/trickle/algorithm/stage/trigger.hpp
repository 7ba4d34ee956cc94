// trickle/algorithm/stage/trigger.hpp: when an algorithm communicates.
//
// A trigger answers one question per inner step: does the step after inner step t end a
// round (SPARTA: an exchange; DiLoCo: an outer step)? Every interval-th step, or, for a
// trigger the trainer drives (diloco_options::manual_outer: a deadline, workers at
// different speeds), never by itself. A schedule policy that also says when
// (detail::schedule_due) is asked through it; streaming fragments ask it with their phase.
// The arithmetic itself has one home, detail::due_every (schedule/schedule.hpp).
#pragma once

#include <trickle/config.hpp>
#include <trickle/schedule/schedule.hpp>

#include <cstdint>

TRICKLE_NAMESPACE_BEGIN

namespace detail {

class round_trigger {
public:
    round_trigger() = default;
    round_trigger(std::uint64_t interval, bool manual = false) : interval_(interval), manual_(manual) {}

    // Whether the step after inner step t (0-based) ends a round; `phase` offsets the
    // cycle (streaming fragments).
    bool due(std::uint64_t t, std::uint64_t phase = 0) const { return !manual_ && due_every(t, interval_, phase); }

    // The same asked through a schedule policy, which may decide when as well as how much.
    template <class Schedule>
    bool due_with(const Schedule& s, std::uint64_t t) const {
        return !manual_ && schedule_due(s, t, interval_);
    }

    std::uint64_t interval() const { return interval_; }
    bool manual() const { return manual_; }

private:
    std::uint64_t interval_ = 1;
    bool manual_ = false;
};

} // namespace detail

TRICKLE_NAMESPACE_END
