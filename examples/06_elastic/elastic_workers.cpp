// DiLoCo over a world whose workers crash and join: no hang, no lost state.
//
// Four workers (threads) fit a linear model y = w·x + b with plain SGD, taking a DiLoCo outer
// step every 20 inner steps, over comm::elastic_local (room for five workers, a 2 s
// timeout, a quorum of 3). Worker 2's thread throws at step 50: run_elastic fails it, and
// the outer step after step 59 is taken by the three survivors, averaged over them. At
// step 90 a new worker, id 4, starts: it waits in its constructor until the members' next
// outer step (after step 99) admits it, receives the global model and the outer
// optimizer's state from a live member, checked by a hash all agree on, and trains on
// from there. At the end every live worker holds the same parameters, bit for bit, and
// each prints what it saw of the membership.
#include <trickle/comm/elastic.hpp>
#include <trickle/trickle.hpp>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <map>
#include <mutex>
#include <random>
#include <stdexcept>
#include <thread>
#include <vector>

namespace {

constexpr int initial = 4, capacity = 5, steps = 160, crash_at = 50, join_at = 90, dim = 32;
constexpr float inner_lr = 0.05f;

struct model {
    std::vector<float> w = std::vector<float>(dim, 0.0f);
    std::vector<float> b = std::vector<float>(1, 0.0f);
    trickle::param_group<float> params() {
        trickle::param_group<float> g;
        g.add("w", w.data(), w.size()).add("b", b.data(), b.size());
        return g;
    }
};

float truth_w(int i) { return std::cos(0.2f * static_cast<float>(i)); }
constexpr float truth_b = -0.25f;

// One SGD step of worker `id` at step `t` on a batch of its own shard.
void inner_step(model& m, int id, std::uint64_t t) {
    std::mt19937 rng(static_cast<std::uint32_t>(1000 * id + t));
    std::normal_distribution<float> x_dist(0.2f * static_cast<float>(id - 2), 1.0f), noise(0.0f, 0.05f);
    std::vector<float> gw(dim, 0.0f);
    float gb = 0.0f;
    constexpr int batch = 16;
    for (int s = 0; s < batch; ++s) {
        float x[dim], y = truth_b + noise(rng), pred = m.b[0];
        for (int i = 0; i < dim; ++i) {
            x[i] = x_dist(rng);
            y += truth_w(i) * x[i];
            pred += m.w[i] * x[i];
        }
        const float err = pred - y;
        for (int i = 0; i < dim; ++i) gw[i] += err * x[i] / batch;
        gb += err / batch;
    }
    for (int i = 0; i < dim; ++i) m.w[i] -= inner_lr * gw[i];
    m.b[0] -= inner_lr * gb;
}

double distance_to_truth(const model& m) {
    double d = (m.b[0] - truth_b) * (m.b[0] - truth_b);
    for (int i = 0; i < dim; ++i) d += (m.w[i] - truth_w(i)) * (m.w[i] - truth_w(i));
    return std::sqrt(d);
}

trickle::diloco_options options(bool join) {
    trickle::diloco_options o{.interval = 20, .seed = 7};
    o.min_workers = 3;
    o.join = join;
    return o;
}

} // namespace

int main() {
    using namespace std::chrono_literals;
    trickle::comm::elastic_local_world world(capacity, 2000ms, initial);
    std::map<int, model> final_models;
    std::map<int, trickle::membership_stats> seen;
    std::mutex mu;
    std::atomic<bool> start_joiner{false};
    const auto finish = [&](int id, const model& m, const trickle::membership_stats& ms) {
        std::lock_guard lock(mu);
        final_models[id] = m;
        seen[id] = ms;
    };

    // The joiner: a worker started while the others train (a replacement machine, say).
    std::thread joiner([&] {
        while (!start_joiner) std::this_thread::sleep_for(1ms);
        trickle::comm::elastic_local comm = world.worker(4);
        model m;
        auto params = m.params();
        trickle::diloco<trickle::outer::nesterov> diloco(params, comm, options(true)); // waits to be admitted
        std::printf("worker 4 joined after step %llu\n", static_cast<unsigned long long>(diloco.stats().steps - 1));
        for (std::uint64_t t = diloco.stats().steps; t < steps; ++t) {
            inner_step(m, 4, t);
            diloco.step(trickle::exec::host{});
        }
        finish(4, m, diloco.membership());
    });

    const auto errors = trickle::comm::run_elastic(world, [&](trickle::comm::elastic_local& comm) {
        const int id = comm.id();
        model m;
        auto params = m.params();
        trickle::diloco<trickle::outer::nesterov> diloco(params, comm, options(false));
        for (std::uint64_t t = 0; t < steps; ++t) {
            if (id == 2 && t == crash_at) throw std::runtime_error("worker 2 crashed");
            if (t == join_at) {
                // Hold this step until the joiner is waiting, so that it is admitted at the
                // next outer step on every run (a real trainer simply carries on).
                start_joiner = true;
                while (world.joiners_waiting() < 1) std::this_thread::sleep_for(1ms);
            }
            inner_step(m, id, t);
            diloco.step(trickle::exec::host{});
        }
        finish(id, m, diloco.membership());
    });
    joiner.join();

    for (int id = 0; id < capacity; ++id)
        if (errors[static_cast<std::size_t>(id)]) {
            try {
                std::rethrow_exception(errors[static_cast<std::size_t>(id)]);
            } catch (const std::exception& e) {
                std::printf("worker %d stopped: %s\n", id, e.what());
            }
        }
    bool same = true;
    const model& ref = final_models.begin()->second;
    for (const auto& [id, m] : final_models) {
        const trickle::membership_stats& ms = seen[id];
        std::printf("worker %d: epoch %llu, %d workers, %llu changes (%llu joined, %llu left), %llu B of state "
                    "moved, %.3f s waiting; distance to the true model %.4f\n",
                    id, static_cast<unsigned long long>(ms.epoch), ms.workers,
                    static_cast<unsigned long long>(ms.changes), static_cast<unsigned long long>(ms.joined),
                    static_cast<unsigned long long>(ms.left), static_cast<unsigned long long>(ms.state_bytes),
                    ms.wait_seconds, distance_to_truth(m));
        same = same && m.w == ref.w && m.b == ref.b;
    }
    const bool ok = same && final_models.size() == 4 && !final_models.count(2) && final_models.count(4);
    std::printf("%s\n", ok ? "every live worker holds the same model, bit for bit"
                           : "FAILED: the live workers differ, or the wrong workers are alive");
    return ok ? 0 : 1;
}
