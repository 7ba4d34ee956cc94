// trickle/comm/view.hpp: what an elastic communicator's renewal decides, and the concept
// of an elastic communicator (comm::elastic_local, comm/elastic.hpp, implements it).
//
// Apart from any implementation, so that the algorithms name the concept without
// compiling one.
#pragma once

#include <trickle/comm/communicator.hpp>
#include <trickle/config.hpp>

#include <algorithm>
#include <concepts>
#include <cstdint>
#include <vector>

TRICKLE_NAMESPACE_BEGIN

namespace comm {

// What a renewal (or an admission) decided.
struct membership_change {
    std::uint64_t epoch = 0;  // the epoch of the view after it
    std::vector<int> members; // the view's ids, ascending (rank = position)
    std::vector<int> joined;  // ids admitted by it
    std::vector<int> left;    // ids dropped by it (failed, left, or silent past the timeout)
    bool changed() const { return !joined.empty() || !left.empty(); }
    bool is_joiner(int id) const { return std::find(joined.begin(), joined.end(), id) != joined.end(); }
};

// A communicator whose view can change: the algorithms take membership changes at step
// boundaries through these members (algorithm/membership.hpp).
//   id()                     this worker's stable id
//   epoch()                  the epoch of its current view
//   renew()                  collective over the view: the next view (membership_change)
//   join()                   a worker outside the view: waits to be admitted by a renew()
//   leave()                  this worker leaves for good (its peers see a peer_failure)
template <class C>
concept elastic_communicator = communicator<C> && requires(C& c, const C& cc) {
    { cc.id() } -> std::convertible_to<int>;
    { cc.epoch() } -> std::convertible_to<std::uint64_t>;
    { c.renew() } -> std::same_as<membership_change>;
    { c.join() } -> std::same_as<membership_change>;
    c.leave();
};

} // namespace comm

TRICKLE_NAMESPACE_END
