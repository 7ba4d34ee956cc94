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
#include <functional>
#include <string>
#include <utility>
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

// State the trainer keeps beside the algorithm (its optimizer's moments, a learning-rate
// scheduler, a data loader's position) that a joiner takes from the donor together with
// the algorithm's state (algorithm/membership.hpp's welcome): save() runs on the donor as
// it sends, load() on each joiner once the algorithm's state was applied and before the
// joiner resumes. `name` says what it is ("torch.optim.AdamW", say) and is compared like
// the configuration: a joiner that carries another state, or none where the donor carries
// one, is refused, naming both. The bytes travel with their CRC-32C, which the joiner
// checks before load() (a mismatch refuses the join). Not part of the replicas' shared hash
// and not checkpointed: each worker's trainer state is its own (the trainer saves it with
// its own checkpoints), and a joiner starts from the donor's.
struct trainer_state {
    std::string name;
    std::function<std::string()> save;
    std::function<void(const std::string&)> load;
};

// What an elastic communicator holds to carry a trainer_state to joiners (comm::elastic_local
// and comm::elastic_group derive from it). Set it before the algorithm is built: a joiner
// takes the state inside the algorithm's constructor.
class trainer_state_slot {
public:
    void carry_trainer_state(trainer_state s) {
        require(!s.name.empty() && s.name.find('\n') == std::string::npos,
                "comm: carry_trainer_state: the name must be a non-empty line, got '", s.name, "'");
        require(static_cast<bool>(s.save) && static_cast<bool>(s.load),
                "comm: carry_trainer_state: save and load must both be set");
        carried_ = std::move(s);
    }
    // The trainer state carried to joiners, or null.
    const trainer_state* carried_trainer_state() const { return carried_.save ? &carried_ : nullptr; }

private:
    trainer_state carried_;
};

} // namespace comm

TRICKLE_NAMESPACE_END
