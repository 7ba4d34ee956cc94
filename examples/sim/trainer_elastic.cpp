// examples/sim/trainer_elastic.cpp: the trainer of elastic runs (--fail, --join, --min-workers) and of workers at different speeds (--speeds).
//
// The lock-step trainer (trainer.hpp) runs every worker through every step and meets at
// the evaluations over the communicator. Here workers die, join and skip steps, so:
//
// - each *life* of a worker (plan.hpp) is a thread of its own: an initial worker, or a
//   joiner that waits to be released, then builds its algorithm with join = true (which
//   blocks until the members' next round admits it and hands it the state);
// - the threads meet through the simulator's own meeting points (which send nothing)
//   before every round's collective and at the evaluations, each time with exactly the
//   workers the plan says take part. A worker that dies reports its failure
//   (elastic_local_world::fail) and then arrives at the meeting before the round it dies
//   in, so its peers find it already failed when they renew: no round waits for a timeout,
//   and the results are the same on every run, bit for bit;
// - with --speeds and --round-policy deadline, worker i does k_i = max(1, floor(H s_i))
//   inner steps per round, its j-th at tick min(H, ceil(j / s_i)) of the round, and the
//   outer step runs at the round's last tick (DiLoCo's manual_outer), each worker weighted
//   by the tokens it processed; with wait, every worker does every step (DiLoCo as in the
//   lock-step trainer) and only the modelled time differs; with adaptive, the round lasts
//   DiLoCo's adaptive deadline D (diloco_options::deadline, the same on every worker):
//   worker i does k_i = min(H, max(1, floor(D s_i))) steps, its j-th at tick
//   ceil(j H / (D s_i)), and reports its arrival H / s_i (its full round's work) before the
//   outer step, from which the library sets the next D;
// - the modelled time is data: every round has a duration (its compute: H ticks of 1, or
//   of 1 / the slowest speed among its workers under wait, or its deadline under adaptive;
//   plus, with --network, its outer step's communication over the slowest participating
//   link), and the clock at every tick follows from them, the same on every worker.
//
// The evaluations are the lock-step trainer's, over the workers alive at that step: the
// same split of the work by their position, the same sums in the same order, so a run
// without events gives the lock-step trainer's numbers bit for bit (tested).
#include "trainer.hpp"

#include "plan.hpp"

#include <trickle/comm/elastic.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <exception>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

namespace trickle_sim {

namespace {

// Thrown in a worker's thread when another worker failed for real (an exception, not a
// planned --fail): the run is over.
class aborted_run : public std::runtime_error {
public:
    aborted_run() : std::runtime_error("trickle-sim: another worker failed; the run is aborted") {}
};

// The simulator's meeting points for the workers' threads: a meeting is a key, and each
// knows from the plan how many arrivals it waits for.
class meetings {
public:
    // Arrive at `key` and wait until `expected` have arrived.
    void arrive_and_wait(std::uint64_t key, int expected) {
        std::unique_lock lock(mu_);
        ++count_[key];
        cv_.notify_all();
        wait_locked(lock, key, expected);
    }
    // Arrive and go on (a worker that dies leaves right after).
    void arrive(std::uint64_t key) {
        std::lock_guard lock(mu_);
        ++count_[key];
        cv_.notify_all();
    }
    // Wait until `expected` have arrived at `key`, without arriving (a joiner, released by
    // the meeting before the round that admits it).
    void wait_for(std::uint64_t key, int expected) {
        std::unique_lock lock(mu_);
        wait_locked(lock, key, expected);
    }
    void abort() {
        std::lock_guard lock(mu_);
        aborted_ = true;
        cv_.notify_all();
    }
    bool aborted() const {
        std::lock_guard lock(mu_);
        return aborted_;
    }

private:
    void wait_locked(std::unique_lock<std::mutex>& lock, std::uint64_t key, int expected) {
        cv_.wait(lock, [&] { return aborted_ || count_[key] >= expected; });
        if (aborted_) throw aborted_run();
    }

    mutable std::mutex mu_;
    std::condition_variable cv_;
    std::map<std::uint64_t, int> count_;
    bool aborted_ = false;
};

// Meeting keys: phase 0 before the round ending at tick t, 1-4 the evaluation at tick t,
// and 5 at tick 0 the start (the initial workers build their algorithms together).
constexpr std::uint64_t key(int t, int phase) { return static_cast<std::uint64_t>(t) * 8u + static_cast<std::uint64_t>(phase); }

// The steps of a worker of speed s in a round of H ticks that lasts D speed-1 steps (the
// deadline policy: D = H; adaptive: the round's deadline), and how many it has done by
// in-round tick u (1..H): step j completes at u = ceil(j H / (D s)) (D = H: ceil(j / s)),
// the k-th at the round's end at the latest. (The 1e-9 absorbs the rounding of H x s:
// 0.29 x 100.)
int deadline_steps(int H, double D, double s) {
    return std::min(H, std::max(1, static_cast<int>(std::floor(D * s + 1e-9))));
}
int deadline_done(int H, double D, double s, int u) {
    const int k = deadline_steps(H, D, s);
    return u >= H ? k : std::min(k, static_cast<int>(std::floor(u * s * (D / H) + 1e-9)));
}

// What one life leaves behind when it ends.
struct life_outcome {
    bool alive_at_end = false;
    std::vector<float> params;
    double replica_loss = 0;
    std::uint64_t bytes = 0;
    trickle::membership_stats membership{};
    std::uint64_t received = 0; // a joiner: the state it was handed
    trickle::deadline_stats deadlines{}; // --round-policy adaptive: the deadlines it saw
    trickle::aggregation_stats aggregation{};
    double useful = 0, lost = 0;
};

template <class Model>
run_result run_rounds_with(const Model& model, const sim_config& cfg, const dataset& data, strategy_kind kind,
                           step_observer* observer) {
    using clock = std::chrono::steady_clock;
    const bool elastic = elastic_run(cfg);
    const bool timed = timed_run(cfg);
    const bool adaptive = timed && cfg.round_policy == round_policy_kind::adaptive;
    // Rounds that close at a deadline (deadline, adaptive): DiLoCo's manual outer steps.
    const bool deadline = timed && cfg.round_policy != round_policy_kind::wait;
    const int H = cfg.outer_interval; // the deadline policies' rounds (DiLoCo)
    std::string plan_error;
    const membership_plan plan =
        make_membership_plan(cfg.workers, cfg.steps, round_lengths(cfg, kind), cfg.fails, cfg.joins, plan_error);
    if (!plan_error.empty()) throw usage_error(plan_error);
    if (data.shards.size() < static_cast<std::size_t>(plan.capacity))
        throw std::logic_error("run_rounds: the data has fewer shards than the run has workers");
    if (kind != strategy_kind::diloco && kind != strategy_kind::sparta && kind != strategy_kind::sparta_diloco)
        throw usage_error(std::string("--strategy ") + std::string(name_of(kind)) +
                          ": elastic and --speeds runs train diloco, sparta or sparta-diloco only");
    // The rounds whose completion makes a worker's steps useful: SPARTA's exchanges, or
    // the outer steps of DiLoCo and of SPARTA + DiLoCo (whose exchanges share a fraction
    // of the parameters only; a worker's own progress reaches the model at an outer step).
    const auto counts_steps = [&](int t) {
        return kind == strategy_kind::sparta ? plan.round_end(t) : t % cfg.outer_interval == 0;
    };
    if (deadline && kind != strategy_kind::diloco) throw usage_error("--speeds: applies to --strategy diloco only");

    const std::size_t n = model.size();
    const std::size_t L = plan.lives.size();
    const std::size_t NN = cfg.networks.size();
    const auto S = static_cast<std::size_t>(cfg.steps) + 1;
    // The modelled time, from the rounds' durations (docs/simulator.md): compute[t], the
    // compute clock at tick t in speed-1 steps, and comm_s[k][t], the seconds of communication
    // on --network k by tick t (a round's outer step adds its own at the round's last tick).
    // A round's compute lasts its ticks, each of 1 (no --speeds, deadline), of 1 / the
    // slowest speed among the round's workers (wait), or D / H (adaptive: the round lasts its
    // deadline D). The fixed policies' clock is set here; the adaptive rounds' and the
    // communication as the run goes, every worker writing the same values (they agree on the
    // deadline and on every participant's traffic). Read and written under clock_mu.
    std::mutex clock_mu;
    std::vector<double> compute(S, 0.0);
    std::vector<std::vector<double>> comm_s(NN, std::vector<double>(S, 0.0));
    // The last tick of the round that begins after tick P (a round end, or the last step).
    const auto round_after = [&](int P) { return std::min(cfg.steps, plan.round_end_of(P + 1)); };
    if (!adaptive) {
        std::vector<std::pair<int, double>> ticks; // each round's end and its tick's duration
        for (int P = 0; P < cfg.steps; P = round_after(P)) {
            double slowest = 1.0;
            if (timed && cfg.round_policy == round_policy_kind::wait)
                for (const auto& l : plan.lives)
                    if ((!l.joiner || l.admit <= P) && l.end > P)
                        slowest = std::min(slowest, cfg.speeds[static_cast<std::size_t>(l.id)]);
            ticks.emplace_back(round_after(P), 1.0 / slowest);
        }
        bool uniform = true;
        for (const auto& r : ticks) uniform = uniform && r.second == ticks.front().second;
        // One tick length throughout: the clock is that length x t, as it always was.
        for (std::size_t r = 0, P = 0; r < ticks.size(); P = static_cast<std::size_t>(ticks[r++].first))
            for (auto t = P + 1; t <= static_cast<std::size_t>(ticks[r].first); ++t)
                compute[t] = uniform ? ticks[r].second * static_cast<double>(t)
                                     : compute[P] + ticks[r].second * static_cast<double>(t - P);
    }
    const auto time_at = [&](int t) {
        std::lock_guard lock(clock_mu);
        const auto T = static_cast<std::size_t>(t);
        return NN == 0 ? compute[T] : compute[T] + comm_s[0][T] / cfg.step_time_s;
    };
    // The modelled wall time on --network k, in seconds (--step-time per speed-1 step).
    const auto wall_at = [&](std::size_t k, int t) {
        std::lock_guard lock(clock_mu);
        const auto T = static_cast<std::size_t>(t);
        return compute[T] * cfg.step_time_s + comm_s[k][T];
    };
    // A worker beginning the round after tick P (at its start, or after the round's outer
    // step): the round's compute clock (adaptive: it lasts the deadline D) and, until its
    // outer step, the communication so far.
    const auto begin_round = [&](int P, double D) {
        if (!adaptive && NN == 0) return;
        const int T = round_after(P);
        std::lock_guard lock(clock_mu);
        const auto P_ = static_cast<std::size_t>(P);
        for (auto t = P_ + 1; t <= static_cast<std::size_t>(T); ++t) {
            if (adaptive)
                compute[t] = t == static_cast<std::size_t>(T) ? compute[P_] + D
                                                              : compute[P_] + D * static_cast<double>(t - P_) / H;
            for (auto& c : comm_s) c[t] = c[P_];
        }
    };
    // --network: each participant's traffic in the round ending at a tick, (ops, bytes) by life.
    std::map<int, std::vector<std::pair<std::uint64_t, std::uint64_t>>> round_traffic;
    // A life's time by tick t: from its start (or release) to its failure or t.
    const auto life_time = [&](const worker_life& l, int t) {
        if (l.start > t) return 0.0;
        return time_at(std::min(t, l.end)) - time_at(l.start);
    };

    run_result result;
    result.strategy = kind;
    result.parameters = n;
    result.ddp_bytes_per_step = ddp_bytes_per_step(n, cfg.workers);
    result.membership.present = true;
    result.membership.elastic = elastic;
    result.membership.rounds = timed_run(cfg) ? std::string(name_of(cfg.round_policy)) : "fixed";

    // What the lives share for measuring, by life.
    std::vector<const float*> replica(L, nullptr);
    std::vector<double> train_part(L), eval_part(L), corr_part(L), useful_part(L);
    std::vector<char> has_train(L);
    std::vector<std::uint64_t> bytes_part(L), peak_part(L), epoch_part(L);
    std::vector<life_outcome> outcome(L);
    std::vector<float> origin(n), average(n);
    model.init(origin, cfg.seed);
    const std::size_t M = data.eval_positions.size();
    const double eval_targets = static_cast<double>(M) * targets_per_example(cfg.model);
    const double tokens_per_step = static_cast<double>(cfg.batch) * targets_per_example(cfg.model);
    std::mutex mu; // result.rows and outcome
    meetings meet;
    clock::time_point start = clock::now();

    std::optional<trickle::comm::elastic_local_world> eworld;
    std::optional<trickle::comm::local_world> lworld;
    if (elastic)
        eworld.emplace(plan.capacity, std::chrono::milliseconds(cfg.timeout_ms), cfg.workers);
    else
        lworld.emplace(cfg.workers);

    // The first evaluation at or after tick t; a worker that dies before tick t reports its
    // last numbers to it (its peers do not otherwise meet it before they read them).
    const auto eval_from = [&](int t) { return std::min(cfg.steps, (t + cfg.eval_every - 1) / cfg.eval_every * cfg.eval_every); };
    std::map<int, int> deaths_reported_at; // evaluation tick -> lives that died since the previous one
    for (const auto& l : plan.lives)
        if (l.fails) ++deaths_reported_at[eval_from(l.end + 1)];

    // The reporter of tick t: the member with the lowest id after it.
    const auto reporter = [&](int t) {
        const auto alive = plan.alive_after(t);
        return alive.empty() ? -1 : alive.front();
    };

    const auto run_life = [&](std::size_t k, auto& comm) {
        const worker_life& me = plan.lives[k];
        const int id = me.id;
        const auto ID = static_cast<std::size_t>(id);
        constexpr bool over_elastic = std::is_same_v<std::decay_t<decltype(comm)>, trickle::comm::elastic_local>;
        int life_number = 0; // earlier lives of this id
        for (std::size_t j = 0; j < k; ++j) life_number += plan.lives[j].id == id ? 1 : 0;

        // A fresh process: its own initialization (a joiner's, replaced by the transfer),
        // a fresh AdamW, its own batch stream.
        std::vector<float> params(n), grads(n);
        model.init(params, me.joiner ? cfg.seed + 0x9e3779b97f4a7c15ull * (k + 1) : cfg.seed);
        replica[k] = params.data();
        trickle::param_group<float> group;
        for (const auto& t : model.tensors()) group.add(t.name, params.data() + t.offset, t.size());
        const std::vector<std::uint32_t>& shard = data.shards[ID];

        trickle::diloco_options dopts = make_diloco_options(cfg, static_cast<float>(shard.size()));
        dopts.min_workers = cfg.min_workers;
        dopts.join = me.joiner;
        dopts.manual_outer = deadline;
        if (adaptive)
            dopts.deadline = {.quantile = cfg.deadline_quantile,
                              .grace = cfg.deadline_grace,
                              .floor = cfg.deadline_floor,
                              .cap = cfg.deadline_cap};
        trickle::sparta_options sopts = make_sparta_options(cfg);
        sopts.min_workers = cfg.min_workers;
        sopts.join = me.joiner;
        if (!me.joiner) meet.arrive_and_wait(key(0, 5), cfg.workers);
        std::unique_ptr<exchanger> ex;
        if constexpr (over_elastic) {
            ex = kind == strategy_kind::diloco   ? make_diloco_exchanger_elastic(cfg, group, comm, dopts)
                 : kind == strategy_kind::sparta ? make_sparta_exchanger_elastic(cfg, group, comm, sopts)
                                                 : make_sparta_diloco_exchanger_elastic(cfg, group, comm, sopts, dopts);
        } else {
            ex = kind == strategy_kind::diloco   ? make_diloco_exchanger(cfg, group, comm, dopts)
                 : kind == strategy_kind::sparta ? make_sparta_exchanger(cfg, group, comm)
                                                 : make_sparta_diloco_exchanger(cfg, group, comm, dopts.weight);
        }
        int t0 = 0;
        if (me.joiner) {
            // Its constructor took part in the round that admitted it.
            // (Under the deadline policies a worker counts its own inner steps, not the ticks.)
            t0 = deadline ? me.admit : static_cast<int>(ex->algorithm_steps());
            if (t0 != me.admit)
                throw std::logic_error("trickle-sim: worker " + std::to_string(id) + " was admitted at step " +
                                       std::to_string(t0) + ", not at the planned " + std::to_string(me.admit));
            std::lock_guard lock(mu);
            outcome[k].received = ex->membership().state_bytes;
        }

        std::optional<byzantine_worker> byz; // --byzantine (fixed worlds only): corrupts its outer gradients
        if (const byzantine_spec* b = byzantine_of(cfg.byzantine, id)) byz.emplace(*b, cfg.seed, params);
        adamw opt(model, cfg.weight_decay);
        auto ws = detail::make_workspace(model, cfg);
        rng batches = rng::stream(cfg.seed, 0x6261746368000000ull + static_cast<std::uint64_t>(id) +
                                                (static_cast<std::uint64_t>(life_number) << 32));
        std::vector<std::uint32_t> batch(static_cast<std::size_t>(cfg.batch));
        const double speed = timed_run(cfg) ? cfg.speeds[ID] : 1.0;
        double loss_sum = 0;
        int loss_count = 0;
        double last_loss = std::numeric_limits<double>::quiet_NaN();
        double useful = 0, pending = 0; // steps that reached the model; steps since the last round
        int done_in_round = 0;
        double round_D = H; // the current round's duration in speed-1 steps (adaptive: its deadline)
        traffic_split seen = ex->traffic(); // --network: the traffic before the current round

        // Joiners still waiting to register with the world before the round at tick t: the
        // members hold there until they have, so the renewal admits them (deterministic).
        const auto hold_for_joiners = [&](int t) {
            if constexpr (over_elastic) {
                const int want = static_cast<int>(plan.admitted_at(t).size());
                if (want == 0) return;
                const auto limit = clock::now() + std::chrono::seconds(120);
                while (eworld->joiners_waiting() < want) {
                    if (meet.aborted()) throw aborted_run();
                    if (clock::now() > limit)
                        throw std::runtime_error("trickle-sim: a joiner did not register within 120 s");
                    std::this_thread::sleep_for(std::chrono::milliseconds(1));
                }
            }
        };

        const auto evaluate = [&](int t) {
            const std::vector<int> alive = plan.alive_after(t);
            const auto W = alive.size();
            const auto R = static_cast<std::size_t>(std::find(alive.begin(), alive.end(), static_cast<int>(k)) - alive.begin());
            const int Wi = static_cast<int>(W);
            const auto dead = deaths_reported_at.find(t);
            meet.arrive_and_wait(key(t, 1), Wi + (dead == deaths_reported_at.end() ? 0 : dead->second));
            // Every replica is at tick t, and the workers that died since the previous
            // evaluation have left their numbers.
            train_part[k] = loss_count > 0 ? loss_sum / loss_count : 0.0;
            has_train[k] = loss_count > 0;
            bytes_part[k] = ex->bytes_sent();
            peak_part[k] = ex->peak_bytes();
            useful_part[k] = useful + pending;
            epoch_part[k] = ex->membership().epoch;
            loss_sum = 0;
            loss_count = 0;
            std::vector<const float*> reps;
            for (int a : alive) reps.push_back(replica[static_cast<std::size_t>(a)]);
            average_slice(reps, average.data(), R * n / W, (R + 1) * n / W);
            meet.arrive_and_wait(key(t, 2), Wi); // the averaged model is complete
            const std::size_t b = R * M / W, e = (R + 1) * M / W;
            eval_part[k] = ws.loss_sum(average.data(), data.tokens.data(), data.eval_positions.data() + b, e - b);
            const auto pairs = replica_pairs(Wi);
            double corr = 0;
            for (std::size_t q = R; q < pairs.size(); q += W)
                corr += change_correlation(reps[static_cast<std::size_t>(pairs[q].first)],
                                           reps[static_cast<std::size_t>(pairs[q].second)], origin.data(), n);
            corr_part[k] = corr;
            meet.arrive_and_wait(key(t, 3), Wi); // every part is written
            if (R == 0) {
                eval_row row;
                row.strategy = std::string(name_of(kind));
                row.step = t;
                double eval_sum = 0, train = 0, corr_sum = 0;
                int trained = 0;
                for (int a : alive) {
                    const auto A = static_cast<std::size_t>(a);
                    eval_sum += eval_part[A];
                    if (has_train[A]) {
                        train += train_part[A];
                        ++trained;
                    }
                    corr_sum += corr_part[A];
                }
                double useful_all = 0, time_all = 0;
                for (std::size_t j = 0; j < L; ++j) {
                    row.bytes_sent_per_worker = std::max(row.bytes_sent_per_worker, bytes_part[j]);
                    row.peak_bytes = std::max(row.peak_bytes, peak_part[j]);
                    useful_all += useful_part[j];
                    time_all += life_time(plan.lives[j], t);
                }
                row.eval_loss = eval_sum / eval_targets;
                row.eval_ppl = std::exp(row.eval_loss);
                row.train_loss = trained > 0 ? train / trained : std::numeric_limits<double>::quiet_NaN();
                row.correlation = pairs.empty() ? 1.0 : corr_sum / static_cast<double>(pairs.size());
                row.reduction_vs_ddp =
                    reduction(result.ddp_bytes_per_step * static_cast<std::uint64_t>(t), row.bytes_sent_per_worker);
                row.wall_s = std::chrono::duration<double>(clock::now() - start).count();
                row.live_workers = Wi;
                row.epoch = epoch_part[k];
                row.model_time = time_at(t);
                if (NN > 0) {
                    row.step_compute_s = cfg.step_time_s;
                    for (std::size_t q = 0; q < NN; ++q) row.sim_wall_s.push_back(wall_at(q, t));
                }
                row.goodput = time_all > 0 ? useful_all / time_all : 0.0;
                std::lock_guard lock(mu);
                result.rows.push_back(std::move(row));
            }
            meet.arrive_and_wait(key(t, 4), Wi); // the row is written; the parts may change again
        };

        if (adaptive) round_D = ex->deadline();
        // (A joiner's first round was begun by the members, after the outer step it took
        // part in and whose communication they are still adding.)
        if (!me.joiner) begin_round(t0, round_D);
        if (me.joiner && (t0 % cfg.eval_every == 0 || t0 == cfg.steps)) evaluate(t0);
        for (int t = t0 + 1; t <= cfg.steps; ++t) {
            if (me.fails && t == me.end + 1) {
                // Dies before inner step me.end, as if its process died: what it did since
                // its last round is lost.
                {
                    std::lock_guard lock(mu);
                    outcome[k].membership = ex->membership();
                    outcome[k].bytes = ex->bytes_sent();
                    outcome[k].useful = useful;
                    outcome[k].lost = pending;
                    useful_part[k] = useful;
                    bytes_part[k] = ex->bytes_sent();
                    peak_part[k] = ex->peak_bytes();
                }
                if constexpr (over_elastic) eworld->fail(id);
                const int T = plan.round_end_of(t);
                if (T <= cfg.steps) meet.arrive(key(T, 0));
                meet.arrive(key(eval_from(t), 1));
                return;
            }
            bool stepped = true;
            if (deadline) {
                const int u = t - (t - 1) / H * H; // 1..H within the round
                stepped = deadline_done(H, round_D, speed, u) > done_in_round;
            }
            if (stepped) {
                for (auto& p : batch) p = shard[batches.below(shard.size())];
                const float loss =
                    ws.train_step(params.data(), grads.data(), data.tokens.data(), batch.data(), cfg.batch);
                ex->reduce_gradients(grads.data(), n);
                if (cfg.clip > 0) clip_global_norm(grads.data(), n, cfg.clip);
                opt.step(params.data(), grads.data(), learning_rate(cfg, t));
                loss_sum += loss;
                ++loss_count;
                last_loss = loss;
                pending += 1;
                ++done_in_round;
            }
            const bool boundary = plan.round_end(t);
            if (boundary && over_elastic) {
                meet.arrive_and_wait(key(t, 0), plan.round_arrivals(t));
                hold_for_joiners(t);
            }
            const std::uint64_t skipped = ex->membership().rounds_below_quorum;
            if (deadline) {
                if (stepped) ex->after_step(); // counts the inner step (manual_outer)
                if (boundary) {
                    if (adaptive) ex->report_arrival(H / speed); // when its full round (H steps) would end
                    ex->set_weight(static_cast<float>(done_in_round * tokens_per_step));
                    if (byz) byz->before_outer(params);
                    ex->outer_step();
                    if (byz) byz->after_outer(params);
                    done_in_round = 0;
                }
            } else {
                const bool corrupt = byz && t % cfg.outer_interval == 0;
                if (corrupt) byz->before_outer(params);
                ex->after_step();
                if (corrupt) byz->after_outer(params);
            }
            if (t == cfg.steps) ex->finish();
            if (boundary && NN > 0) {
                // The round's communication: what each participant sent since the previous
                // round, over the slowest participating link (the joiners admitted now took
                // part in their constructors and are not counted).
                const traffic_split now = ex->traffic();
                const std::pair<std::uint64_t, std::uint64_t> mine{
                    now.blocking_ops + now.hidden_ops - seen.blocking_ops - seen.hidden_ops,
                    now.blocking_bytes + now.hidden_bytes - seen.blocking_bytes - seen.hidden_bytes};
                seen = now;
                std::vector<int> parts;
                for (int a : plan.alive_after(t)) {
                    const worker_life& l = plan.lives[static_cast<std::size_t>(a)];
                    if (!(l.joiner && l.admit == t)) parts.push_back(a);
                }
                {
                    std::lock_guard lock(clock_mu);
                    auto& slot = round_traffic[t];
                    slot.resize(L);
                    slot[k] = mine;
                }
                meet.arrive_and_wait(key(t, 6), static_cast<int>(parts.size()));
                std::lock_guard lock(clock_mu);
                const auto& slot = round_traffic[t];
                std::uint64_t ops = 0, bytes = 0;
                for (int a : parts) {
                    ops = std::max(ops, slot[static_cast<std::size_t>(a)].first);
                    bytes = std::max(bytes, slot[static_cast<std::size_t>(a)].second);
                }
                const int rounds = exchange_rounds(cfg.topology, static_cast<int>(parts.size()), cfg.island_size);
                const auto P = static_cast<std::size_t>(plan.previous_round_end(t));
                for (std::size_t q = 0; q < NN; ++q) {
                    network_config slowest = cfg.networks[q];
                    for (int a : parts) {
                        const network_link l = cfg.networks[q].link_of(plan.lives[static_cast<std::size_t>(a)].id);
                        slowest.bandwidth_bytes_per_s = std::min(slowest.bandwidth_bytes_per_s, l.bandwidth_bytes_per_s);
                        slowest.latency_s = std::max(slowest.latency_s, l.latency_s);
                    }
                    comm_s[q][static_cast<std::size_t>(t)] = comm_s[q][P] + op_seconds(slowest, ops, rounds, bytes);
                }
            }
            if (boundary && t < cfg.steps) {
                if (adaptive) round_D = ex->deadline();
                begin_round(t, round_D);
            }
            if (boundary && counts_steps(t) && ex->membership().rounds_below_quorum == skipped) {
                useful += pending;
                pending = 0;
            }
            if (observer != nullptr && reporter(t) == static_cast<int>(k)) {
                if (elastic) observer->on_membership(static_cast<int>(plan.alive_after(t).size()), ex->membership().epoch);
                observer->on_step(t, last_loss);
            }
            if (t % cfg.eval_every != 0 && t != cfg.steps) continue;
            evaluate(t);
        }
        // Alive at the end: its steps since the last round are in the final average.
        life_outcome out;
        out.alive_at_end = true;
        out.replica_loss =
            ws.loss_sum(params.data(), data.tokens.data(), data.eval_positions.data(), M) / eval_targets;
        out.bytes = ex->bytes_sent();
        out.membership = ex->membership();
        if (adaptive) out.deadlines = ex->deadlines();
        out.aggregation = ex->aggregation();
        out.useful = useful + pending;
        std::lock_guard lock(mu);
        out.received = outcome[k].received;
        out.params = std::move(params);
        outcome[k] = std::move(out);
    };

    std::vector<std::exception_ptr> errors(L);
    std::vector<std::thread> threads;
    threads.reserve(L);
    for (std::size_t k = 0; k < L; ++k)
        threads.emplace_back([&, k] {
            try {
                const worker_life& me = plan.lives[k];
                if (me.joiner) meet.wait_for(key(me.admit, 0), plan.round_arrivals(me.admit)); // released
                if (elastic) {
                    trickle::comm::elastic_local c = eworld->worker(me.id);
                    run_life(k, c);
                } else {
                    trickle::comm::local c = lworld->rank(me.id);
                    run_life(k, c);
                }
            } catch (...) {
                errors[k] = std::current_exception();
                meet.abort();
                if (elastic) {
                    for (int id = 0; id < plan.capacity; ++id) eworld->fail(id, "aborted");
                } else {
                    lworld->abort("a worker failed");
                }
            }
        });
    for (auto& t : threads) t.join();
    // A worker's own error outranks what its failure caused in the others.
    std::exception_ptr first_other, first_comm, first_abort;
    for (auto& e : errors) {
        if (!e) continue;
        try {
            std::rethrow_exception(e);
        } catch (const aborted_run&) {
            if (!first_abort) first_abort = e;
        } catch (const trickle::comm_error&) {
            if (!first_comm) first_comm = e;
        } catch (...) {
            if (!first_other) first_other = e;
        }
    }
    if (first_other) std::rethrow_exception(first_other);
    if (first_comm) std::rethrow_exception(first_comm);
    if (first_abort) std::rethrow_exception(first_abort);

    std::vector<std::size_t> finals;
    for (std::size_t k = 0; k < L; ++k)
        if (outcome[k].alive_at_end) finals.push_back(k);
    std::sort(finals.begin(), finals.end(),
              [&](std::size_t a, std::size_t b) { return plan.lives[a].id < plan.lives[b].id; });
    membership_summary& ms = result.membership;
    for (std::size_t k : finals) {
        result.final_ids.push_back(plan.lives[k].id);
        result.replicas.push_back(std::move(outcome[k].params));
        result.bytes_sent.push_back(outcome[k].bytes);
        result.replica_eval_loss.push_back(outcome[k].replica_loss);
    }
    ms.final_workers = static_cast<int>(finals.size());
    if (!finals.empty()) result.aggregation = outcome[finals.front()].aggregation;
    for (std::size_t k = 0; k < L; ++k) {
        const auto& o = outcome[k];
        ms.epoch = std::max(ms.epoch, o.membership.epoch);
        ms.changes = std::max(ms.changes, o.membership.changes);
        ms.joined = std::max(ms.joined, o.membership.joined);
        ms.left = std::max(ms.left, o.membership.left);
        ms.joins_refused = std::max(ms.joins_refused, o.membership.joins_refused);
        ms.rounds_retried = std::max(ms.rounds_retried, o.membership.rounds_retried);
        ms.rounds_below_quorum = std::max(ms.rounds_below_quorum, o.membership.rounds_below_quorum);
        ms.state_bytes += o.received;
        ms.useful_steps += o.useful;
        ms.lost_steps += o.lost;
        ms.worker_time += life_time(plan.lives[k], cfg.steps);
    }
    ms.model_time = time_at(cfg.steps);
    for (int P = 0; P < cfg.steps; P = round_after(P)) ms.round_times.push_back(time_at(round_after(P)) - time_at(P));
    if (adaptive) {
        // The deadlines as the longest-lived worker saw them (a joiner's history starts at
        // its admission; the late count travels with the state).
        ms.adaptive = true;
        const trickle::deadline_stats* best = nullptr;
        for (const auto& o : outcome)
            if (o.alive_at_end && (best == nullptr || o.deadlines.history.size() > best->history.size()))
                best = &o.deadlines;
        if (best != nullptr) {
            ms.deadlines = best->history;
            ms.late_arrivals = best->late;
        }
    }
    ms.goodput = ms.worker_time > 0 ? ms.useful_steps / ms.worker_time : 0.0;
    result.wall_s = result.rows.empty() ? 0.0 : result.rows.back().wall_s;
    return result;
}

} // namespace

run_result run_rounds(const sim_config& cfg, const dataset& data, strategy_kind kind, step_observer* observer) {
    if (cfg.model.kind == model_kind::gpt)
        return run_rounds_with(gpt(cfg.model, data.vocab()), cfg, data, kind, observer);
    return run_rounds_with(mlp(cfg.model, data.vocab()), cfg, data, kind, observer);
}

} // namespace trickle_sim
