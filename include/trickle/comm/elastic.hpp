// trickle/comm/elastic.hpp: a world whose membership changes between collectives.
//
// Workers have stable ids (0 .. capacity-1). At any time the world has a *view*: an epoch
// number and the ids of its members, in ascending order; a member's rank is its position in
// the view, and every collective runs over the view. When a member fails (it leaves, its
// thread throws, or it stops answering for longer than the timeout), every member blocked
// in, or later entering, a collective of that epoch throws trickle::peer_failure. The
// survivors then call renew(): a rendezvous of the view's members that closes when all live
// members have arrived, or `timeout` after the first arrival, whichever is first. It drops
// the members that did not arrive, admits the workers waiting in join(), and opens a new
// epoch when anything changed. renew() is also the step-boundary check of the algorithms
// (every outer step for DiLoCo, every exchange for SPARTA): nothing changes when every
// member arrives and nobody is waiting to join.
//
// comm::elastic_local is the in-process form (threads, like comm::local, whose collectives
// it runs over one local_world per epoch, so results are comm::local's bit for bit). It
// supports failure injection for tests and simulations: fail(id) drops a worker as if its
// process died, run_elastic() fails a worker whose thread throws, and
// corrupt_next_broadcast(id) flips a bit of the next broadcast a worker receives (a damaged
// state transfer).
#pragma once

#include <trickle/comm/communicator.hpp>
#include <trickle/comm/local.hpp>
#include <trickle/comm/view.hpp>
#include <trickle/config.hpp>
#include <trickle/error.hpp>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

TRICKLE_NAMESPACE_BEGIN

namespace comm {

class elastic_local;

// The shared state of up to `capacity` in-process workers. The first `initial` ids
// (0 .. initial-1) form epoch 0; the others can join later.
class elastic_local_world {
public:
    // timeout > 0: how long a collective waits for a peer before declaring it failed, and
    // how long a renewal waits for the view's members after the first arrival.
    elastic_local_world(int capacity, std::chrono::milliseconds timeout, int initial = -1)
        : capacity_(capacity), timeout_(timeout) {
        require(capacity >= 1, "comm::elastic_local_world: capacity must be >= 1, got ", capacity);
        require(timeout.count() > 0, "comm::elastic_local_world: the timeout must be > 0 ms (a dead peer must never ",
                "hang its survivors), got ", timeout.count());
        if (initial < 0) initial = capacity;
        require(initial >= 1 && initial <= capacity, "comm::elastic_local_world: initial members must be in [1, ",
                capacity, "], got ", initial);
        for (int i = 0; i < initial; ++i) members_.push_back(i);
        world_ = std::make_shared<local_world>(initial, timeout_);
        state_.assign(static_cast<std::size_t>(capacity), worker_state::outside);
        for (int i = 0; i < initial; ++i) state_[static_cast<std::size_t>(i)] = worker_state::member;
        corrupt_.assign(static_cast<std::size_t>(capacity), false);
    }

    elastic_local_world(const elastic_local_world&) = delete;
    elastic_local_world& operator=(const elastic_local_world&) = delete;

    int capacity() const { return capacity_; }
    std::chrono::milliseconds timeout() const { return timeout_; }

    // The handle of worker `id`, a member of the current view or a worker that will join().
    // Use each from one thread only.
    elastic_local worker(int id);

    // The current view (for tests and drivers; workers use their handle's view).
    std::vector<int> members() const {
        std::lock_guard lock(mutex_);
        return members_;
    }
    std::uint64_t epoch() const {
        std::lock_guard lock(mutex_);
        return epoch_;
    }
    // Workers waiting in join().
    int joiners_waiting() const {
        std::lock_guard lock(mutex_);
        return static_cast<int>(joiners_.size());
    }

    // Failure injection: worker `id` is gone, as if its process died. Peers blocked in a
    // collective of the current epoch throw peer_failure at once; the next renewal drops it.
    // Its handle throws on every later call. It may join() again through a new handle.
    void fail(int id, const std::string& why = "failed") {
        std::lock_guard lock(mutex_);
        check_id(id, "fail");
        mark_dead(id, why);
    }

    // Failure injection: the next broadcast worker `id` receives arrives with one bit flipped.
    void corrupt_next_broadcast(int id) {
        std::lock_guard lock(mutex_);
        check_id(id, "corrupt_next_broadcast");
        corrupt_[static_cast<std::size_t>(id)] = true;
    }

private:
    friend class elastic_local;
    enum class worker_state { outside, member, joining, dead };

    void check_id(int id, const char* what) const {
        if (id < 0 || id >= capacity_)
            throw invalid_argument(detail::concat("comm::elastic_local_world::", what, ": id ", id, " out of range [0, ",
                                                  capacity_, ")"));
    }

    // Under mutex_.
    void mark_dead(int id, const std::string& why) {
        auto& st = state_[static_cast<std::size_t>(id)];
        if (st == worker_state::member) world_->abort(detail::concat("worker ", id, " ", why));
        if (st == worker_state::joining) joiners_.erase(id);
        st = worker_state::dead;
        cv_.notify_all();
    }

    // Under mutex_: closes the current renewal. The view becomes the arrivals plus the
    // waiting joiners; a new epoch (and a new local_world) opens when anything changed or
    // the current world was aborted by a failure.
    void decide() {
        membership_change ch;
        std::vector<int> next;
        for (int id : arrived_) // an arrival that failed while waiting is not carried over
            if (state_[static_cast<std::size_t>(id)] == worker_state::member) next.push_back(id);
        for (int id : members_)
            if (std::find(next.begin(), next.end(), id) == next.end()) {
                ch.left.push_back(id);
                if (state_[static_cast<std::size_t>(id)] != worker_state::dead)
                    state_[static_cast<std::size_t>(id)] = worker_state::dead; // silent past the timeout
            }
        for (int id : joiners_) {
            next.push_back(id);
            ch.joined.push_back(id);
            state_[static_cast<std::size_t>(id)] = worker_state::member;
        }
        joiners_.clear();
        std::sort(next.begin(), next.end());
        if (ch.changed() || world_->aborted()) {
            ++epoch_;
            world_ = std::make_shared<local_world>(static_cast<int>(next.size()), timeout_);
        }
        members_ = next;
        ch.epoch = epoch_;
        ch.members = members_;
        last_ = ch;
        arrived_.clear();
        ++round_;
        cv_.notify_all();
    }

    int capacity_;
    std::chrono::milliseconds timeout_;
    mutable std::mutex mutex_;
    std::condition_variable cv_;
    std::uint64_t epoch_ = 0;
    std::vector<int> members_;
    std::shared_ptr<local_world> world_;
    std::vector<worker_state> state_;
    std::vector<bool> corrupt_;
    std::set<int> joiners_;
    std::set<int> arrived_;
    std::chrono::steady_clock::time_point deadline_{};
    std::uint64_t round_ = 0; // renewals closed so far
    membership_change last_;
};

// One worker's handle on an elastic_local_world: a trickle::communicator (and
// byte_communicator) over host memory whose rank and size are those of its current view.
class elastic_local : public trainer_state_slot {
public:
    using memory_space = host_space;

    int id() const { return id_; }
    std::uint64_t epoch() const { return epoch_; }
    int rank() const { return comm_ ? comm_->rank() : -1; }
    int size() const { return comm_ ? comm_->size() : 0; }
    const std::vector<int>& members() const { return members_; }
    // The change that made the current view (the last renew() or the join()).
    const membership_change& last_change() const { return last_; }
    // Bytes over every epoch this handle took part in.
    traffic_counters traffic() const {
        traffic_counters t = before_;
        if (comm_) t += comm_->traffic();
        return t;
    }
    void synchronize() {}

    void all_reduce_sum(float* data, std::size_t n) {
        guard("all_reduce_sum", [&] { comm_->all_reduce_sum(data, n); });
    }
    void all_gather_bytes(const void* send, void* recv, std::size_t bytes) {
        guard("all_gather_bytes", [&] { comm_->all_gather_bytes(send, recv, bytes); });
    }
    void all_gather(const void* send, void* recv, std::size_t bytes) {
        guard("all_gather", [&] { comm_->all_gather(send, recv, bytes); });
    }
    void all_to_all(const void* send, void* recv, std::size_t bytes) {
        guard("all_to_all", [&] { comm_->all_to_all(send, recv, bytes); });
    }
    void send_recv(const float* send, std::size_t n, int dst, float* recv, std::size_t m, int src) {
        guard("send_recv", [&] { comm_->send_recv(send, n, dst, recv, m, src); });
    }
    void broadcast(float* data, std::size_t n, int root) {
        guard("broadcast", [&] { comm_->broadcast(data, n, root); });
        if (n == 0) return;
        std::lock_guard lock(w_->mutex_);
        auto&& flag = w_->corrupt_[static_cast<std::size_t>(id_)];
        if (flag && rank() != root) {
            flag = false;
            unsigned char* b = reinterpret_cast<unsigned char*>(data);
            b[(n * sizeof(float)) / 2] ^= 0x10;
        }
    }
    void barrier() {
        guard("barrier", [&] { comm_->barrier(); });
    }

    // Collective over the view (see the file's comment): returns the next view. Throws
    // peer_failure if this worker was itself dropped (it arrived after the renewal closed,
    // or was declared failed): it must join() again through a new handle.
    membership_change renew() {
        auto& w = *w_;
        std::unique_lock lock(w.mutex_);
        check_alive(lock, "renew");
        if (w.epoch_ != epoch_ || std::find(w.members_.begin(), w.members_.end(), id_) == w.members_.end())
            throw peer_failure(detail::concat("comm::elastic_local renew: worker ", id_,
                                              " was dropped from the membership (epoch ", w.epoch_,
                                              "); join again with a new handle"));
        const std::uint64_t round = w.round_;
        if (w.arrived_.empty()) w.deadline_ = std::chrono::steady_clock::now() + w.timeout_;
        w.arrived_.insert(id_);
        for (;;) {
            if (w.round_ != round) break;
            // A member that failed is not waited for; nor is one whose restart already waits
            // in join() (its old incarnation is gone: it is dropped and admitted again).
            bool all = true;
            for (int id : w.members_) {
                const worker_state st = w.state_[static_cast<std::size_t>(id)];
                all = all && (w.arrived_.count(id) || st == worker_state::dead || st == worker_state::joining);
            }
            if (all || std::chrono::steady_clock::now() >= w.deadline_) {
                w.decide();
                break;
            }
            w.cv_.wait_until(lock, w.deadline_);
        }
        adopt_if_member(w, "renew");
        return last_;
    }

    // A worker outside the view (new, or restarted after a failure with its old id) waits
    // until a renewal admits it, at most `wait` (then comm_error, and it is not admitted).
    membership_change join(std::chrono::milliseconds wait = std::chrono::minutes(10)) {
        auto& w = *w_;
        std::unique_lock lock(w.mutex_);
        auto& st = w.state_[static_cast<std::size_t>(id_)];
        if (st == worker_state::member)
            throw invalid_argument(detail::concat("comm::elastic_local join: worker ", id_, " is already a member"));
        if (st == worker_state::joining)
            throw invalid_argument(detail::concat("comm::elastic_local join: worker ", id_, " is already joining"));
        st = worker_state::joining;
        w.joiners_.insert(id_);
        w.cv_.notify_all();
        const std::uint64_t round = w.round_;
        const auto deadline = std::chrono::steady_clock::now() + wait;
        for (;;) {
            if (w.round_ != round && st == worker_state::member) break;
            if (st == worker_state::dead)
                throw peer_failure(detail::concat("comm::elastic_local join: worker ", id_, " failed while joining"));
            if (std::chrono::steady_clock::now() >= deadline) {
                w.joiners_.erase(id_);
                st = worker_state::outside;
                throw comm_error(detail::concat("comm::elastic_local join: worker ", id_, " was not admitted within ",
                                                wait.count(), " ms (no renewal of the view happened)"));
            }
            w.cv_.wait_until(lock, deadline);
        }
        dead_ = false;
        adopt_if_member(w, "join");
        return last_;
    }

    // This worker leaves for good: its peers' collectives of the epoch throw peer_failure,
    // and the next renewal drops it without waiting.
    void leave() {
        std::lock_guard lock(w_->mutex_);
        if (!dead_) w_->mark_dead(id_, "left");
        dead_ = true;
    }

private:
    friend class elastic_local_world;
    using worker_state = elastic_local_world::worker_state;
    elastic_local(elastic_local_world* w, int id) : w_(w), id_(id) {
        std::lock_guard lock(w->mutex_);
        if (w->state_[static_cast<std::size_t>(id)] == worker_state::member) adopt(current(*w));
    }

    static membership_change current(const elastic_local_world& w) {
        membership_change ch;
        ch.epoch = w.epoch_;
        ch.members = w.members_;
        return ch;
    }

    // Under the world's mutex: takes the view the last renewal made, unless this worker is
    // not in it (it was dropped by a later renewal while it had not woken up yet).
    void adopt_if_member(const elastic_local_world& w, const char* op) {
        if (std::find(w.last_.members.begin(), w.last_.members.end(), id_) == w.last_.members.end())
            throw peer_failure(detail::concat("comm::elastic_local ", op, ": worker ", id_,
                                              " was dropped from the membership (epoch ", w.epoch_,
                                              "); join again with a new handle"));
        adopt(w.last_);
    }

    // Under the world's mutex: takes the view `ch` (and the epoch's local_world).
    void adopt(const membership_change& ch) {
        auto& w = *w_;
        if (comm_ && ch.epoch == epoch_ && world_ == w.world_) {
            last_ = ch;
            return;
        }
        if (comm_) before_ += comm_->traffic();
        const auto pos = std::find(ch.members.begin(), ch.members.end(), id_);
        world_ = w.world_;
        comm_ = std::make_unique<local>(world_->rank(static_cast<int>(pos - ch.members.begin())));
        epoch_ = ch.epoch;
        members_ = ch.members;
        last_ = ch;
    }

    void check_alive(std::unique_lock<std::mutex>&, const char* op) const {
        if (dead_ || w_->state_[static_cast<std::size_t>(id_)] == worker_state::dead)
            throw peer_failure(detail::concat("comm::elastic_local ", op, ": worker ", id_,
                                              " has failed or left; join again with a new handle"));
    }

    template <class Fn>
    void guard(const char* op, Fn&& fn) {
        {
            std::unique_lock lock(w_->mutex_);
            check_alive(lock, op);
            if (!comm_)
                throw invalid_argument(detail::concat("comm::elastic_local ", op, ": worker ", id_,
                                                      " is not a member yet (call join())"));
        }
        try {
            fn();
        } catch (const peer_failure&) {
            throw;
        } catch (const comm_error& e) {
            // A failed, departed or silent peer aborted this epoch's world; other comm_errors
            // (arguments that differ between ranks) stay what they are.
            if (!world_->aborted()) throw;
            throw peer_failure(detail::concat("epoch ", epoch_, ": ", e.what()));
        }
    }

    elastic_local_world* w_;
    int id_;
    bool dead_ = false;
    std::uint64_t epoch_ = 0;
    std::vector<int> members_;
    membership_change last_;
    std::shared_ptr<local_world> world_;
    std::unique_ptr<local> comm_;
    traffic_counters before_{};
};

inline elastic_local elastic_local_world::worker(int id) {
    check_id(id, "worker");
    return elastic_local(this, id);
}

// Runs fn(comm) for every worker of the world's current view, one thread each, and waits
// for all. A worker whose fn throws is failed (as by world.fail), so its peers carry on
// without it instead of aborting: the in-process form of a process that crashed. Returns
// each worker's exception, by id (null for those that finished).
template <class Fn>
std::vector<std::exception_ptr> run_elastic(elastic_local_world& world, Fn&& fn) {
    const std::vector<int> ids = world.members();
    std::vector<std::exception_ptr> errors(static_cast<std::size_t>(world.capacity()));
    std::vector<std::thread> threads;
    threads.reserve(ids.size());
    for (int id : ids)
        threads.emplace_back([&, id] {
            try {
                elastic_local c = world.worker(id);
                fn(c);
            } catch (...) {
                errors[static_cast<std::size_t>(id)] = std::current_exception();
                world.fail(id, "failed (its thread threw)");
            }
        });
    for (auto& t : threads) t.join();
    return errors;
}

static_assert(byte_communicator<elastic_local>);
static_assert(elastic_communicator<elastic_local>);

} // namespace comm

TRICKLE_NAMESPACE_END
