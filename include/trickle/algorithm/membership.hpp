// trickle/algorithm/membership.hpp: how SPARTA and DiLoCo take membership changes over an
// elastic communicator (comm/elastic.hpp): renewal at a step boundary, the joiners' state
// transfer with its hash check, quorum, and rounds redone after a peer failed in them.
//
// The protocol of one round (an exchange of SPARTA, an outer step of DiLoCo), run by every
// member of the view, and by a joiner from its constructor right after it was admitted:
//
//   1. renew(): the view of this round (members that failed since are dropped, workers
//      waiting in join() are admitted).
//   2. If workers joined, the welcome: every rank's configuration record is gathered; the
//      donor (the lowest rank that is not a joiner) sends its global state to the joiners as
//      a checksummed record stream (algorithm/checkpoint.hpp over comm/byte_stream.hpp); each
//      joiner verifies and applies it; every rank then gathers every rank's hash of its global state. A joiner whose
//      configuration differs (named field by field), whose transfer arrived damaged, or
//      whose hash differs from the donor's is refused: it leaves and throws; the others renew
//      without it. A *member* whose hash differs from the donor's means the replicas have
//      diverged: every rank throws mismatch_error.
//   3. Below quorum (fewer than min_workers in the view) the round is skipped: every worker
//      keeps training locally, and the next round renews again.
//   4. The round itself. If a peer fails during it, every survivor throws peer_failure at
//      the same collective; the round's local effects are rolled back (the algorithms keep
//      persistent state untouched until their collectives have completed, and back up what
//      they change before: sampler state, counters, the error-feedback residual), and the
//      survivors go back to 1. A failed worker's contribution to an interrupted round is
//      discarded; nothing it sent counts.
#pragma once

#include <trickle/algorithm/agreement.hpp>
#include <trickle/algorithm/checkpoint.hpp>
#include <trickle/algorithm/stats.hpp>
#include <trickle/comm/byte_stream.hpp>
#include <trickle/comm/communicator.hpp>
#include <trickle/algorithm/detail/round.hpp>
#include <trickle/comm/view.hpp>
#include <trickle/config.hpp>
#include <trickle/core/config_record.hpp>
#include <trickle/core/crc32c.hpp>
#include <trickle/error.hpp>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <istream>
#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

TRICKLE_NAMESPACE_BEGIN

// membership_stats: algorithm/stats.hpp.

namespace detail {

// The trainer state a communicator carries to joiners (comm::trainer_state), or null.
template <class Comm>
const comm::trainer_state* carried_trainer_state(const Comm& comm) {
    if constexpr (requires { comm.carried_trainer_state(); })
        return comm.carried_trainer_state();
    else
        return nullptr;
}

// The welcome of step 2 above. Engine provides:
//   config_record elastic_record() const        its configuration (the same on every worker)
//   void send_state(std::ostream&) const        writes the donor's global state, checksummed
//   void receive_state(std::istream&, checkpoint_trailing)
//                                               a joiner reads and applies it (throws
//                                               trickle::error if refused)
//   std::uint32_t global_hash() const           a hash of the state every replica shares
// The state travels as a byte stream over the communicator (comm/byte_stream.hpp), to the
// joiners only: sections that lie in host memory go from the donor's memory straight into
// the joiner's.
// When the communicator carries a trainer state (comm::trainer_state), its name is a field
// of each rank's record and the donor's state follows the algorithm's. Returns false when
// a joiner was refused (the caller renews), true otherwise; a refused joiner leaves and
// throws.
template <class Comm, class Engine>
bool welcome(Comm& comm, Engine& e, membership_stats& ms, const comm::membership_change& ch, bool i_join,
             const char* kind) {
    const int N = comm.size();
    const int me = comm.rank();
    std::vector<char> joiner(static_cast<std::size_t>(N));
    int donor = -1;
    for (int r = 0; r < N; ++r) {
        joiner[static_cast<std::size_t>(r)] = ch.is_joiner(ch.members[static_cast<std::size_t>(r)]);
        if (!joiner[static_cast<std::size_t>(r)] && donor < 0) donor = r;
    }
    if (donor < 0) {
        comm.leave();
        throw comm_error(concat(kind, ": no live member holds the state to join from (every worker of the view is ",
                                "joining); start the workers from a checkpoint instead"));
    }
    // Configurations: each joiner against the donor's (the trainer state it carries included).
    const comm::trainer_state* trainer = carried_trainer_state(comm);
    config_record mine = e.elastic_record();
    mine.add_text("trainer_state", trainer ? trainer->name : std::string("none"));
    const std::vector<config_record> recs = gather_records(comm, mine);
    bool donor_carries = false;
    for (const auto& [name, value] : recs[static_cast<std::size_t>(donor)].fields())
        if (name == "trainer_state") donor_carries = value != "none";
    std::vector<std::string> why(static_cast<std::size_t>(N));
    for (int r = 0; r < N; ++r) {
        if (!joiner[static_cast<std::size_t>(r)]) continue;
        const auto& rec = recs[static_cast<std::size_t>(r)];
        if (!rec.error().empty()) {
            why[static_cast<std::size_t>(r)] = rec.error();
            continue;
        }
        const auto diffs = record_differences(recs[static_cast<std::size_t>(donor)], rec, r, donor);
        std::string msg;
        for (std::size_t i = 0; i < diffs.size(); ++i) msg += (i ? "; " : "") + diffs[i];
        if (!msg.empty()) why[static_cast<std::size_t>(r)] = "its configuration differs from the members': " + msg;
    }
    const auto t0 = std::chrono::steady_clock::now();
    // The state, from the donor, to the joiners whose configuration matched: they read and
    // apply it; every other rank takes part in the stream's collectives and moves none of it.
    // The trainer's state follows it in the same stream: a first byte 1, the CRC-32C of the
    // bytes (4 bytes, as the checkpoints write theirs) and the bytes, or 0 and why the donor's
    // save() failed.
    std::vector<char> receives(static_cast<std::size_t>(N));
    for (int r = 0; r < N; ++r)
        receives[static_cast<std::size_t>(r)] = joiner[static_cast<std::size_t>(r)] && why[static_cast<std::size_t>(r)].empty();
    std::string mine_failed;
    if (me == donor) {
        comm::stream_writer<Comm> out(comm, donor, receives);
        std::ostream os(&out);
        os.exceptions(std::ios::badbit); // a communicator's error leaves as itself
        e.send_state(os);
        if (donor_carries) {
            std::string head, saved;
            // (A communicator without a trainer state cannot be the donor of one: its record says
            // "none". The test keeps that a fact the compiler sees too; g++ 12 at -O3 otherwise
            // reports -Warray-bounds in the call below for such communicators.)
            if (trainer == nullptr) {
                head = std::string(1, '\0') + "the donor carries no trainer state";
            } else {
                try {
                    saved = trainer->save();
                    const std::uint32_t crc = crc32c(saved);
                    head.push_back('\1');
                    head.append(reinterpret_cast<const char*>(&crc), sizeof crc);
                } catch (const std::exception& ex) {
                    saved.clear();
                    head = std::string(1, '\0') + concat("the donor could not save its trainer state: ", ex.what());
                }
            }
            os.write(head.data(), static_cast<std::streamsize>(head.size()));
            os.write(saved.data(), static_cast<std::streamsize>(saved.size())); // sent from where it lies
        }
        out.finish();
        ms.state_bytes += out.bytes();
    } else {
        comm::stream_reader<Comm> in(comm, donor, receives);
        if (receives[static_cast<std::size_t>(me)]) {
            std::istream is(&in);
            is.exceptions(std::ios::badbit);
            try {
                // (the hash below reads the applied state)
                e.receive_state(is, donor_carries ? checkpoint_trailing::leave : checkpoint_trailing::refuse);
            } catch (const comm_error&) {
                throw;
            } catch (const error& ex) {
                mine_failed = ex.what();
            }
            if (mine_failed.empty() && donor_carries && trainer != nullptr) {
                char first = 0;
                std::uint32_t sent = 0;
                const bool got = in.sgetn(&first, 1) == 1;
                if (got && first == '\1' &&
                    in.sgetn(reinterpret_cast<char*>(&sent), sizeof sent) == static_cast<std::streamsize>(sizeof sent)) {
                    const std::string bytes = in.rest();
                    if (crc32c(bytes) != sent) {
                        mine_failed = concat("its trainer state '", trainer->name,
                                             "' arrived damaged (its CRC-32C does not match the donor's)");
                    } else {
                        try {
                            trainer->load(bytes);
                        } catch (const std::exception& ex) {
                            mine_failed = concat("its trainer state '", trainer->name, "' could not be loaded: ", ex.what());
                        }
                    }
                } else if (got && first == '\0') {
                    mine_failed = in.rest();
                } else {
                    mine_failed = "the trainer state did not arrive whole";
                }
            }
        }
        in.drain();
        if (receives[static_cast<std::size_t>(me)]) ms.state_bytes += in.bytes();
    }
    // Every rank's verdict and hash.
    const std::uint64_t verdict[2] = {mine_failed.empty() ? 1u : 0u,
                                      mine_failed.empty() && (!i_join || why[static_cast<std::size_t>(me)].empty())
                                          ? e.global_hash()
                                          : 0u};
    std::vector<std::uint64_t> all(2 * static_cast<std::size_t>(N));
    comm.all_gather_bytes(verdict, all.data(), sizeof verdict);
    const std::uint64_t reference = all[2 * static_cast<std::size_t>(donor) + 1];
    int refused = 0;
    for (int r = 0; r < N; ++r) {
        const std::uint64_t ok = all[2 * static_cast<std::size_t>(r)];
        const std::uint64_t hash = all[2 * static_cast<std::size_t>(r) + 1];
        auto& w = why[static_cast<std::size_t>(r)];
        if (!joiner[static_cast<std::size_t>(r)]) {
            if (hash != reference)
                throw mismatch_error(concat(kind, ": the members' global state differs (rank ", r, " hashes to ",
                                            hash, ", the donor rank ", donor, " to ", reference,
                                            "): the replicas have diverged"));
            continue;
        }
        if (w.empty() && !ok) w = "the transferred state was refused";
        if (w.empty() && hash != reference)
            w = concat("its state hashes to ", hash, " after the transfer, the donor's to ", reference);
        refused += w.empty() ? 0 : 1;
    }
    ms.joins_refused += static_cast<std::uint64_t>(refused);
    ms.transfer_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (i_join && !why[static_cast<std::size_t>(me)].empty()) {
        std::string msg = concat(kind, ": join refused: ",
                                 mine_failed.empty() ? why[static_cast<std::size_t>(me)] : mine_failed);
        comm.leave();
        if (mine_failed.empty() && why[static_cast<std::size_t>(me)].rfind("its configuration", 0) == 0)
            throw mismatch_error(msg);
        throw invalid_argument(msg);
    }
    return refused == 0;
}

// One round under the protocol above. `admitted`: a joiner's admission (its constructor),
// else nothing (a member renews first). Engine also provides round_backup(),
// round_rollback() and view_changed(). Returns whether the round ran (false: below quorum).
template <class Comm, class Engine, class Round>
bool elastic_round(Comm& comm, Engine& e, membership_stats& ms, int min_workers,
                   std::optional<comm::membership_change> admitted, const char* kind, Round&& round) {
    using clock = std::chrono::steady_clock;
    const auto seconds = [](clock::duration d) { return std::chrono::duration<double>(d).count(); };
    std::optional<comm::membership_change> ch = std::move(admitted);
    bool joining = ch.has_value();
    for (int attempt = 0;; ++attempt) {
        const auto t0 = clock::now();
        // Whether this attempt took its backup: a failure inside the renewal itself (a new
        // epoch's group that cannot form) comes before it, and must not restore the backup
        // of an earlier round (that rewound the step counter and the outer counters).
        bool backed_up = false;
        try {
            if (!ch) {
                ch = comm.renew();
                ms.wait_seconds += seconds(clock::now() - t0);
            }
            if (ch->changed()) {
                ++ms.changes;
                ms.joined += ch->joined.size();
                ms.left += ch->left.size();
            }
            ms.epoch = ch->epoch;
            ms.workers = comm.size();
            e.view_changed();
            e.round_backup();
            backed_up = true;
            if (!ch->joined.empty()) {
                const bool all_admitted = welcome(comm, e, ms, *ch, joining, kind);
                joining = false;
                ch.reset();
                if (!all_admitted) continue; // renew without the refused joiners
            }
            joining = false;
            ch.reset();
            if (comm.size() < min_workers) {
                ms.quorum = false;
                ++ms.rounds_below_quorum;
                return false;
            }
            ms.quorum = true;
            round();
            return true;
        } catch (const peer_failure&) {
            ms.wait_seconds += seconds(clock::now() - t0);
            if (joining) throw; // a joiner that lost its admission: it may join again
            if (backed_up) e.round_rollback();
            ++ms.rounds_retried;
            ch.reset();
            // Every failure drops at least one worker from the next view, so this ends; the
            // bound only guards against a communicator that breaks that promise.
            if (attempt > 1000) throw;
        }
    }
}

// The protocol as the engines run a round over an elastic communicator
// (algorithm/detail/round.hpp declares it; engines over a fixed world never see this).
template <class Comm>
struct round_protocol<Comm, true> {
    // A member's round: renewal, welcome, quorum, the round, retried after a peer failure.
    template <class Engine, class Round>
    static bool run(Comm& comm, Engine& e, membership_stats& ms, int min_workers, const char* kind, Round&& round) {
        return elastic_round(comm, e, ms, min_workers, std::nullopt, kind, std::forward<Round>(round));
    }
    // A joiner's first round, from its constructor: admitted at the members' next round, it
    // takes the state and then that round.
    template <class Engine, class Round>
    static bool join(Comm& comm, Engine& e, membership_stats& ms, int min_workers, const char* kind, Round&& round) {
        comm::membership_change admitted = comm.join();
        return elastic_round(comm, e, ms, min_workers, std::move(admitted), kind, std::forward<Round>(round));
    }
    // An engine calls this after a round's collectives and before the round changes any
    // state. A communicator whose collectives can complete on some survivors of a failure
    // and not on others (comm::elastic_group: processes over Gloo) votes there, so that
    // the round is applied by every member or by none (a failed vote throws peer_failure,
    // and the round is rolled back and redone like any failed round); over
    // comm::elastic_local a failure aborts the whole epoch's world, so nothing is needed.
    static void commit(Comm& comm) {
        if constexpr (requires { comm.commit(); }) comm.commit();
    }
};

} // namespace detail

TRICKLE_NAMESPACE_END
