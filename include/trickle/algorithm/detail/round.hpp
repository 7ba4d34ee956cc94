// trickle/algorithm/detail/round.hpp: how an engine runs its rounds, over a fixed world or
// under the membership protocol.
//
// An engine runs each round (SPARTA's exchange, DiLoCo's outer step) through
// round_protocol<Comm>: over a fixed world it simply runs; over an elastic communicator
// (comm::elastic_communicator) the protocol of algorithm/membership.hpp renews the view,
// welcomes joiners, checks quorum and retries after a peer failure. That specialization
// lives with the protocol, so an algorithm over a fixed world compiles none of it; a
// translation unit that steps an algorithm over an elastic communicator includes
// <trickle/algorithm/membership.hpp> (trickle/trickle.hpp and trickle/algorithm.hpp do).
// The membership fields of the configuration record are here too.
#pragma once

#include <trickle/algorithm/stats.hpp>
#include <trickle/comm/communicator.hpp>
#include <trickle/comm/view.hpp>
#include <trickle/config.hpp>
#include <trickle/core/config_record.hpp>
#include <trickle/error.hpp>

#include <utility>

TRICKLE_NAMESPACE_BEGIN

namespace detail {

template <class Comm, bool Elastic = comm::elastic_communicator<Comm>>
struct round_protocol {
    template <class Engine, class Round>
    static bool run(Comm&, Engine&, membership_stats&, int, const char*, Round&& round) {
        round();
        return true;
    }
    template <class Engine, class Round>
    static bool join(Comm&, Engine&, membership_stats&, int, const char* kind, Round&&) {
        throw invalid_argument(concat(kind, ": join needs an elastic communicator (comm::elastic_local)"));
    }
    // Between a round's collectives and the first change of state (see membership.hpp).
    static void commit(Comm&) {}
};

// Defined by algorithm/membership.hpp.
template <class Comm>
struct round_protocol<Comm, true>;

// Whether the protocol an engine over Comm needs is defined in this translation unit.
template <class Comm>
inline constexpr bool round_protocol_defined = !comm::elastic_communicator<Comm> ||
                                               requires { sizeof(round_protocol<Comm>); };

// Who runs an engine's membership protocol: the engine itself, or an algorithm made of
// several engines (sparta_diloco), which renews once per step for all of them and moves
// their states together; a delegated joiner only prepares its buffers.
enum class membership_role { own, delegated };

// An engine constructor's membership part. Over an elastic communicator the engine keeps
// its configuration record for the protocol (`elastic_record`, what elastic_record()
// returns) and, when this object is built by a joiner, prepare() makes its buffers; an
// engine with its own role then joins at once (join_now(): admitted at the members' next
// round, it takes the state and that round), a delegated one leaves joining to the
// algorithm it is part of. Over a fixed world, join is refused. Returns whether this
// object is a joiner: its constructor ends there (no agreement, no initial broadcast).
template <class Comm, class Prepare, class JoinNow>
bool start_membership(config_record& elastic_record, const config_record& rec, bool join, membership_role role,
                      const char* kind, Prepare&& prepare, JoinNow&& join_now) {
    if constexpr (comm::elastic_communicator<Comm>) {
        elastic_record = rec;
        if (!join) return false;
        prepare();
        if (role == membership_role::own) join_now();
        return true;
    } else {
        (void)elastic_record;
        (void)rec;
        (void)role;
        (void)prepare;
        (void)join_now;
        if (join) throw invalid_argument(concat(kind, ": join needs an elastic communicator (comm::elastic_local)"));
        return false;
    }
}

// The configuration fields of membership (min_workers, join) and their errors.
template <class Comm>
void describe_membership(config_record& rec, const Comm& comm, int min_workers, bool join, const char* kind,
                         bool topology_all_reduce, bool other_refusal, const char* other_what) {
    rec.add("min_workers", min_workers);
    if (min_workers < 1) rec.set_error(concat(kind, ": min_workers must be >= 1, got ", min_workers));
    if constexpr (comm::elastic_communicator<Comm>) {
        if (!join && min_workers > comm.size())
            rec.set_error(concat(kind, ": min_workers (", min_workers, ") is larger than the world (", comm.size(),
                                 " workers)"));
        if (!topology_all_reduce)
            rec.set_error(concat(kind, ": an elastic communicator needs topology::all_reduce in this version (the other ",
                                 "topologies fix their groups to the world's size)"));
        if (other_refusal) rec.set_error(concat(kind, ": ", other_what, " does not combine with an elastic communicator in this version"));
    } else {
        if (join) rec.set_error(concat(kind, ": join needs an elastic communicator (comm::elastic_local)"));
        if (min_workers > comm.size())
            rec.set_error(concat(kind, ": min_workers (", min_workers, ") is larger than the world (", comm.size(),
                                 " workers)"));
    }
}

} // namespace detail

TRICKLE_NAMESPACE_END
