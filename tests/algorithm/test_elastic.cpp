// Elastic membership: comm::elastic_local (views, renewals, failure injection, joins) and
// DiLoCo and SPARTA over it (survivors carry on with renormalized weights, rejoined workers
// take the state and end bit-identical, quorum, refused joiners, damaged transfers), with
// every scenario checked against a fixed-world run where one exists, and for reproducibility.
#include <trickle/comm/elastic.hpp>
#include <trickle/trickle.hpp>

#include "drift_model.hpp"
#include "forwarding_elastic.hpp"
#include "test_support.hpp"

#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

using namespace trickle;
using namespace std::chrono_literals;
using trickle_test::bitwise_equal;

namespace {

using model = trickle_test::drift_model;
using trickle_test::drift;
using trickle_test::drift_sizes;

// What each worker does in a scenario: fail (as if its process died) before training step
// `fail_at`, go silent there (its thread just stops), or join at `join_at` (it is released
// then; every member waits at that step until it is registered, so the next renewal admits
// it: deterministic).
struct plan {
    int capacity = 4;
    int initial = 4;
    std::uint64_t steps = 16;
    std::map<int, std::uint64_t> fail_at, silent_at, join_at;
    std::map<int, std::uint64_t> corrupt_join; // joiners whose transfer arrives damaged
    std::chrono::milliseconds timeout = 3000ms;
};

struct outcome {
    std::map<int, std::vector<float>> params;    // the workers alive at the end, by id
    std::map<int, std::vector<float>> snapshot;  // DiLoCo's, when the algorithm has one
    std::map<int, membership_stats> membership;
    std::map<int, std::uint64_t> steps;
    std::map<int, std::string> errors;           // a worker's exception, by id
};

template <class Alg>
std::vector<float> snapshot_of(const Alg& a) {
    if constexpr (requires { a.snapshot(); })
        return a.snapshot();
    else
        return {};
}

// Runs `p` with algorithms built by make(group, comm, joining) over an elastic_local_world.
template <class Make>
outcome run_scenario(const plan& p, Make make) {
    comm::elastic_local_world world(p.capacity, p.timeout, p.initial);
    outcome out;
    std::mutex mu;
    std::atomic<int> released{-1};
    // Ids whose failure has happened: a restart (a join with the id of a failed worker) starts
    // only after it, as a restarted process does. Without this wait, a member running ahead
    // could release the restart while the old incarnation is still a member.
    std::vector<std::atomic<bool>> failed(static_cast<std::size_t>(p.capacity));
    const auto record = [&](int id, const model& m, const auto& alg) {
        std::lock_guard lock(mu);
        out.params[id] = m.flat();
        out.snapshot[id] = snapshot_of(alg);
        out.membership[id] = alg.membership();
        out.steps[id] = alg.stats().steps;
    };
    const auto fail_record = [&](int id, const std::exception& e) {
        std::lock_guard lock(mu);
        out.errors[id] = e.what();
    };
    // Members wait at a join step until the joiner is registered.
    const auto hold_for_joiners = [&](std::uint64_t t) {
        for (const auto& [id, at] : p.join_at)
            if (at == t) {
                released.store(id);
                const auto deadline = std::chrono::steady_clock::now() + 5s;
                while (world.joiners_waiting() < 1 && std::chrono::steady_clock::now() < deadline)
                    std::this_thread::sleep_for(1ms);
            }
    };
    std::vector<std::thread> threads;
    for (int id = 0; id < p.initial; ++id)
        threads.emplace_back([&, id] {
            try {
                comm::elastic_local c = world.worker(id);
                model m(id);
                auto alg = make(m.group, c, false);
                for (std::uint64_t t = 0; t < p.steps; ++t) {
                    if (p.fail_at.count(id) && p.fail_at.at(id) == t) {
                        world.fail(id);
                        failed[static_cast<std::size_t>(id)].store(true);
                        return;
                    }
                    if (p.silent_at.count(id) && p.silent_at.at(id) == t) return;
                    hold_for_joiners(t);
                    m.train(id, t);
                    alg.step(exec::host{});
                }
                record(id, m, alg);
            } catch (const std::exception& e) {
                fail_record(id, e);
            }
        });
    for (const auto& [jid, at] : p.join_at)
        threads.emplace_back([&, jid = jid] {
            while (released.load() != jid || (p.fail_at.count(jid) && !failed[static_cast<std::size_t>(jid)].load()))
                std::this_thread::sleep_for(1ms);
            try {
                comm::elastic_local c = world.worker(jid);
                if (p.corrupt_join.count(jid)) world.corrupt_next_broadcast(jid);
                model m(jid + 100); // its own (different) parameters: the transfer must replace them
                auto alg = make(m.group, c, true);
                for (std::uint64_t t = alg.stats().steps; t < p.steps; ++t) {
                    m.train(jid, t);
                    alg.step(exec::host{});
                }
                record(jid, m, alg);
            } catch (const std::exception& e) {
                fail_record(jid, e);
            }
        });
    for (auto& t : threads) t.join();
    return out;
}

diloco_options dopts(bool join, std::uint64_t H = 4) {
    diloco_options o{.interval = H, .seed = 7};
    o.join = join;
    return o;
}

const auto make_diloco = [](const param_group<float>& g, comm::elastic_local& c, bool join) {
    return diloco_engine<outer::nesterov, topology::all_reduce, float, host_space, comm::elastic_local>(g, c,
                                                                                                       dopts(join));
};

const auto make_sparta = [](const param_group<float>& g, comm::elastic_local& c, bool join) {
    sparta_options o{.fraction = 0.05, .seed = 11};
    o.join = join;
    return sparta_engine<sampler::uniform, schedule::constant, topology::all_reduce, float, host_space,
                         comm::elastic_local>(g, c, o);
};

// The same algorithm over a fixed comm::local world of N workers, ids = ranks.
template <class Alg>
std::map<int, std::vector<float>> fixed_world(int N, std::uint64_t steps,
                                              const std::function<Alg(const param_group<float>&, comm::local&)>& make) {
    std::map<int, std::vector<float>> out;
    std::mutex mu;
    comm::run_local(N, [&](comm::local& c) {
        model m(c.rank());
        Alg alg = make(m.group, c);
        for (std::uint64_t t = 0; t < steps; ++t) {
            m.train(c.rank(), t);
            alg.step(exec::host{});
        }
        std::lock_guard lock(mu);
        out[c.rank()] = m.flat();
    });
    return out;
}

using local_diloco = diloco_engine<outer::nesterov, topology::all_reduce, float, host_space, comm::local>;
using local_sparta = sparta_engine<sampler::uniform, schedule::constant, topology::all_reduce, float, host_space, comm::local>;

void require_identical(const std::map<int, std::vector<float>>& m, const char* what) {
    REQUIRE(!m.empty());
    const auto& first = m.begin()->second;
    for (const auto& entry : m) { // (not a structured binding: INFO's lambda takes it, which clang 14 refuses)
        const int id = entry.first;
        INFO(what << ": worker " << id);
        CHECK(bitwise_equal(entry.second, first));
    }
}

} // namespace

TEST_CASE("comm::elastic_local: collectives over the view, renewals, failures, joins") {
    SUBCASE("a renewal with nobody missing or waiting changes nothing") {
        comm::elastic_local_world world(3, 2000ms);
        comm::run_local(3, [&](comm::local& slot) {
            comm::elastic_local c = world.worker(slot.rank());
            std::vector<float> v{1.0f + static_cast<float>(c.id()), 2.0f};
            c.all_reduce_sum(v.data(), v.size());
            CHECK(v[0] == 6.0f);
            CHECK(v[1] == 6.0f);
            const comm::membership_change ch = c.renew();
            CHECK_FALSE(ch.changed());
            CHECK(ch.epoch == 0);
            CHECK(c.size() == 3);
            CHECK(c.rank() == c.id());
            CHECK(c.traffic().calls == 1);
        });
    }
    SUBCASE("a failed worker: its peers' collective throws peer_failure at once, the renewal drops it") {
        comm::elastic_local_world world(3, 10000ms);
        std::vector<std::string> what(3);
        std::vector<comm::membership_change> after(3);
        const auto t0 = std::chrono::steady_clock::now();
        std::vector<std::thread> th;
        for (int id = 0; id < 3; ++id)
            th.emplace_back([&, id] {
                comm::elastic_local c = world.worker(id);
                if (id == 1) {
                    std::this_thread::sleep_for(50ms);
                    world.fail(1);
                    return;
                }
                float x = 1.0f;
                try {
                    c.all_reduce_sum(&x, 1);
                } catch (const peer_failure& e) {
                    what[static_cast<std::size_t>(id)] = e.what();
                }
                after[static_cast<std::size_t>(id)] = c.renew();
                float y = static_cast<float>(id);
                c.all_reduce_sum(&y, 1);
                CHECK(y == 2.0f); // ids 0 and 2
                CHECK(c.size() == 2);
                CHECK(c.rank() == (id == 0 ? 0 : 1));
            });
        for (auto& t : th) t.join();
        CHECK(std::chrono::steady_clock::now() - t0 < 5s); // long before the 10 s timeout
        CHECK(what[0].find("worker 1 failed") != std::string::npos);
        CHECK(what[2].find("worker 1 failed") != std::string::npos);
        CHECK(after[0].left == std::vector<int>{1});
        CHECK(after[0].members == std::vector<int>{0, 2});
        CHECK(after[0].epoch == 1);
    }
    SUBCASE("a silent worker is declared failed after the timeout, never a hang") {
        comm::elastic_local_world world(3, 500ms);
        std::vector<int> sizes_after(3, -1);
        std::vector<std::thread> th;
        for (int id = 0; id < 3; ++id)
            th.emplace_back([&, id] {
                comm::elastic_local c = world.worker(id);
                if (id == 2) return; // stops answering
                float x = 1.0f;
                CHECK_THROWS_AS(c.all_reduce_sum(&x, 1), peer_failure);
                c.renew();
                sizes_after[static_cast<std::size_t>(id)] = c.size();
            });
        for (auto& t : th) t.join();
        CHECK(sizes_after[0] == 2);
        CHECK(sizes_after[1] == 2);
        // The dropped worker learns it when it comes back.
        comm::elastic_local late = world.worker(2);
        float x = 0.0f;
        CHECK_THROWS_AS(late.all_reduce_sum(&x, 1), trickle::error);
    }
    SUBCASE("a joiner waits until a renewal admits it, then takes part") {
        comm::elastic_local_world world(3, 2000ms, 2);
        std::vector<std::thread> th;
        std::atomic<bool> waiting{false};
        for (int id = 0; id < 2; ++id)
            th.emplace_back([&, id] {
                comm::elastic_local c = world.worker(id);
                while (world.joiners_waiting() < 1) std::this_thread::sleep_for(1ms);
                const comm::membership_change ch = c.renew();
                CHECK(ch.joined == std::vector<int>{2});
                float x = 1.0f;
                c.all_reduce_sum(&x, 1);
                CHECK(x == 3.0f);
            });
        th.emplace_back([&] {
            comm::elastic_local c = world.worker(2);
            waiting = true;
            const comm::membership_change ch = c.join();
            CHECK(ch.members == std::vector<int>{0, 1, 2});
            CHECK(c.rank() == 2);
            float x = 1.0f;
            c.all_reduce_sum(&x, 1);
            CHECK(x == 3.0f);
        });
        for (auto& t : th) t.join();
        CHECK(world.epoch() == 1);
    }
    SUBCASE("bad input") {
        CHECK_THROWS_WITH_AS(comm::elastic_local_world(3, 0ms), doctest::Contains("timeout must be > 0"),
                             invalid_argument);
        CHECK_THROWS_AS(comm::elastic_local_world(0, 100ms), invalid_argument);
        CHECK_THROWS_AS(comm::elastic_local_world(3, 100ms, 4), invalid_argument);
        comm::elastic_local_world world(2, 100ms, 1);
        CHECK_THROWS_AS(world.worker(2), invalid_argument);
        CHECK_THROWS_AS(world.fail(-1), invalid_argument);
        comm::elastic_local member = world.worker(0);
        CHECK_THROWS_WITH_AS(member.join(), doctest::Contains("already a member"), invalid_argument);
        comm::elastic_local outsider = world.worker(1);
        float x = 0.0f;
        CHECK_THROWS_WITH_AS(outsider.all_reduce_sum(&x, 1), doctest::Contains("not a member"), invalid_argument);
        CHECK_THROWS_WITH_AS(outsider.join(50ms), doctest::Contains("not admitted within 50 ms"), comm_error);
    }
}

TEST_CASE("DiLoCo over an elastic world: a worker killed at any step never hangs the others; survivors agree") {
    // A failure before any outer step gives exactly the fixed world of the survivors.
    {
        plan p;
        p.fail_at[3] = 0;
        const outcome o = run_scenario(p, make_diloco);
        CHECK(o.errors.empty());
        const auto ref = fixed_world<local_diloco>(3, p.steps, [](const param_group<float>& g, comm::local& c) {
            return local_diloco(g, c, dopts(false));
        });
        for (int id = 0; id < 3; ++id) {
            INFO("worker " << id);
            CHECK(bitwise_equal(o.params.at(id), ref.at(id)));
        }
    }
    // Every step of the first two rounds (H = 4).
    for (std::uint64_t s = 0; s < 8; ++s) {
        CAPTURE(s);
        plan p;
        p.fail_at[2] = s;
        const outcome o = run_scenario(p, make_diloco);
        CHECK(o.errors.empty());
        CHECK(o.params.size() == 3);
        require_identical(o.params, "parameters");
        require_identical(o.snapshot, "snapshot");
        for (const auto& [id, ms] : o.membership) {
            CHECK(ms.left == 1);
            CHECK(ms.workers == 3);
            CHECK(ms.epoch == 1);
            CHECK(ms.quorum);
        }
    }
    // A worker that goes silent is dropped after the timeout.
    {
        plan p;
        p.silent_at[1] = 6;
        p.timeout = 600ms; // long enough for live workers on a loaded CI machine
        const outcome o = run_scenario(p, make_diloco);
        CHECK(o.errors.empty());
        CHECK(o.params.size() == 3);
        require_identical(o.params, "parameters");
        CHECK(o.membership.at(0).wait_seconds >= 0.5);
    }
}

namespace {

// Forwards to an elastic_local, and fails (leaves, then throws) in its k-th all_reduce_sum:
// a worker that dies inside the collective of an outer step, after its peers entered it.
struct dying_comm : trickle_test::forwarding_elastic {
    int die_in = 0;
    int calls = 0;
    void all_reduce_sum(float* d, std::size_t n) {
        if (++calls == die_in) {
            std::this_thread::sleep_for(30ms); // the peers are inside the collective by now
            c.leave();
            throw comm_error("injected: died inside the all-reduce");
        }
        c.all_reduce_sum(d, n);
    }
};
static_assert(comm::elastic_communicator<dying_comm>);

} // namespace

TEST_CASE("DiLoCo: a worker that dies inside an outer step's all-reduce: its contribution is discarded, the round redone") {
    // Worker 3 dies in the second outer step (after step 7): the survivors' result must be
    // that of worker 3 failing just before it.
    std::map<int, std::vector<float>> inside;
    std::map<int, membership_stats> ms;
    std::map<int, std::pair<std::uint64_t, std::uint64_t>> rounds; // aggregation().rounds, exchanges
    {
        comm::elastic_local_world world(4, 5000ms);
        std::mutex mu;
        std::vector<std::thread> th;
        for (int id = 0; id < 4; ++id)
            th.emplace_back([&, id] {
                comm::elastic_local inner = world.worker(id);
                dying_comm c{{inner}, id == 3 ? 2 : 0};
                model m(id);
                diloco_engine<outer::nesterov, topology::all_reduce, float, host_space, dying_comm> alg(m.group, c,
                                                                                                       dopts(false));
                try {
                    for (std::uint64_t t = 0; t < 16; ++t) {
                        m.train(id, t);
                        alg.step(exec::host{});
                    }
                } catch (const comm_error& e) {
                    CHECK(id == 3);
                    CHECK(std::string(e.what()).find("injected") != std::string::npos);
                    return;
                }
                std::lock_guard lock(mu);
                inside[id] = m.flat();
                ms[id] = alg.membership();
                rounds[id] = {alg.aggregation().rounds, alg.stats().exchanges};
            });
        for (auto& t : th) t.join();
    }
    plan p;
    p.fail_at[3] = 7;
    const outcome before = run_scenario(p, make_diloco);
    REQUIRE(inside.size() == 3);
    for (int id = 0; id < 3; ++id) {
        INFO("worker " << id);
        CHECK(bitwise_equal(inside.at(id), before.params.at(id)));
        CHECK(ms.at(id).rounds_retried == 1);
        CHECK(ms.at(id).left == 1);
        // The redone round counts once in the aggregation's counters, as in the exchanges.
        CHECK(rounds.at(id).second == 4);
        CHECK(rounds.at(id).first == rounds.at(id).second);
    }
}

TEST_CASE("DiLoCo: a failed worker rejoins, takes the global state and ends bit-identical; reproducible") {
    plan p;
    p.fail_at[3] = 5;
    p.join_at[3] = 9; // admitted at the outer step after step 11
    const outcome a = run_scenario(p, make_diloco);
    CHECK(a.errors.empty());
    REQUIRE(a.params.size() == 4);
    require_identical(a.params, "parameters");
    require_identical(a.snapshot, "snapshot");
    CHECK(a.steps.at(3) == 16);
    CHECK(a.membership.at(3).state_bytes > 1000 * sizeof(float));
    CHECK(a.membership.at(0).changes == 2);
    CHECK(a.membership.at(0).joined == 1);
    CHECK(a.membership.at(0).left == 1);
    const outcome b = run_scenario(p, make_diloco);
    for (int id = 0; id < 4; ++id) {
        INFO("worker " << id);
        CHECK(bitwise_equal(a.params.at(id), b.params.at(id)));
    }
    // The joiner's first outer step counts it with weight 0 (its delta is zero): up to the end
    // of that step the members' parameters are those of the run without the rejoin.
    plan upto = p;
    upto.steps = 12;
    plan without = upto;
    without.join_at.clear();
    const outcome r = run_scenario(upto, make_diloco), w = run_scenario(without, make_diloco);
    for (int id = 0; id < 3; ++id) {
        INFO("worker " << id);
        CHECK(bitwise_equal(r.params.at(id), w.params.at(id)));
    }
    CHECK(bitwise_equal(r.params.at(3), w.params.at(0)));
    // A restart within the round of its own failure: dropped and admitted at the same outer
    // step, without waiting out the (long) timeout.
    plan quick;
    quick.fail_at[3] = 5;
    quick.join_at[3] = 6;
    quick.timeout = 60000ms;
    const auto t0 = std::chrono::steady_clock::now();
    const outcome qo = run_scenario(quick, make_diloco);
    CHECK(std::chrono::steady_clock::now() - t0 < 20s);
    CHECK(qo.errors.empty());
    REQUIRE(qo.params.size() == 4);
    require_identical(qo.params, "parameters");
    CHECK(qo.membership.at(0).changes == 1); // one renewal dropped and re-admitted it
    // A brand-new worker (id 4) joins a full world of 4.
    plan q;
    q.capacity = 5;
    q.join_at[4] = 2;
    const outcome c = run_scenario(q, make_diloco);
    CHECK(c.errors.empty());
    REQUIRE(c.params.size() == 5);
    require_identical(c.params, "parameters");
}

TEST_CASE("DiLoCo with robust aggregation over an elastic world: a failure and a rejoin; the joiner takes the center") {
    for (const aggregate::rule rule : {aggregate::median(), aggregate::trimmed(1), aggregate::clip(0.05)}) {
        CAPTURE(rule.name());
        const auto make = [rule](const param_group<float>& g, comm::elastic_local& c, bool join) {
            diloco_options o = dopts(join);
            o.aggregate = rule;
            return diloco_engine<outer::nesterov, topology::all_reduce, float, host_space, comm::elastic_local>(g, c, o);
        };
        plan p;
        p.fail_at[3] = 5;
        p.join_at[3] = 9;
        const outcome a = run_scenario(p, make);
        CHECK(a.errors.empty());
        REQUIRE(a.params.size() == 4);
        require_identical(a.params, "parameters");
        require_identical(a.snapshot, "snapshot");
        const outcome b = run_scenario(p, make);
        for (int id = 0; id < 4; ++id) CHECK(bitwise_equal(a.params.at(id), b.params.at(id)));
    }
}

TEST_CASE("DiLoCo: below quorum training goes on locally, and resumes when a worker joins") {
    const auto make = [](const param_group<float>& g, comm::elastic_local& c, bool join) {
        diloco_options o = dopts(join);
        o.min_workers = 3;
        return diloco_engine<outer::nesterov, topology::all_reduce, float, host_space, comm::elastic_local>(g, c, o);
    };
    plan p;
    p.fail_at[2] = 1;
    p.fail_at[3] = 1;
    p.join_at[2] = 5; // admitted at the outer step after step 7
    const outcome o = run_scenario(p, make);
    CHECK(o.errors.empty());
    REQUIRE(o.params.size() == 3);
    require_identical(o.snapshot, "snapshot");
    require_identical(o.params, "parameters");
    CHECK(o.membership.at(0).rounds_below_quorum == 1); // the outer step after step 3
    CHECK(o.membership.at(0).quorum);
    CHECK(o.membership.at(0).workers == 3);
}

TEST_CASE("DiLoCo: a joiner with another configuration, or a damaged transfer, is refused; the others are unaffected") {
    plan base;
    base.fail_at[3] = 2;
    const outcome ref = run_scenario(base, make_diloco);
    SUBCASE("another interval") {
        const auto make = [](const param_group<float>& g, comm::elastic_local& c, bool join) {
            return diloco_engine<outer::nesterov, topology::all_reduce, float, host_space, comm::elastic_local>(
                g, c, dopts(join, join ? 5 : 4));
        };
        plan p = base;
        p.join_at[3] = 9;
        const outcome o = run_scenario(p, make);
        REQUIRE(o.errors.count(3) == 1);
        CHECK(o.errors.at(3).find("join refused") != std::string::npos);
        CHECK(o.errors.at(3).find("interval") != std::string::npos);
        for (int id = 0; id < 3; ++id) {
            INFO("worker " << id);
            CHECK(bitwise_equal(o.params.at(id), ref.params.at(id)));
            CHECK(o.membership.at(id).joins_refused == 1);
        }
    }
    SUBCASE("a damaged transfer") {
        plan p = base;
        p.join_at[3] = 9;
        p.corrupt_join[3] = 1;
        const outcome o = run_scenario(p, make_diloco);
        REQUIRE(o.errors.count(3) == 1);
        CHECK(o.errors.at(3).find("join refused") != std::string::npos);
        CHECK(o.errors.at(3).find("checksum") != std::string::npos);
        for (int id = 0; id < 3; ++id) {
            INFO("worker " << id);
            CHECK(bitwise_equal(o.params.at(id), ref.params.at(id)));
        }
    }
}

TEST_CASE("a joiner takes the donor's trainer state (comm::trainer_state); one that carries another, or none, is "
          "refused naming it") {
    // Each worker's trainer state: a string standing for its optimizer's moments.
    std::mutex mu;
    std::map<int, std::string> held;
    std::map<int, int> loads;
    std::size_t pad = 0;           // bytes added to each member's state (a large one takes the stream's direct path)
    bool donor_save_fails = false; // worker 0's save() throws
    // `joiner`: the name the joiner carries ("": none); `fail_load`: its load() throws.
    const auto maker = [&](std::string joiner, bool fail_load) {
        return [&, joiner, fail_load](const param_group<float>& g, comm::elastic_local& c, bool join) {
            const int id = c.id();
            {
                std::lock_guard lock(mu);
                held[id] = join ? std::string("fresh") : detail::concat("moments of worker ", id) + std::string(pad, '.');
            }
            const std::string name = join ? joiner : std::string("optimizer");
            if (!name.empty())
                c.carry_trainer_state({name,
                                       [&, id] {
                                           if (donor_save_fails && id == 0) throw std::runtime_error("disk full");
                                           std::lock_guard lock(mu);
                                           return held[id];
                                       },
                                       [&, id, fail_load](const std::string& b) {
                                           if (fail_load) throw std::runtime_error("no such parameter group");
                                           std::lock_guard lock(mu);
                                           held[id] = b;
                                           ++loads[id];
                                       }});
            return make_diloco(g, c, join);
        };
    };
    plan p;
    p.fail_at[3] = 5;
    p.join_at[3] = 9;
    const outcome ref = run_scenario(p, make_diloco);
    SUBCASE("the same name: the joiner holds the donor's (rank 0's) state, the run is unchanged") {
        const outcome o = run_scenario(p, maker("optimizer", false));
        CHECK(o.errors.empty());
        CHECK(held.at(3) == "moments of worker 0");
        CHECK(loads[3] == 1);
        for (int id = 0; id < 3; ++id) CHECK(held.at(id) == detail::concat("moments of worker ", id));
        for (int id = 0; id < 4; ++id) {
            INFO("worker " << id);
            CHECK(bitwise_equal(o.params.at(id), ref.params.at(id)));
        }
        // The trainer state's bytes (a flag byte, their CRC-32C and the text) are counted with the state's.
        CHECK(o.membership.at(3).state_bytes == ref.membership.at(3).state_bytes + 5 + held.at(3).size());
    }
    SUBCASE("a state of 300 KB (sent from where it lies) arrives whole") {
        pad = 300000;
        const outcome o = run_scenario(p, maker("optimizer", false));
        CHECK(o.errors.empty());
        CHECK(held.at(3) == detail::concat("moments of worker 0") + std::string(pad, '.'));
        CHECK(loads[3] == 1);
        CHECK(o.membership.at(3).state_bytes == ref.membership.at(3).state_bytes + 5 + held.at(3).size());
    }
    SUBCASE("the donor's save() fails: the joiner is refused and says why, the members unaffected") {
        donor_save_fails = true;
        const outcome o = run_scenario(p, maker("optimizer", false));
        REQUIRE(o.errors.count(3) == 1);
        CHECK(o.errors.at(3).find("the donor could not save its trainer state: disk full") != std::string::npos);
        CHECK(loads[3] == 0);
        for (int id = 0; id < 3; ++id) {
            INFO("worker " << id);
            CHECK(o.membership.at(id).joins_refused == 1);
            CHECK(o.errors.count(id) == 0);
        }
    }
    SUBCASE("another name, none, or a load that fails: refused, the members unaffected") {
        // (No structured bindings: INFO's lambda takes name and fail, which clang 14 refuses.)
        for (const auto& row :
             {std::tuple<std::string, bool, std::string>{"adam", false, "trainer_state"},
              std::tuple<std::string, bool, std::string>{"", false, "trainer_state"},
              std::tuple<std::string, bool, std::string>{"optimizer", true, "could not be loaded: no such parameter group"}}) {
            const std::string& name = std::get<0>(row);
            const bool fail = std::get<1>(row);
            const std::string& expect = std::get<2>(row);
            INFO("joiner carries '" << name << "'" << (fail ? ", its load throws" : ""));
            const outcome o = run_scenario(p, maker(name, fail));
            REQUIRE(o.errors.count(3) == 1);
            CHECK(o.errors.at(3).find("join refused") != std::string::npos);
            CHECK(o.errors.at(3).find(expect) != std::string::npos);
            if (!name.empty() && !fail) CHECK(o.errors.at(3).find("adam") != std::string::npos);
            for (int id = 0; id < 3; ++id) {
                INFO("worker " << id);
                CHECK(o.membership.at(id).joins_refused == 1);
            }
        }
    }
    SUBCASE("bad arguments are refused") {
        comm::elastic_local_world world(1, 1000ms, 1);
        comm::elastic_local c = world.worker(0);
        CHECK_THROWS_WITH_AS(c.carry_trainer_state({"", [] { return std::string(); }, [](const std::string&) {}}),
                             doctest::Contains("non-empty line"), invalid_argument);
        CHECK_THROWS_WITH_AS(c.carry_trainer_state({"x", {}, [](const std::string&) {}}),
                             doctest::Contains("save and load must both be set"), invalid_argument);
        CHECK(c.carried_trainer_state() == nullptr);
    }
}

TEST_CASE("DiLoCo with a lossy codec and error feedback over an elastic world") {
    const auto make = [](const param_group<float>& g, comm::elastic_local& c, bool join) {
        diloco_options o = dopts(join);
        o.error_feedback = 0.5;
        return diloco_engine<outer::nesterov, topology::all_reduce, float, host_space, comm::elastic_local,
                             codec::int8_block>(g, c, o);
    };
    plan p;
    p.fail_at[1] = 6;
    p.join_at[1] = 9;
    const outcome a = run_scenario(p, make);
    CHECK(a.errors.empty());
    REQUIRE(a.params.size() == 4);
    require_identical(a.snapshot, "snapshot");
    const outcome b = run_scenario(p, make);
    for (int id = 0; id < 4; ++id) CHECK(bitwise_equal(a.params.at(id), b.params.at(id)));
}

TEST_CASE("SPARTA over an elastic world: failures, rejoins, reproducibility") {
    {
        plan p;
        p.fail_at[3] = 0;
        const outcome o = run_scenario(p, make_sparta);
        CHECK(o.errors.empty());
        const auto ref = fixed_world<local_sparta>(3, p.steps, [](const param_group<float>& g, comm::local& c) {
            return local_sparta(g, c, {.fraction = 0.05, .seed = 11});
        });
        for (int id = 0; id < 3; ++id) {
            INFO("worker " << id);
            CHECK(bitwise_equal(o.params.at(id), ref.at(id)));
        }
    }
    plan p;
    p.fail_at[1] = 3;
    p.join_at[1] = 8;
    const outcome a = run_scenario(p, make_sparta);
    CHECK(a.errors.empty());
    REQUIRE(a.params.size() == 4);
    for (const auto& [id, s] : a.steps) CHECK(s == 16);
    CHECK(a.membership.at(1).state_bytes > 1000 * sizeof(float));
    const outcome b = run_scenario(p, make_sparta);
    for (int id = 0; id < 4; ++id) {
        INFO("worker " << id);
        CHECK(bitwise_equal(a.params.at(id), b.params.at(id)));
    }
}

TEST_CASE("elastic membership: bad options are refused on every worker") {
    const auto expect = [](auto make, const char* text) {
        comm::elastic_local_world world(2, 2000ms);
        std::vector<std::string> what(2);
        std::vector<std::thread> th;
        for (int id = 0; id < 2; ++id)
            th.emplace_back([&, id] {
                comm::elastic_local c = world.worker(id);
                model m(id);
                try {
                    make(m.group, c);
                } catch (const invalid_argument& e) {
                    what[static_cast<std::size_t>(id)] = e.what();
                }
            });
        for (auto& t : th) t.join();
        for (const auto& w : what) {
            INFO(w);
            CHECK(w.find(text) != std::string::npos);
        }
    };
    using elastic_diloco = diloco_engine<outer::nesterov, topology::all_reduce, float, host_space, comm::elastic_local>;
    expect([](const param_group<float>& g, comm::elastic_local& c) { elastic_diloco(g, c, {.min_workers = 0}); },
           "min_workers must be >= 1");
    expect([](const param_group<float>& g, comm::elastic_local& c) { elastic_diloco(g, c, {.min_workers = 3}); },
           "min_workers (3) is larger than the world (2 workers)");
    expect([](const param_group<float>& g, comm::elastic_local& c) {
        diloco_engine<outer::nesterov, topology::ring, float, host_space, comm::elastic_local>(g, c, {});
    }, "needs topology::all_reduce");
    expect([](const param_group<float>& g, comm::elastic_local& c) { elastic_diloco(g, c, {.fragments = 2}); },
           "streaming");
    expect([](const param_group<float>& g, comm::elastic_local& c) {
        sparta_engine<sampler::uniform, schedule::constant, topology::all_reduce, float, host_space, comm::elastic_local>(
            g, c, {.overlap = true});
    }, "overlap does not combine");
    expect([](const param_group<float>& g, comm::elastic_local& c) {
        sparta_diloco_engine<sampler::uniform, schedule::constant, topology::all_reduce, outer::nesterov, float,
                             host_space, comm::elastic_local>(g, c, {.join = true}, {});
    }, "join must be set in both");
    // join over a fixed world
    comm::run_local(2, [](comm::local& c) {
        model m(c.rank());
        CHECK_THROWS_WITH_AS(local_diloco(m.group, c, {.join = true}), doctest::Contains("needs an elastic communicator"),
                             invalid_argument);
        CHECK_THROWS_WITH_AS(local_diloco(m.group, c, {.min_workers = 3}), doctest::Contains("larger than the world"),
                             invalid_argument);
    });
}

TEST_CASE("the type-erased objects over an elastic world report their membership") {
    const auto make = [](const param_group<float>& g, comm::elastic_local& c, bool join) {
        return trickle::diloco<outer::nesterov>(g, c, dopts(join));
    };
    plan p;
    p.fail_at[2] = 3;
    p.join_at[2] = 6;
    const outcome o = run_scenario(p, make);
    CHECK(o.errors.empty());
    REQUIRE(o.params.size() == 4);
    require_identical(o.params, "parameters");
    CHECK(o.membership.at(0).left == 1);
    CHECK(o.membership.at(0).joined == 1);
    CHECK(o.membership.at(2).state_bytes > 0);
}

TEST_CASE("SPARTA + DiLoCo over an elastic world: one renewal per step for both parts") {
    using elastic_sd = sparta_diloco_engine<sampler::uniform, schedule::constant, topology::all_reduce, outer::nesterov,
                                            float, host_space, comm::elastic_local>;
    const auto make = [](const param_group<float>& g, comm::elastic_local& c, bool join) {
        sparta_options s{.fraction = 0.05, .seed = 3};
        s.join = join;
        return elastic_sd(g, c, s, dopts(join));
    };
    {
        plan p;
        p.fail_at[3] = 0;
        const outcome o = run_scenario(p, make);
        CHECK(o.errors.empty());
        using local_sd = sparta_diloco_engine<sampler::uniform, schedule::constant, topology::all_reduce,
                                              outer::nesterov, float, host_space, comm::local>;
        const auto ref = fixed_world<local_sd>(3, p.steps, [](const param_group<float>& g, comm::local& c) {
            return local_sd(g, c, {.fraction = 0.05, .seed = 3}, dopts(false));
        });
        for (int id = 0; id < 3; ++id) {
            INFO("worker " << id);
            CHECK(bitwise_equal(o.params.at(id), ref.at(id)));
        }
    }
    // Rejoins at a SPARTA step and at an outer step; the run ends on an outer step, so every
    // worker ends with the same parameters.
    for (std::uint64_t at : {6u, 7u}) {
        CAPTURE(at);
        plan p;
        p.fail_at[2] = 2;
        p.join_at[2] = at;
        const outcome a = run_scenario(p, make);
        CHECK(a.errors.empty());
        REQUIRE(a.params.size() == 4);
        require_identical(a.params, "parameters");
        CHECK(a.steps.at(2) == 16);
        CHECK(a.membership.at(0).joined == 1);
        CHECK(a.membership.at(2).state_bytes > 2000 * sizeof(float));
        const outcome b = run_scenario(p, make);
        for (int id = 0; id < 4; ++id) CHECK(bitwise_equal(a.params.at(id), b.params.at(id)));
    }
    // Below quorum both parts train locally; the step count still moves on.
    const auto make3 = [](const param_group<float>& g, comm::elastic_local& c, bool join) {
        sparta_options s{.fraction = 0.05, .seed = 3};
        s.join = join;
        diloco_options d = dopts(join);
        d.min_workers = 3;
        return elastic_sd(g, c, s, d);
    };
    plan q;
    q.fail_at[1] = 1;
    q.fail_at[2] = 1;
    const outcome o = run_scenario(q, make3);
    CHECK(o.errors.empty());
    REQUIRE(o.params.size() == 2);
    CHECK(o.steps.at(0) == 16);
    CHECK(o.membership.at(0).rounds_below_quorum == 15); // every step from step 1 on
    CHECK_FALSE(o.membership.at(0).quorum);
}

TEST_CASE("comm::run_elastic: a worker whose thread throws is failed, and its peers carry on") {
    comm::elastic_local_world world(4, 3000ms);
    std::map<int, std::vector<float>> params;
    std::mutex mu;
    const auto errors = comm::run_elastic(world, [&](comm::elastic_local& c) {
        model m(c.id());
        auto alg = make_diloco(m.group, c, false);
        for (std::uint64_t t = 0; t < 16; ++t) {
            if (c.id() == 1 && t == 3) throw std::runtime_error("worker 1 crashed");
            m.train(c.id(), t);
            alg.step(exec::host{});
        }
        std::lock_guard lock(mu);
        params[c.id()] = m.flat();
    });
    REQUIRE(errors[1]);
    CHECK_THROWS_WITH(std::rethrow_exception(errors[1]), "worker 1 crashed");
    CHECK_FALSE(errors[0]);
    // The same as failing it before step 3.
    plan p;
    p.fail_at[1] = 3;
    const outcome o = run_scenario(p, make_diloco);
    REQUIRE(params.size() == 3);
    for (const auto& entry : params) { // (not a structured binding: INFO's lambda takes it, which clang 14 refuses)
        const int id = entry.first;
        INFO("worker " << id);
        CHECK(bitwise_equal(entry.second, o.params.at(id)));
    }
}

namespace {

// comm::elastic_local whose k-th renew() fails with peer_failure before it renews (as
// comm::elastic_group's does when the new epoch's group cannot form: a peer died during
// its rendezvous). Everything else is forwarded.
class renew_fails_once : public trickle_test::forwarding_elastic {
public:
    renew_fails_once(comm::elastic_local& c, int fail_at) : forwarding_elastic{c}, fail_at_(fail_at) {}
    comm::membership_change renew() {
        if (++renewals_ == fail_at_) throw peer_failure("the new epoch's group could not form (injected)");
        return c.renew();
    }

private:
    int fail_at_;
    int renewals_ = 0;
};
static_assert(comm::elastic_communicator<renew_fails_once>);

} // namespace

TEST_CASE("a renewal that fails before its round's backup rolls nothing back (it once rewound the step counter)") {
    // Worker 1's 3rd renewal (the 3rd outer step's) fails before it renews, and is retried.
    // Nothing of the round ran, so nothing may be restored: before the fix the rollback put
    // back the 2nd outer step's backup, rewinding worker 1's step counter by H and its outer
    // counters by one, so it ran one outer step more than the others at the end (found by
    // the random-schedule soak of tests/torch/test_elastic_processes.cpp).
    constexpr std::uint64_t steps = 24, H = 4;
    const auto run = [&](int fail_at) {
        comm::elastic_local_world world(3, 3000ms, 3);
        std::vector<std::vector<float>> params(3);
        std::vector<std::uint64_t> counted(3), outer(3);
        std::vector<std::string> errors(3);
        std::vector<std::thread> t;
        for (int id = 0; id < 3; ++id)
            t.emplace_back([&, id] {
                try {
                    comm::elastic_local c = world.worker(id);
                    renew_fails_once f(c, id == 1 ? fail_at : 0);
                    model m(id);
                    diloco_engine<outer::nesterov, topology::all_reduce, float, host_space, renew_fails_once, codec::fp32>
                        alg(m.group, f, dopts(false, H));
                    for (std::uint64_t s = 0; s < steps; ++s) {
                        m.train(id, s);
                        alg.step(exec::host{});
                    }
                    params[static_cast<std::size_t>(id)] = m.flat();
                    counted[static_cast<std::size_t>(id)] = alg.stats().steps;
                    outer[static_cast<std::size_t>(id)] = alg.stats().exchanges;
                } catch (const std::exception& e) {
                    errors[static_cast<std::size_t>(id)] = e.what();
                }
            });
        for (auto& x : t) x.join();
        for (int id = 0; id < 3; ++id) {
            INFO("worker " << id << ": " << errors[static_cast<std::size_t>(id)]);
            REQUIRE(errors[static_cast<std::size_t>(id)].empty());
            CHECK(counted[static_cast<std::size_t>(id)] == steps);
            CHECK(outer[static_cast<std::size_t>(id)] == steps / H);
        }
        return params;
    };
    const auto ref = run(0);
    const auto got = run(3);
    for (int id = 0; id < 3; ++id) {
        INFO("worker " << id);
        CHECK(bitwise_equal(got[static_cast<std::size_t>(id)], ref[static_cast<std::size_t>(id)]));
    }
}
