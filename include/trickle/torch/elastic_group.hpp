// trickle/torch/elastic_group.hpp: comm::elastic_group, an elastic communicator across
// processes and machines, its view in a torch.distributed key-value store (c10d::TCPStore)
// and each epoch's collectives on a Gloo process group made for that epoch.
//
// Part of the trickle::torch component. It satisfies comm::elastic_communicator, so SPARTA,
// DiLoCo and SPARTA + DiLoCo run over it the protocol they run over comm::elastic_local
// (algorithm/membership.hpp, docs/elastic.md), unchanged. Nothing in it is a transport or
// a consensus service of its own: the view is agreed through the store's atomic
// compare-and-set (one decision per renewal, whoever writes first), and the bytes move
// through c10d's ProcessGroupGloo, wrapped in comm::process_group (so the bits are
// comm::local's and the byte counts the same cost model's).
//
// Workers have stable ids >= 0. The first incarnation of ids 0 .. initial-1 forms epoch 0;
// any other process (a new id, or a restarted one with its old id) is outside the view
// until it join()s. Keys, under "<job>/" in the store:
//   inc/<id>           the incarnation counter of worker id (add: a restart or a leave
//                      bumps it, so a renewal stops waiting for the old incarnation)
//   r/<e>/<k>/...      the k-th renewal of epoch e: arrivals, their count, the decision
//   j/n, j/<i>         the queue of join requests ("id incarnation")
//   adm/<id>/<inc>     a joiner's admission (the decision that admitted it)
//   b/<e>              epoch e saw a failure: the next renewal opens a new epoch
//   c/<e>/<k>/...      the k-th commit vote of epoch e
//   g/<e>/...          the Gloo rendezvous of epoch e's process group
//
// Failures. A peer that dies (SIGKILL, a lost machine) while others are in a collective
// closes its sockets, so Gloo fails their operation at once; one that stops answering
// fails it after the timeout. Either way the survivors throw trickle::peer_failure,
// marking the epoch broken and destroying its process group, which unblocks any peer
// still waiting on them. At the next renew() they drop every member that does not arrive
// within the timeout (or whose incarnation changed) and form a new epoch's group.
//
// Commit. Across processes a collective is not all-or-nothing: a peer can die after some
// survivors received its data and before others did. The engines therefore call commit()
// (through the round protocol) after a round's collectives and before it changes any
// state: a vote in the store that succeeds on every member or on none, so a round is
// applied by every survivor or by none, as over comm::elastic_local.
#pragma once

#include <trickle/comm/communicator.hpp>
#include <trickle/comm/view.hpp>
#include <trickle/config.hpp>
#include <trickle/core/memory_space.hpp>
#include <trickle/error.hpp>
#include <trickle/torch/gloo.hpp>
#include <trickle/torch/process_group.hpp>

#if !defined(USE_C10D_GLOO)
#error "trickle/torch/elastic_group.hpp needs c10d's Gloo process group: compile with -DUSE_C10D_GLOO (torch's CMake targets define it; a torch.utils.cpp_extension build must add it)"
#endif

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

TRICKLE_NAMESPACE_BEGIN

namespace detail {

// A TCPStore on `host`:`port`: a client, or (server) the store itself.
inline c10::intrusive_ptr<c10d::TCPStore> tcp_store(const std::string& host, int port, bool server,
                                                    std::chrono::milliseconds timeout) {
    c10d::TCPStoreOptions o;
    o.port = static_cast<std::uint16_t>(port);
    o.isServer = server;
    o.waitWorkers = false;
    o.timeout = timeout;
    return c10::make_intrusive<c10d::TCPStore>(host, o);
}

// Whether something accepts a TCP connection at host:port within `wait` (a probe, closed at
// once).
inline bool port_accepts(const std::string& host, int port, std::chrono::milliseconds wait) {
    addrinfo hints{};
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    if (::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) != 0) return false;
    bool ok = false;
    for (const addrinfo* a = found; a != nullptr && !ok; a = a->ai_next) {
        const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0) continue;
        if (::connect(fd, a->ai_addr, a->ai_addrlen) == 0) ok = true;
        else if (errno == EINPROGRESS) {
            pollfd p{fd, POLLOUT, 0};
            int err = 0;
            socklen_t len = sizeof err;
            ok = ::poll(&p, 1, static_cast<int>(wait.count())) == 1 &&
                 ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0;
        }
        ::close(fd);
    }
    ::freeaddrinfo(found);
    return ok;
}

// An exception's text, without c10's backtrace.
inline std::string what_of(const std::exception& e) {
    const auto* c = dynamic_cast<const c10::Error*>(&e);
    return c ? c->what_without_backtrace() : e.what();
}

} // namespace detail

namespace comm {

// Connects to the key-value store that holds the elastic view (a c10d::TCPStore hosted
// by the launcher, by `trickle-store`, or by `python3 -m trickle.store`). Throws
// comm_error naming the address when no store answers within `timeout`.
inline c10::intrusive_ptr<c10d::Store> connect_store(const std::string& host, int port,
                                                     std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
    require(!host.empty(), "comm::connect_store: the host is empty");
    require(port > 0 && port < 65536, "comm::connect_store: port ", port, " out of range [1, 65535]");
    require(timeout.count() > 0, "comm::connect_store: the timeout must be > 0 ms, got ", timeout.count());
    try {
        return detail::tcp_store(host, port, false, timeout);
    } catch (const std::exception& e) {
        throw comm_error(detail::concat("comm::connect_store: no store answered at ", host, ":", port, " within ",
                                        timeout.count(), " ms (start one: trickle-store --port ", port,
                                        ", or python3 -m trickle.store --port ", port, "): ", detail::what_of(e)));
    }
}

// Hosts a store in this process (the launcher's, or trickle-store's): a c10d::TCPStore
// server on `port` (0: any free port; port() of the result says which).
inline c10::intrusive_ptr<c10d::TCPStore> host_store(int port, std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
    require(port >= 0 && port < 65536, "comm::host_store: port ", port, " out of range [0, 65535]");
    try {
        return detail::tcp_store("127.0.0.1", port, true, timeout);
    } catch (const std::exception& e) {
        throw comm_error(detail::concat("comm::host_store: cannot serve a store on port ", port, ": ", detail::what_of(e)));
    }
}

struct elastic_group_options {
    // Ids 0 .. initial-1 (their first incarnations) form epoch 0; required >= 1, the same
    // on every worker.
    int initial = 0;
    // How long a collective waits for a peer, a renewal for the view's members after this
    // worker arrived, and a commit vote for the others' votes; > 0.
    std::chrono::milliseconds timeout{10000};
    // Prefix of every key (several jobs may share one store).
    std::string job = "trickle";
    // The address Gloo listens on ("": the machine's hostname, as c10d's default device).
    std::string hostname{};
    // 0: off. Otherwise (> 0, at most the timeout; needs a TCPStore) each worker beats a
    // counter in the store every liveness / 4 from a thread of its own, and a renewal stops
    // waiting for a member whose counter has not moved for `liveness`: a killed worker is
    // dropped after about `liveness` instead of the timeout, while a live but slow one is
    // still waited for up to the timeout. A worker starved of CPU for longer than
    // `liveness` is dropped too (it joins again), so leave a margin.
    std::chrono::milliseconds liveness{0};
    // How long the first members wait for each other at the start (processes started
    // seconds apart, on several machines), before epoch 0's group is formed; > 0. Past it:
    // comm_error naming the ids that never started.
    std::chrono::milliseconds start_timeout{std::chrono::minutes(5)};
    // How long join() waits for a renewal to admit this worker (the members renew at their
    // next round: a DiLoCo outer step, a SPARTA exchange); > 0. Past it: comm_error, and
    // the request is withdrawn.
    std::chrono::milliseconds join_timeout{std::chrono::minutes(10)};
    // Renew the view through the store at every k-th renew() of an epoch only (k >= 1, the
    // same on every worker: a worker with another k is refused at construction). The
    // calls between return the current view at no cost, so SPARTA, which renews at every
    // exchange, pays the store's round trips once every k exchanges. A failure still ends
    // the epoch at once: the round that saw it is rolled back on every member (the commit
    // vote) and the next renew() is a real one. What waits: a joiner is admitted, and a
    // member that stopped answering without closing its sockets is dropped, at the next
    // real renewal (or, for the latter, at the collective's timeout), up to k rounds later.
    int renew_every = 1;
    // 0: off (a store that fails ends the job: every worker raises comm_error naming it).
    // Otherwise (> 0; needs a TCPStore) a worker whose store operation fails waits up to this
    // long for a store to answer again at the same address (a supervisor restarting
    // trickle-store or python3 -m trickle.store), then writes back what it knows (the view,
    // its epoch, the incarnations, the join queue's position, the last decisions it read)
    // and goes on: the round in flight is finished or redone, no worker is lost (see "A
    // store that comes back" in docs/elastic.md). Past it: comm_error naming the store.
    std::chrono::milliseconds store_recovery{0};
};

// One worker's handle (see the file's comment): a trickle::communicator and
// byte_communicator over host memory, rank and size those of its current view.
class elastic_group : public trainer_state_slot {
public:
    using memory_space = host_space;

    elastic_group(c10::intrusive_ptr<c10d::Store> store, int id, elastic_group_options o) : o_(std::move(o)), id_(id) {
        require(store.defined(), "comm::elastic_group: the store is null");
        require(id >= 0, "comm::elastic_group: the worker id must be >= 0, got ", id);
        require(o_.initial >= 1, "comm::elastic_group: options.initial (the workers of epoch 0) must be >= 1, got ",
                o_.initial);
        require(o_.timeout.count() > 0, "comm::elastic_group: the timeout must be > 0 ms (a dead peer must never ",
                "hang its survivors), got ", o_.timeout.count());
        require(!o_.job.empty() && o_.job.find('/') == std::string::npos,
                "comm::elastic_group: the job name must be non-empty and without '/', got '", o_.job, "'");
        require(o_.start_timeout.count() > 0, "comm::elastic_group: start_timeout must be > 0 ms, got ",
                o_.start_timeout.count());
        require(o_.join_timeout.count() > 0, "comm::elastic_group: join_timeout must be > 0 ms, got ",
                o_.join_timeout.count());
        require(o_.liveness.count() >= 0 && o_.liveness <= o_.timeout,
                "comm::elastic_group: liveness must be in [0, timeout] ms (0: off), got ", o_.liveness.count());
        require(o_.renew_every >= 1, "comm::elastic_group: renew_every must be >= 1, got ", o_.renew_every);
        require(o_.liveness.count() == 0 || dynamic_cast<const c10d::TCPStore*>(store.get()) != nullptr,
                "comm::elastic_group: liveness needs a c10d::TCPStore (its heartbeat uses a client of its own)");
        require(o_.store_recovery.count() >= 0, "comm::elastic_group: store_recovery must be >= 0 ms (0: off), got ",
                o_.store_recovery.count());
        require(o_.store_recovery.count() == 0 || dynamic_cast<const c10d::TCPStore*>(store.get()) != nullptr,
                "comm::elastic_group: store_recovery needs a c10d::TCPStore (a worker reconnects to its address)");
        ignore_sigpipe();
        user_store_ = store;
        if (const auto* tcp = dynamic_cast<const c10d::TCPStore*>(store.get()); tcp != nullptr)
            store_name_ = detail::concat(" at ", tcp->getHost(), ":", tcp->getPort());
        store_ = c10::make_intrusive<c10d::PrefixStore>(o_.job, std::move(store));
        if (o_.liveness.count() > 0) refuse_live_duplicate();
        refuse_other_renewal_interval();
        inc_ = store_op("register", [&] { return store_->add(detail::concat("inc/", id_), 1); });
        if (inc_ > 1) end_of_incarnation_counted();
        if (o_.store_recovery.count() > 0) life_ = store_op("register", [&] { return cas("life", new_life()); });
        if (o_.liveness.count() > 0) start_heartbeat();
        // (A store that came back and was written back says "resumed": the job runs, so a
        // first incarnation registering now joins it.)
        if (inc_ == 1 && id_ < o_.initial && !store_op("register", [&] { return store_->check({"resumed"}); })) {
            try {
                await_start();
                view v;
                for (int i = 0; i < o_.initial; ++i) v.members.push_back({i, 1});
                membership_change ch;
                ch.members = v.ids();
                adopt(v, ch, "comm::elastic_group");
            } catch (const trickle::error& e) {
                // The first epoch could not form: no member holds a state a joiner could
                // take, so the whole start fails. Said in the store, so that a restart
                // waiting to join learns it at once instead of at its join_timeout.
                if (!superseded_) fail_job(e.what());
                stop_heartbeat();
                throw;
            }
        }
        recoverable_ = o_.store_recovery.count() > 0;
    }

    elastic_group(const elastic_group&) = delete;
    elastic_group& operator=(const elastic_group&) = delete;

    ~elastic_group() {
        stop_heartbeat();
        try {
            pg_.reset();
        } catch (...) {
        }
    }

    // Whether this worker is a member of the current view: an initial member's first
    // incarnation, or a joiner once admitted. A worker that is not calls join().
    bool member() const { return pg_ != nullptr && !dead_; }
    int id() const { return id_; }
    std::int64_t incarnation() const { return inc_; }
    std::uint64_t epoch() const { return view_.epoch; }
    int rank() const { return rank_; }
    int size() const { return static_cast<int>(view_.members.size()); }
    std::vector<int> members() const { return view_.ids(); }
    const membership_change& last_change() const { return last_; }
    // How many times this worker found the store restarted and wrote back what it knew
    // (store_recovery).
    std::uint64_t store_recoveries() const { return recoveries_; }
    // The time those took, in seconds: from the failed operation to the store given back
    // what the view knew (the outage as this worker saw it, then the write-back).
    double store_recovery_seconds() const { return recovery_seconds_; }
    std::chrono::milliseconds timeout() const { return o_.timeout; }
    // Join requests queued and not yet taken by a renewal of this worker's view (for
    // drivers and tests, as elastic_local_world::joiners_waiting).
    int joiners_queued() {
        return static_cast<int>(store_op("joiners_queued", [&] { return store_->add("j/n", 0); }) - view_.consumed);
    }
    traffic_counters traffic() const {
        traffic_counters t = before_;
        if (pg_) t += pg_->traffic();
        return t;
    }
    void synchronize() {}

    void all_reduce_sum(float* data, std::size_t n) {
        guard("all_reduce_sum", [&] { pg_->all_reduce_sum(data, n); });
    }
    void all_gather_bytes(const void* send, void* recv, std::size_t bytes) {
        guard("all_gather_bytes", [&] { pg_->all_gather_bytes(send, recv, bytes); });
    }
    void all_gather(const void* send, void* recv, std::size_t bytes) {
        guard("all_gather", [&] { pg_->all_gather(send, recv, bytes); });
    }
    void all_to_all(const void* send, void* recv, std::size_t bytes) {
        guard("all_to_all", [&] { pg_->all_to_all(send, recv, bytes); });
    }
    void send_recv(const float* send, std::size_t n, int dst, float* recv, std::size_t m, int src) {
        guard("send_recv", [&] { pg_->send_recv(send, n, dst, recv, m, src); });
    }
    void broadcast(float* data, std::size_t n, int root) {
        guard("broadcast", [&] { pg_->broadcast(data, n, root); });
    }
    void barrier() {
        guard("barrier", [&] { pg_->barrier(); });
    }

    // Collective over the view: the next view. Closes when every member of the view has
    // arrived (or its incarnation ended: it restarted or left), or `timeout` after this
    // worker arrived; drops the members that did not arrive, admits the join requests
    // queued so far, and opens a new epoch (a new process group) when anything changed or
    // the epoch saw a failure. Throws peer_failure when this worker was dropped (it arrived
    // after the renewal closed): it must join() again through a new handle.
    membership_change renew() {
        check_usable("renew");
        renewed_ = true;
        // renew_every: the calls between real renewals keep the view (see the option). Only
        // after a renewal that changed nothing (every member read the same one, so they all
        // agree): one that admitted joiners is followed by a real one, which drops any that
        // the welcome refused.
        if (pg_ && !last_.changed() && calls_ + 1 < static_cast<std::uint64_t>(o_.renew_every)) {
            ++calls_;
            return last_;
        }
        calls_ = 0;
        const std::string R = detail::concat("r/", view_.epoch, "/", renewals_, "/");
        bool wrote = false;
        // (Each try its own deadline: after a store came back, the members arrive again.)
        std::string d = store_op("renew", [&] {
            const auto deadline = clock::now() + o_.timeout;
            std::int64_t n = store_->add(R + "n", 1);
            const auto size = static_cast<std::int64_t>(view_.members.size());
            // The last to arrive decides at once; the others leave their arrival for a
            // decider that closes the renewal at its timeout.
            if (n >= size) return decide(R, true);
            store_->set(arrival(R, id_), bytes("1"));
            wrote = true;
            std::vector<std::pair<std::int64_t, clock::time_point>> beats;
            const auto arrived = [&](const entry& m) {
                return store_->check({arrival(R, m.id)}) || incarnation_of(m.id) != m.inc;
            };
            for (int round = 0;; pause(round)) {
                if (store_->check({R + "d"})) return text(store_->get(R + "d"));
                const bool everyone = n >= size;
                if (everyone || all_present(arrived, beats) || clock::now() >= deadline) return decide(R, everyone);
                n = store_->add(R + "n", 0);
            }
        });
        ++renewals_;
        read_renewal_ = {R + "d", d};
        const view next = view::parse(d);
        membership_change ch = change_to(next);
        admit(next);
        if (wrote)
            store_op("renew", [&] {
                store_->deleteKey(arrival(R, id_));
                return 0;
            });
        if (!next.has(id_)) {
            drop();
            throw peer_failure(detail::concat("comm::elastic_group renew: worker ", id_,
                                              " was dropped from the membership (epoch ", next.epoch,
                                              "); join again with a new handle"));
        }
        if (next.epoch != view_.epoch) adopt(next, ch, "comm::elastic_group renew");
        else {
            view_ = next;
            last_ = ch;
        }
        return last_;
    }

    // A worker outside the view (new, or restarted with its old id) queues a join request
    // and waits until a renewal admits it, at most `wait` (without it, the options'
    // join_timeout; then comm_error; it withdraws its request by ending its incarnation,
    // so join through a new handle to try again).
    membership_change join() { return join(o_.join_timeout); }
    membership_change join(std::chrono::milliseconds wait) {
        if (member())
            throw invalid_argument(detail::concat("comm::elastic_group join: worker ", id_, " is already a member"));
        if (joined_ || dead_)
            throw invalid_argument(detail::concat("comm::elastic_group join: worker ", id_,
                                                  " already joined or left through this handle; use a new handle"));
        joined_ = true;
        const std::string A = detail::concat("adm/", id_, "/", inc_);
        const auto deadline = clock::now() + wait;
        std::string d = store_op("join", [&] {
            // (Tried again after a store came back: the request is queued again unless a
            // member wrote the admission back.)
            std::int64_t i = -1;
            const auto queue = [&] {
                i = store_->add("j/n", 1) - 1;
                store_->set(detail::concat("j/", i), bytes(detail::concat(id_, " ", inc_)));
            };
            if (!store_->check({A})) queue();
            for (int round = 0; !store_->check({A}); pause(round)) {
                if (round % 64 == 63) check_not_superseded(false);
                // A request queued on a store that came back, below the position the members
                // wrote back (j/floor), is never read: it is queued again.
                if (round % 64 == 63 && i >= 0 && store_->check({"j/floor"}) &&
                    i < std::stoll(text(store_->get("j/floor"))))
                    queue();
                if (round % 64 == 63 && store_->check({"failed"}))
                    throw comm_error(detail::concat("comm::elastic_group join: worker ", id_,
                                                    " cannot join: the job's start failed (",
                                                    text(store_->get("failed")), ")"));
                if (clock::now() >= deadline) {
                    store_->add(detail::concat("inc/", id_), 1); // withdraw: a renewal ignores an ended incarnation
                    end_of_incarnation_counted();
                    dead_ = true;
                    throw comm_error(detail::concat("comm::elastic_group join: worker ", id_,
                                                    " was not admitted within ", wait.count(),
                                                    " ms (no renewal of the view happened)"));
                }
            }
            return text(store_->get(A));
        });
        admitted_ = {A, d};
        const view next = view::parse(d);
        adopt(next, change_to(next), "comm::elastic_group join");
        return last_;
    }

    // This worker leaves for good: its incarnation ends (the next renewal does not wait for
    // it) and its process group is destroyed (peers in a collective with it fail at once).
    void leave() {
        if (dead_) return;
        stop_heartbeat();
        drop();
        try {
            store_->add(detail::concat("inc/", id_), 1);
            store_->add("inc/changes", 1);
        } catch (...) {
        }
    }

    // The commit vote after a round's collectives (see the file's comment): returns when
    // every member voted, throws peer_failure (the round must not be applied) when one did
    // not within the timeout or the epoch saw a failure.
    void commit() {
        check_usable("commit");
        if (!pg_)
            throw peer_failure(detail::concat("comm::elastic_group commit: epoch ", view_.epoch, " is broken"));
        const std::string C = detail::concat("c/", view_.epoch, "/", commits_, "/");
        ++commits_;
        if (size() == 1) return;
        const std::string d = store_op("commit", [&] {
            const auto deadline = clock::now() + o_.timeout;
            const std::int64_t n = store_->add(C + "n", 1);
            if (n >= static_cast<std::int64_t>(size())) return cas(C + "d", "1");
            for (int round = 0;; pause(round)) {
                if (store_->check({C + "d"})) return text(store_->get(C + "d"));
                if (clock::now() >= deadline) return cas(C + "d", "0");
            }
        });
        read_commit_ = {C + "d", d};
        if (d != "1") {
            mark_broken();
            throw peer_failure(detail::concat("comm::elastic_group commit: epoch ", view_.epoch,
                                              ": a peer failed before confirming the round (not applied)"));
        }
    }

private:
    using clock = std::chrono::steady_clock;

    struct entry {
        int id;
        std::int64_t inc;
    };
    // A view, as a decision in the store writes it:
    //   "<epoch> <joins consumed> <restarts> <n> <id> <inc> ... <j> <joined ids> <l> <left ids>"
    // <restarts>: the store's count of ended incarnations (inc/changes) as its decider read it
    // before it read any member's incarnation.
    struct view {
        std::uint64_t epoch = 0;
        std::int64_t consumed = 0;
        std::int64_t changes = 0;
        std::vector<entry> members;
        std::vector<int> joined, left;
        std::vector<int> ids() const {
            std::vector<int> out;
            for (const auto& m : members) out.push_back(m.id);
            return out;
        }
        bool has(int id) const {
            return std::any_of(members.begin(), members.end(), [&](const entry& m) { return m.id == id; });
        }
        std::string str() const {
            std::ostringstream s;
            s << epoch << ' ' << consumed << ' ' << changes << ' ' << members.size();
            for (const auto& m : members) s << ' ' << m.id << ' ' << m.inc;
            for (const auto* ids : {&joined, &left}) {
                s << ' ' << ids->size();
                for (int id : *ids) s << ' ' << id;
            }
            return s.str();
        }
        static view parse(const std::string& t) {
            std::istringstream s(t);
            view v;
            std::size_t n = 0;
            s >> v.epoch >> v.consumed >> v.changes >> n;
            for (std::size_t i = 0; i < n && s; ++i) {
                entry e{};
                s >> e.id >> e.inc;
                v.members.push_back(e);
            }
            const auto ids = [&](std::vector<int>& out) {
                std::size_t k = 0;
                s >> k;
                for (std::size_t i = 0; i < k && s; ++i) {
                    int id = 0;
                    s >> id;
                    out.push_back(id);
                }
            };
            ids(v.joined);
            ids(v.left);
            if (!s) throw comm_error(detail::concat("comm::elastic_group: a damaged view in the store: '", t, "'"));
            return v;
        }
    };

    // The key of worker id's arrival at renewal R.
    static std::string arrival(const std::string& R, int id) { return R + "a/" + std::to_string(id); }
    static std::vector<std::uint8_t> bytes(const std::string& s) { return {s.begin(), s.end()}; }
    static std::string text(const std::vector<std::uint8_t>& b) { return {b.begin(), b.end()}; }

    // A store operation; the store's own failures (unreachable, died) become comm_error
    // naming the store: the elastic protocol cannot go on without it.
    // With store_recovery, a failure waits for the store to come back (recover()) and the
    // operation runs again from its start: each is written to be correct on a store that
    // lost its keys and was given back what the workers knew.
    template <class Fn>
    auto store_op(const char* op, Fn&& fn) -> decltype(fn()) {
        for (;;) {
            try {
                return fn();
            } catch (const trickle::error&) {
                throw;
            } catch (const std::exception& e) {
                if (!recoverable_ || dead_)
                    throw comm_error(detail::concat("comm::elastic_group ", op, ": worker ", id_, ": the key-value store",
                                                    store_name_, " failed (is the store process alive?): ",
                                                    detail::what_of(e)));
                recover(op, detail::what_of(e));
            }
        }
    }

    // A store that comes back (store_recovery). This worker's process group is released
    // first, so that peers blocked on it in a collective fail now and come here too. Then,
    // on a store answering at the same address whose life differs from the one this worker
    // registered in (it restarted and lost its keys), the worker writes back what it knows,
    // first the decisions it read (a renewal's, a commit vote's, its own admission): a
    // decision is first-writer-wins, so every member that read one writes the same value,
    // and a worker whose value lost was left behind by the others (they decided without
    // it): it is dropped, as a late arrival is. Then the counters (the join queue raised to
    // the view's position, the view's incarnations, the count of ended incarnations raised
    // past the view's, so the next renewal reads every incarnation), the renewal interval,
    // and "epoch broken" (its group is gone: the next renewal opens a new epoch). The
    // members then wait (at most the timeout) until every member of their view has written
    // back, so that nothing is decided on the new store before all they knew is in it; a
    // joiner waits until a member has, before it queues its request again. A store that
    // answers with its keys intact (a dropped connection) cannot say whether the failed
    // operation took effect: comm_error.
    void recover(const char* op, const std::string& why) {
        const auto began = clock::now();
        const auto deadline = began + o_.store_recovery;
        release_group();
        std::string last = why;
        for (;;) {
            const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock::now());
            if (left.count() <= 0)
                throw comm_error(detail::concat("comm::elastic_group ", op, ": worker ", id_, ": the key-value store",
                                                store_name_, " failed and did not come back within ",
                                                o_.store_recovery.count(),
                                                " ms (store_recovery; restart it on the same address): ", last));
            try {
                auto client = client_if_back(std::min(left, std::chrono::milliseconds(200)), std::min(left, o_.timeout));
                if (!client.defined()) {
                    std::this_thread::sleep_for(std::chrono::milliseconds(10));
                    continue;
                }
                store_ = std::move(client);
                const std::string life = store_->check({"life"}) ? text(store_->get("life")) : std::string();
                if (life == life_) {
                    dead_ = true;
                    throw comm_error(detail::concat(
                        "comm::elastic_group ", op, ": worker ", id_, ": the connection to the key-value store",
                        store_name_, " failed and the store still holds its keys, so whether the operation took "
                        "effect is unknown: ", why));
                }
                write_back(deadline);
                ++recoveries_;
                recovery_seconds_ += std::chrono::duration<double>(clock::now() - began).count();
                return;
            } catch (const trickle::error&) {
                throw;
            } catch (const std::exception& e) {
                last = detail::what_of(e);
                std::this_thread::sleep_for(std::chrono::milliseconds(20));
            }
        }
    }

    // Part of recover(): what this worker knows, written to a store that lost it.
    void write_back(clock::time_point deadline) {
        life_ = cas("life", new_life());
        for (const auto* k : {&read_renewal_, &read_commit_, &admitted_})
            if (!k->first.empty() && cas(k->first, k->second) != k->second) {
                const std::string why = detail::concat(
                    "comm::elastic_group: worker ", id_, ": while the store was away the others decided ", k->first,
                    " otherwise than this worker read it (they went on without it); join again with a new handle");
                drop(why);
                throw peer_failure(why);
            }
        if (!read_renewal_.first.empty()) write_admissions(view::parse(read_renewal_.second));
        // Incarnations. A process that registered an id on the new store before any worker
        // wrote this back drew its number from a counter that restarted at 0, so it may hold
        // a number the view holds too: a number not above the view's is raised past it. That
        // ends both incarnations: the early registration finds out (join() and the start
        // check their own number) and asks to be started again, and the view's entry is
        // dropped at the next renewal (for this worker's own id: at once, below).
        // (A counter of 0 was only read, add(k, 0), never registered.)
        const auto settle = [&](int id, std::int64_t inc) {
            const std::string k = detail::concat("inc/", id), want = std::to_string(inc);
            for (;;) {
                const std::string cur = store_->check({k}) ? text(store_->get(k)) : std::string();
                if (cur == want) return true;
                if (cur.empty() || std::stoll(cur) == 0) {
                    if (text(store_->compareSet(k, bytes(cur), bytes(want))) == want) return true;
                    continue;
                }
                if (std::stoll(cur) <= inc) raise_to(k, inc + 1);
                return false;
            }
        };
        if (!settle(id_, inc_)) {
            const std::string why = detail::concat("comm::elastic_group: worker ", id_, ": while the store was away "
                                                   "another process registered id ", id_, "; this incarnation ends");
            drop(why);
            throw peer_failure(why);
        }
        const bool in_view = view_.has(id_) && rank_ >= 0;
        if (in_view) {
            raise_to("j/n", view_.consumed);
            raise_to("j/floor", view_.consumed);
            for (const auto& m : view_.members)
                if (m.id != id_) (void)settle(m.id, m.inc);
            raise_to("inc/changes", view_.changes + 1);
            store_->set(detail::concat("b/", view_.epoch), bytes("1"));
            // The job runs: a first incarnation of an id below `initial` registering from now
            // on is a joiner, not a first member.
            store_->set("resumed", bytes("1"));
        }
        (void)cas("cfg/renew_every", std::to_string(o_.renew_every));
        store_->set(detail::concat("rst/", id_), bytes("1"));
        // (With liveness, a member whose heartbeat stays still is not waited for: it died
        // while the store was away.)
        const auto until = std::min(deadline, clock::now() + o_.timeout);
        std::vector<std::pair<std::int64_t, clock::time_point>> beats;
        const auto wrote_back = [&](const entry& m) { return store_->check({detail::concat("rst/", m.id)}); };
        for (int round = 0; clock::now() < until; pause(round)) {
            if (!in_view) {
                if (store_->check({"restored"})) return;
                continue;
            }
            if (all_present(wrote_back, beats)) break;
        }
        if (in_view) store_->set("restored", bytes("1"));
    }

    // A registration that a store coming back superseded (see write_back()): its number was
    // raised past, or the store was written back while it waited at the start (the job
    // runs: it must join). Not a failure of the job: start the process again.
    // `starting`: a first incarnation waiting for the first epoch.
    void check_not_superseded(bool starting) {
        if (incarnation_of(id_) == inc_ && !(starting && store_->check({"resumed"}))) return;
        superseded_ = true;
        dead_ = true;
        throw comm_error(detail::concat("comm::elastic_group ", starting ? "start" : "join", ": worker ", id_,
                                        " (incarnation ", inc_,
                                        "): its registration is void (another process registered the id, or it "
                                        "registered on a store that came back before the workers gave it back their "
                                        "view); start it again, it joins"));
    }

    // With store_recovery, what looks like a failed start may be a store that came back
    // while this (first) incarnation registered, before the workers wrote it back: they say
    // "resumed" within about the timeout. Waited for before the start is declared failed
    // (which would turn every joiner away).
    void confirm_start_failed() {
        if (o_.store_recovery.count() == 0) return;
        const auto until = clock::now() + o_.timeout;
        for (int round = 0; clock::now() < until; pause(round)) check_not_superseded(true);
    }

    // Raises counter k to at least v (compare-and-set, so that two workers raising it at
    // once never add up).
    void raise_to(const std::string& k, std::int64_t v) {
        for (;;) {
            const std::string cur = store_->check({k}) ? text(store_->get(k)) : std::string();
            if (!cur.empty() && std::stoll(cur) >= v) return;
            if (text(store_->compareSet(k, bytes(cur), bytes(std::to_string(v)))) == std::to_string(v)) return;
        }
    }

    // A token naming one life of the store (written once per life, first writer wins).
    std::string new_life() const {
        std::random_device rd;
        return detail::concat(id_, "-", inc_, "-", rd(), "-", clock::now().time_since_epoch().count());
    }

    // Waits a little before the caller looks again (polling with check(): c10d's
    // TCPStore::wait with a timeout leaves its reply pending on the client when it times
    // out, and changes the client's timeout, so it is not used for bounded waits). The
    // pause grows from 0.1 ms to 2 ms while nothing changes.
    void pause(int& round) {
        const int us = std::min(100 << std::min(round, 5), 2000);
        ++round;
        std::this_thread::sleep_for(std::chrono::microseconds(us));
    }

    // Compare-and-set from absent: the value that won (ours, or the first writer's).
    std::string cas(const std::string& k, const std::string& v) { return text(store_->compareSet(k, {}, bytes(v))); }

    std::int64_t incarnation_of(int id) { return store_->add(detail::concat("inc/", id), 0); }

    // After this worker ended an incarnation of its id (a restart registering, a leave, a
    // withdrawn join): counted, after the incarnation itself moved, so that a renewal that
    // reads the count and finds it unchanged may keep every member without reading theirs.
    void end_of_incarnation_counted() {
        store_op("register", [&] { return store_->add("inc/changes", 1); });
    }

    // With liveness: a worker whose id's current incarnation still beats its heartbeat is a
    // duplicate of a live worker (two processes started with one id). It is refused here,
    // before it registers, so the live worker keeps its place. A restart after a crash
    // waits up to `liveness` for the old heartbeat to stay still. (Without liveness nothing
    // tells a live worker from a dead one: a second process with a live id ends the first's
    // incarnation, as a restart does.)
    void refuse_live_duplicate() {
        store_op("register", [&] {
            const std::int64_t cur = store_->add(detail::concat("inc/", id_), 0);
            if (cur == 0) return 0;
            const std::string k = detail::concat("hb/", id_, "/", cur);
            const std::int64_t first = store_->add(k, 0);
            const auto deadline = clock::now() + o_.liveness;
            for (int round = 0; clock::now() < deadline; pause(round))
                if (store_->add(k, 0) != first)
                    throw invalid_argument(detail::concat(
                        "comm::elastic_group: worker id ", id_, " is held by a live worker (incarnation ", cur,
                        ", whose heartbeat is moving); every process needs its own id: stop the other one, or start "
                        "this one with a free id"));
            return 0;
        });
    }

    // A write to the socket of a peer that just died raises SIGPIPE, whose default action
    // ends the process: a survivor would die of its peer's death (seen in the soak: a worker
    // killed with -13 between rounds). Where the process kept the default, it is ignored
    // (the write then fails with EPIPE, which Gloo and the store report as errors that the
    // protocol handles); a handler the process installed itself is left alone. Python
    // ignores SIGPIPE already.
    static void ignore_sigpipe() {
        struct sigaction now {};
        if (::sigaction(SIGPIPE, nullptr, &now) == 0 && now.sa_handler == SIG_DFL) {
            struct sigaction ign {};
            ign.sa_handler = SIG_IGN;
            sigemptyset(&ign.sa_mask);
            ::sigaction(SIGPIPE, &ign, nullptr);
        }
    }

    // The job cannot go on (its start failed): say so in the store for the joiners.
    void fail_job(const std::string& why) {
        try {
            cas("failed", why);
        } catch (...) {
        }
    }

    // Every worker of a job renews at the same calls (renew_every): the first to register
    // writes its k to the store, the others compare theirs.
    void refuse_other_renewal_interval() {
        const std::string theirs = store_op("register", [&] { return cas("cfg/renew_every", std::to_string(o_.renew_every)); });
        if (theirs != std::to_string(o_.renew_every))
            throw mismatch_error(detail::concat("comm::elastic_group: worker ", id_, " has renew_every = ", o_.renew_every,
                                                ", the job's other workers ", theirs,
                                                " (every worker of a job must renew at the same calls)"));
    }

    // Every member of the view is `here` (arrived at a renewal, or wrote back a store that
    // came back), or (liveness) has a heartbeat that has not moved for `liveness` while
    // this worker waited.
    template <class Here>
    bool all_present(const Here& here, std::vector<std::pair<std::int64_t, clock::time_point>>& beats) {
        const auto now = clock::now();
        beats.resize(view_.members.size(), {-1, now});
        for (std::size_t i = 0; i < view_.members.size(); ++i) {
            const auto& m = view_.members[i];
            if (here(m)) continue;
            if (o_.liveness.count() == 0) return false;
            const std::int64_t beat = store_->add(detail::concat("hb/", m.id, "/", m.inc), 0);
            if (beat != beats[i].first) beats[i] = {beat, now};
            if (now - beats[i].second < o_.liveness) return false;
        }
        return true;
    }

    // The first members meet in the store before epoch 0's group is formed, so that the
    // group's rendezvous (bounded by the timeout) does not also absorb the start-up skew.
    void await_start() {
        store_op("start", [&] {
            store_->set(detail::concat("start/", id_), bytes("1"));
            const auto deadline = clock::now() + o_.start_timeout;
            for (int round = 0;; pause(round)) {
                std::vector<int> missing;
                for (int i = 0; i < o_.initial; ++i)
                    if (!store_->check({detail::concat("start/", i)})) missing.push_back(i);
                if (missing.empty()) return 0;
                if (round % 64 == 63) check_not_superseded(true);
                // A first worker that died before it arrived here and was started again is a
                // joiner (its incarnation is not the first): the first epoch cannot form.
                for (int i : missing)
                    if (incarnation_of(i) > 1) {
                        confirm_start_failed();
                        throw comm_error(detail::concat(
                            "comm::elastic_group: worker ", id_, ": worker ", i,
                            " ended before the first epoch formed (a process restarted with its id); the first ",
                            o_.initial, " workers must all start once: start the job again"));
                    }
                if (clock::now() >= deadline) {
                    confirm_start_failed();
                    std::string ids;
                    for (int i : missing) ids += (ids.empty() ? "" : ", ") + std::to_string(i);
                    throw comm_error(detail::concat("comm::elastic_group: worker ", id_, ": the first ", o_.initial,
                                                    " workers did not all start within ", o_.start_timeout.count(),
                                                    " ms (missing: ", ids, ")"));
                }
            }
        });
    }

    // The heartbeat (liveness): a counter bumped every liveness / 4 over a store client of
    // its own, so that it never waits behind the renewals' operations.
    // With store_recovery it reconnects after the store failed (its beats count again from
    // zero on a store that came back, which a renewal reads as beating).
    void start_heartbeat() {
        c10::intrusive_ptr<c10d::Store> client = store_op("heartbeat", [&] { return own_client(); });
        beat_ = std::make_unique<heartbeat>();
        const std::string k = detail::concat("hb/", id_, "/", inc_);
        const auto period = std::max(o_.liveness / 4, std::chrono::milliseconds(1));
        // (The thread ends before this object: stop_heartbeat() joins it.)
        const bool reconnect = o_.store_recovery.count() > 0;
        beat_->thread = std::thread([this, b = beat_.get(), client, k, period, reconnect]() mutable {
            std::unique_lock lock(b->mutex);
            while (!b->stop) {
                try {
                    if (!client.defined()) client = client_if_back(period, period);
                    if (client.defined()) client->add(k, 1);
                } catch (...) {
                    if (!reconnect) return; // the store is gone: the renewals will say so
                    client.reset();
                }
                b->cv.wait_for(lock, period, [b] { return b->stop; });
            }
        });
    }

    void stop_heartbeat() {
        if (!beat_) return;
        {
            std::lock_guard lock(beat_->mutex);
            beat_->stop = true;
        }
        beat_->cv.notify_all();
        if (beat_->thread.joinable()) beat_->thread.join();
        beat_.reset();
    }

    // Closes renewal R: the members that arrived with their incarnation unchanged, and the
    // queued joiners whose incarnation is current; written once (the first writer wins).
    // `everyone`: the arrival count says every member arrived. A member whose incarnation
    // ended is never kept, even when its arrival was counted (a worker killed while it
    // waited here, and restarted): the count of ended incarnations (inc/changes, read
    // first) says whether any ended since the view's decision read it; only then are the
    // members' incarnations read (the common case costs four store operations). A join
    // request is consumed only when acted on: its worker admitted (in place of its ended
    // incarnation, when that one was still a member), or its incarnation over.
    std::string decide(const std::string& R, bool everyone) {
        view next;
        next.consumed = view_.consumed;
        next.changes = store_->add("inc/changes", 0);
        const bool verify = !everyone || next.changes != view_.changes;
        for (const auto& m : view_.members) {
            const bool keep = !verify || ((everyone || store_->check({arrival(R, m.id)})) && incarnation_of(m.id) == m.inc);
            if (keep)
                next.members.push_back(m);
            else
                next.left.push_back(m.id);
        }
        const std::int64_t queued = store_->add("j/n", 0);
        for (std::int64_t i = next.consumed; i < queued; ++i) {
            const std::string J = detail::concat("j/", i);
            if (!store_->check({J})) break; // its writer is between add and set: the next renewal takes it
            next.consumed = i + 1;
            std::istringstream s(text(store_->get(J)));
            entry e{};
            s >> e.id >> e.inc;
            if (!s || e.id < 0 || incarnation_of(e.id) != e.inc) continue; // withdrawn or restarted since
            const auto old = std::find_if(next.members.begin(), next.members.end(),
                                          [&](const entry& m) { return m.id == e.id; });
            if (old != next.members.end()) {
                // The same number as a member's: a member never queues, so either this is a
                // stale request of a member that is here (it arrived: skipped), or a restart
                // drew the number the view holds from a store that came back before the
                // members wrote it back (the member it replaces is gone).
                if (old->inc == e.inc && (everyone || store_->check({arrival(R, e.id)}))) continue;
                // The request of a restart whose ended incarnation was still kept (its end was
                // not counted yet when this decision read the count): the old one leaves.
                next.members.erase(old);
                next.left.push_back(e.id);
            }
            next.members.push_back(e);
            next.joined.push_back(e.id);
        }
        std::sort(next.members.begin(), next.members.end(), [](const entry& a, const entry& b) { return a.id < b.id; });
        std::sort(next.joined.begin(), next.joined.end());
        const bool broken = store_->check({detail::concat("b/", view_.epoch)});
        next.epoch = view_.epoch + ((!next.joined.empty() || !next.left.empty() || broken) ? 1 : 0);
        return cas(R + "d", next.str());
    }

    membership_change change_to(const view& next) const {
        membership_change ch;
        ch.epoch = next.epoch;
        ch.members = next.ids();
        ch.joined = next.joined;
        ch.left = next.left;
        return ch;
    }

    // Every member that reads a decision admits its joiners (idempotent), so an admission
    // does not depend on the one that wrote it staying alive.
    void admit(const view& next) {
        if (next.joined.empty()) return;
        store_op("renew", [&] {
            write_admissions(next);
            return 0;
        });
    }
    void write_admissions(const view& next) {
        const std::string d = next.str();
        for (const auto& m : next.members)
            if (std::find(next.joined.begin(), next.joined.end(), m.id) != next.joined.end())
                store_->set(detail::concat("adm/", m.id, "/", m.inc), bytes(d));
    }

    // Takes view `v`: this epoch's process group, at this worker's place in it.
    void adopt(const view& v, const membership_change& ch, const char* who) {
        release_group();
        view_ = v;
        last_ = ch;
        renewals_ = 0;
        commits_ = 0;
        calls_ = 0;
        const auto it = std::find_if(v.members.begin(), v.members.end(), [&](const entry& m) { return m.id == id_; });
        rank_ = static_cast<int>(it - v.members.begin());
        try {
            if (!device_)
                device_ = o_.hostname.empty() ? c10d::ProcessGroupGloo::createDefaultDevice()
                                              : c10d::ProcessGroupGloo::createDeviceForHostname(o_.hostname);
            auto prefix = c10::make_intrusive<c10d::PrefixStore>(detail::concat("g/", v.epoch), rendezvous_store());
            pg_ = std::make_unique<process_group>(gloo_group(prefix, rank_, size(), o_.timeout, o_.hostname, device_));
        } catch (const std::exception& e) {
            mark_broken();
            throw peer_failure(detail::concat(who, ": worker ", id_, " could not form epoch ", v.epoch,
                                              "'s process group (", size(), " workers) within ", o_.timeout.count(),
                                              " ms: ", detail::what_of(e)));
        }
    }

    // A client of the job's keys with a connection of its own, when the store is a
    // TCPStore (null otherwise): for the heartbeat, and for each epoch's Gloo rendezvous (a
    // rendezvous that times out leaves a reply pending on its client, which must not be the
    // one the renewals use).
    c10::intrusive_ptr<c10d::Store> own_client(std::chrono::milliseconds timeout) const {
        const auto* tcp = dynamic_cast<const c10d::TCPStore*>(user_store_.get());
        if (tcp == nullptr) return {};
        return c10::make_intrusive<c10d::PrefixStore>(o_.job,
                                                      detail::tcp_store(tcp->getHost(), tcp->getPort(), false, timeout));
    }
    c10::intrusive_ptr<c10d::Store> own_client() const { return own_client(o_.timeout); }

    // store_recovery: a client of the job's keys once the store's address accepts a
    // connection within `probe` (null before: the store is not back), its operations bounded
    // by `timeout`. The probe finds a store that came back at once, where c10d's client backs
    // off for up to a second between its attempts.
    c10::intrusive_ptr<c10d::Store> client_if_back(std::chrono::milliseconds probe,
                                                   std::chrono::milliseconds timeout) const {
        const auto* tcp = dynamic_cast<const c10d::TCPStore*>(user_store_.get());
        if (!detail::port_accepts(tcp->getHost(), tcp->getPort(), probe)) return {};
        return own_client(timeout);
    }

    // The store an epoch's Gloo rendezvous uses: a client of its own, or (HashStore, in
    // one process) the store itself.
    c10::intrusive_ptr<c10d::Store> rendezvous_store() const {
        auto own = own_client();
        return own.defined() ? own : store_;
    }

    void check_usable(const char* op) const {
        if (dead_)
            throw peer_failure(detail::concat("comm::elastic_group ", op, ": worker ", id_,
                                              " has left or was dropped; join again with a new handle",
                                              why_dead_.empty() ? "" : " (", why_dead_, why_dead_.empty() ? "" : ")"));
        if (rank_ < 0)
            throw invalid_argument(detail::concat("comm::elastic_group ", op, ": worker ", id_,
                                                  " is not a member yet (call join())"));
    }

    // The epoch saw a failure: say so in the store (the next renewal opens a new epoch),
    // fail any commit vote of this round, and destroy the process group (its sockets close,
    // so peers blocked on this worker fail now instead of at their timeout).
    void mark_broken() {
        try {
            store_->set(detail::concat("b/", view_.epoch), bytes("1"));
            cas(detail::concat("c/", view_.epoch, "/", commits_, "/d"), "0");
        } catch (...) {
        }
        release_group();
    }

    // `why`: said again by every later call (the algorithm's next renew()).
    void drop(std::string why = {}) {
        dead_ = true;
        if (!why.empty()) why_dead_ = std::move(why);
        release_group();
    }

    // Destroys the epoch's process group, keeping its byte counts in traffic().
    void release_group() {
        if (pg_) before_ += pg_->traffic();
        pg_.reset();
    }

    template <class Fn>
    void guard(const char* op, Fn&& fn) {
        check_usable(op);
        if (!pg_)
            throw peer_failure(detail::concat("comm::elastic_group ", op, ": epoch ", view_.epoch,
                                              " is broken (a peer failed); renew() first"));
        try {
            fn();
        } catch (const comm_error& e) {
            // The backend failed (a dead or silent peer); a disagreement between the ranks'
            // arguments stays what it is.
            if (!pg_->backend_failed()) throw;
            // Before the first renewal (the algorithm's constructor: its agreement and first
            // broadcast) no round can be redone: the start failed. (A joiner was admitted by
            // a renewal: its failures are the members' to ride out.)
            if (!renewed_ && !joined_) fail_job(detail::concat("worker ", id_, " saw a peer fail in epoch 0 before the first round: ",
                                                  e.what()));
            mark_broken();
            throw peer_failure(detail::concat("epoch ", view_.epoch, ": ", e.what()));
        }
    }

    elastic_group_options o_;
    int id_;
    std::int64_t inc_ = 0;
    std::string store_name_; // " at host:port" for a TCPStore, for the store's errors
    c10::intrusive_ptr<c10d::Store> user_store_, store_;
    std::shared_ptr<::gloo::transport::Device> device_;
    std::unique_ptr<process_group> pg_;
    view view_;
    membership_change last_;
    int rank_ = -1;
    std::uint64_t renewals_ = 0, commits_ = 0, calls_ = 0, recoveries_ = 0;
    bool dead_ = false, joined_ = false, renewed_ = false, recoverable_ = false, superseded_ = false;
    // store_recovery: the store's life this worker knows, and the last decisions it read
    // (key, value), which it writes back to a store that lost them.
    std::string life_, why_dead_;
    double recovery_seconds_ = 0;
    std::pair<std::string, std::string> read_renewal_, read_commit_, admitted_;
    traffic_counters before_{};
    struct heartbeat {
        std::mutex mutex;
        std::condition_variable cv;
        bool stop = false;
        std::thread thread;
    };
    std::unique_ptr<heartbeat> beat_;
};

static_assert(byte_communicator<elastic_group>);
static_assert(elastic_communicator<elastic_group>);

} // namespace comm

TRICKLE_NAMESPACE_END
