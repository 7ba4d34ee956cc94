// examples/sim/plan.hpp: who is alive when, in an elastic trickle-sim run (--fail, --join).
//
// The plan is fixed before training: from --workers, --steps, the round length and the
// --fail / --join events it lists every *life* of every worker (from its start, or the
// step its join was released at, to its failure or the end of training) and answers
// what the trainer's threads need to meet deterministically: who is a member after a
// step, who reaches the barrier before a round's collective, who is admitted at a round.
//
// Steps are counted as in the options: --fail W@F means worker W dies before inner step F
// (0-based), so it completes steps 0 .. F-1; --join W@J releases W before inner step J, and
// it is admitted at the first round boundary after that step (the end of round J / H).
// Ticks are 1-based: tick t is inner step t - 1, and a round of length H ends at tick
// (r + 1) H, inside whose step the round's collective runs. SPARTA + DiLoCo has rounds of
// two lengths (its exchanges every --interval steps, its outer steps every
// --outer-interval): a tick ends a round when it ends one of either.
#pragma once

#include <algorithm>
#include <cstddef>
#include <map>
#include <string>
#include <vector>

namespace trickle_sim {

// One --fail or --join item: worker W at step STEP.
struct membership_event {
    int worker = 0;
    int step = 0;
    bool operator==(const membership_event&) const = default;
};

// One life of a worker.
struct worker_life {
    int id = 0;
    bool joiner = false; // a later life: it joins a running world
    int start = 0;       // when it starts, in ticks: 0, or J for a joiner released before step J
    int admit = 0;       // joiner: the round-end tick it is admitted at (it trains from tick admit + 1)
    int end = 0;         // the ticks it completes: up to `end` (F if it fails before step F, else --steps)
    bool fails = false;  // it dies before inner step `end`
};

struct membership_plan {
    int steps = 0;    // ticks in all
    std::vector<int> rounds{1}; // ticks per round (DiLoCo: --outer-interval; SPARTA: --interval; both: both)
    int initial = 0;  // --workers: ids 0 .. initial-1 start
    int capacity = 0; // ids 0 .. capacity-1: --workers plus new ids that join
    std::vector<worker_life> lives; // the initial lives by id, then the joins in the order released

    // A member after tick t (having done tick t's work): it is admitted by then and has not failed.
    bool member_after(const worker_life& l, int t) const { return (!l.joiner || l.admit <= t) && t <= l.end; }

    // The lives that are members after tick t, by ascending id.
    std::vector<int> alive_after(int t) const {
        std::vector<int> out;
        for (std::size_t k = 0; k < lives.size(); ++k)
            if (member_after(lives[k], t)) out.push_back(static_cast<int>(k));
        std::sort(out.begin(), out.end(), [&](int a, int b) { return lives[static_cast<std::size_t>(a)].id < lives[static_cast<std::size_t>(b)].id; });
        return out;
    }

    // Whether tick t ends a round (and runs its collective).
    bool round_end(int t) const {
        bool end = false;
        for (int r : rounds) end = end || (t >= r && t % r == 0);
        return end;
    }
    // The round-end tick of the round that tick t (>= 1) belongs to.
    int round_end_of(int t) const {
        int best = 0;
        for (int r : rounds) {
            const int e = (t + r - 1) / r * r;
            best = best == 0 ? e : std::min(best, e);
        }
        return best;
    }
    // The round-end tick before T (0: none).
    int previous_round_end(int T) const {
        int best = 0;
        for (int r : rounds) best = std::max(best, (T - 1) / r * r);
        return best;
    }

    // The lives that reach the meeting before the collective of the round ending at tick
    // T: the members during that round, including those that die in it (they arrive
    // after their failure is reported, and leave).
    int round_arrivals(int T) const {
        const int P = previous_round_end(T);
        int n = 0;
        for (const auto& l : lives)
            if ((!l.joiner || l.admit <= P) && l.end >= P) ++n;
        return n;
    }

    // The joiner lives admitted at the round ending at tick T.
    std::vector<int> admitted_at(int T) const {
        std::vector<int> out;
        for (std::size_t k = 0; k < lives.size(); ++k)
            if (lives[k].joiner && lives[k].admit == T) out.push_back(static_cast<int>(k));
        return out;
    }
};

// The plan of these events, or the reason it cannot run in `error` (which names the option
// at fault; the caller turns it into a usage_error). `rounds`: the ticks per round of the
// strategy at hand (two for SPARTA + DiLoCo), each >= 1.
inline membership_plan make_membership_plan(int workers, int steps, const std::vector<int>& rounds,
                                            const std::vector<membership_event>& fails,
                                            const std::vector<membership_event>& joins, std::string& error,
                                            int max_workers = 256) {
    membership_plan p;
    p.steps = steps;
    p.rounds = rounds;
    p.initial = workers;
    error.clear();
    const auto item = [](const char* opt, const membership_event& e) {
        return std::string(opt) + " " + std::to_string(e.worker) + "@" + std::to_string(e.step);
    };
    for (const auto& e : fails)
        if (e.step >= steps) {
            error = item("--fail", e) + ": the step must be one of the run's inner steps, [0, " + std::to_string(steps) +
                    ") (--steps " + std::to_string(steps) + ")";
            return p;
        }
    for (const auto& e : joins)
        if (e.step >= steps) {
            error = item("--join", e) + ": the step must be one of the run's inner steps, [0, " + std::to_string(steps) +
                    ") (--steps " + std::to_string(steps) + ")";
            return p;
        }
    // New ids take the ids after --workers, in order.
    std::vector<int> fresh;
    for (const auto& e : joins)
        if (e.worker >= workers && std::find(fresh.begin(), fresh.end(), e.worker) == fresh.end()) fresh.push_back(e.worker);
    std::sort(fresh.begin(), fresh.end());
    for (std::size_t k = 0; k < fresh.size(); ++k)
        if (fresh[k] != workers + static_cast<int>(k)) {
            error = "--join: a new worker takes the next free id after --workers " + std::to_string(workers) + " (" +
                    std::to_string(workers) + ", " + std::to_string(workers + 1) + ", ...), so " +
                    std::to_string(workers + static_cast<int>(k)) + " must join before " + std::to_string(fresh[k]) +
                    " can";
            return p;
        }
    p.capacity = workers + static_cast<int>(fresh.size());
    if (p.capacity > max_workers) {
        error = "--join: " + std::to_string(p.capacity) + " workers in all, more than the " + std::to_string(max_workers) +
                " allowed";
        return p;
    }
    for (const auto& e : fails)
        if (e.worker >= p.capacity) {
            error = item("--fail", e) + ": worker " + std::to_string(e.worker) + " is not in this run (--workers " +
                    std::to_string(workers) + ", and no --join brings it in)";
            return p;
        }

    // Each worker's events in step order (a failure before a join at the same step).
    struct ev {
        int step;
        bool join;
    };
    std::map<int, std::vector<ev>> by_worker;
    for (const auto& e : fails) by_worker[e.worker].push_back({e.step, false});
    for (const auto& e : joins) by_worker[e.worker].push_back({e.step, true});
    for (int id = 0; id < workers; ++id) p.lives.push_back({.id = id, .start = 0, .admit = 0, .end = steps});
    std::vector<worker_life> joined;
    for (auto& [id, evs] : by_worker) {
        std::stable_sort(evs.begin(), evs.end(), [](const ev& a, const ev& b) {
            return a.step != b.step ? a.step < b.step : (!a.join && b.join);
        });
        // Its open life: in p.lives (an initial worker) or in `joined` (by index), or none.
        std::vector<worker_life>* in = id < workers ? &p.lives : nullptr;
        std::size_t at = static_cast<std::size_t>(id);
        int last_fail = -1;
        for (const ev& e : evs) {
            const membership_event me{id, e.step};
            if (!e.join) {
                if (in == nullptr) {
                    error = item("--fail", me) + ": worker " + std::to_string(id) + " is not alive at step " +
                            std::to_string(e.step) +
                            (last_fail >= 0 ? " (it failed at step " + std::to_string(last_fail) +
                                                  " and has not rejoined since)"
                                            : " (it has not joined yet)");
                    return p;
                }
                worker_life& cur = (*in)[at];
                if (cur.joiner && e.step < cur.admit) {
                    error = item("--fail", me) + ": worker " + std::to_string(id) + " joins at step " +
                            std::to_string(cur.start) + " and is admitted only at the round boundary at step " +
                            std::to_string(cur.admit) + "; it can fail from step " + std::to_string(cur.admit) + " on";
                    return p;
                }
                cur.end = e.step;
                cur.fails = true;
                last_fail = e.step;
                in = nullptr;
            } else {
                if (in != nullptr) {
                    const worker_life& cur = (*in)[at];
                    error = item("--join", me) + ": worker " + std::to_string(id) + " is alive at step " +
                            std::to_string(e.step) +
                            (cur.joiner ? " (it rejoins at step " + std::to_string(cur.start) + ")" : "") +
                            "; only a failed worker, or a new id, can join";
                    return p;
                }
                const int admit = p.round_end_of(e.step + 1);
                if (last_fail >= 0 && admit == p.round_end_of(last_fail + 1)) {
                    // The simulator's meetings schedule a rejoin from the boundary that drops the
                    // failed worker (comm::elastic_local itself now admits a restart in the round
                    // of its failure at once, but the planner was written before that).
                    const int dropped = admit;
                    error = item("--join", me) + ": worker " + std::to_string(id) + " fails at step " +
                            std::to_string(last_fail) + " and leaves the view only at the round boundary at step " +
                            std::to_string(dropped) + "; it can rejoin from step " + std::to_string(dropped) +
                            " on (the simulator schedules a rejoin from the round boundary that drops the "
                            "failed worker)";
                    return p;
                }
                if (admit > steps) {
                    std::string every;
                    for (std::size_t i = 0; i < rounds.size(); ++i)
                        every += (i ? " and " : "") + std::to_string(rounds[i]);
                    error = item("--join", me) + ": it would be admitted at the first round boundary after step " +
                            std::to_string(e.step) + ", step " + std::to_string(admit) +
                            ", which is past the end of training (--steps " + std::to_string(steps) +
                            "; rounds every " + every + " steps)";
                    return p;
                }
                joined.push_back({.id = id, .joiner = true, .start = e.step, .admit = admit, .end = steps});
                in = &joined;
                at = joined.size() - 1;
            }
        }
    }
    std::stable_sort(joined.begin(), joined.end(), [](const worker_life& a, const worker_life& b) {
        return a.start != b.start ? a.start < b.start : a.id < b.id;
    });
    p.lives.insert(p.lives.end(), joined.begin(), joined.end());

    // At every moment someone is alive, and every admission has a member to take the state from.
    for (const auto& e : fails) {
        const int t = e.step + 1; // the first tick it no longer does
        if (t <= steps && p.alive_after(t).empty()) {
            error = item("--fail", e) + ": no worker is alive after it (every member has failed by step " +
                    std::to_string(e.step) + "); at least one must stay alive";
            return p;
        }
    }
    for (const auto& l : p.lives) {
        if (!l.joiner) continue;
        bool donor = false;
        for (const auto& m : p.lives)
            donor = donor || ((!m.joiner || m.admit <= p.previous_round_end(l.admit)) && m.end >= l.admit);
        if (!donor) {
            error = item("--join", membership_event{l.id, l.start}) + ": no member is alive at the round boundary at step " +
                    std::to_string(l.admit) + " to hand it the state (every member has failed by then)";
            return p;
        }
    }
    return p;
}

} // namespace trickle_sim
