// DiLoCo with an outer learning-rate schedule, stopped half-way and resumed from files.
//
// Four workers (threads) fit a linear model y = w·x + b, each on its own shard of the data,
// with plain SGD as the inner optimizer. Every 20 steps DiLoCo averages what the workers
// learned and takes one Nesterov step with it, whose learning rate decays along a cosine.
// The run stops after 100 steps: each worker saves its parameters (the trainer's job) and
// trickle's state (save_checkpoint) to files. Fresh objects then restore both and finish
// the run. The result is compared with a run that never stopped: it must match bit for bit.
//
//   diloco_resume [DIR]   (checkpoint files go to DIR, default: the current directory)
#include <trickle/trickle.hpp>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

constexpr int workers = 4, steps = 200, stop_at = 100, dim = 64;
constexpr float inner_lr = 0.05f;

using outer_opt = trickle::outer::lr_scheduled<trickle::outer::nesterov, trickle::schedule::cosine>;

// The outer optimizer: Nesterov (lr 0.7, momentum 0.9) with its lr decaying to 0.1 x 0.7
// along a cosine over the run's 10 outer steps.
outer_opt make_outer() {
    return {.optimizer = {.lr = 0.7, .momentum = 0.9}, .schedule = {.end_fraction = 0.1, .steps = steps / 20}};
}

// The model every worker trains: one weight vector and a bias, as two named tensors.
struct model {
    std::vector<float> w = std::vector<float>(dim, 0.0f);
    std::vector<float> b = std::vector<float>(1, 0.0f);
    trickle::param_group<float> params() {
        trickle::param_group<float> g;
        g.add("w", w.data(), w.size()).add("b", b.data(), b.size());
        return g;
    }
};

// The ground truth the workers try to recover.
float truth_w(int i) { return std::sin(0.3f * static_cast<float>(i)); }
constexpr float truth_b = 0.5f;

// One inner SGD step of worker `rank` at step `t` on a batch of its shard. The shards are
// not identically distributed: each worker sees inputs shifted its own way.
void inner_step(model& m, int rank, int t) {
    std::mt19937 rng(static_cast<std::uint32_t>(1000 * rank + t));
    std::normal_distribution<float> x_dist(0.25f * static_cast<float>(rank - 1), 1.0f), noise(0.0f, 0.05f);
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

// The trainer's own checkpoint: its parameters (a real trainer adds its inner optimizer).
void save_params(const model& m, const std::string& path) {
    std::ofstream os(path, std::ios::binary | std::ios::trunc);
    os.write(reinterpret_cast<const char*>(m.w.data()), dim * sizeof(float));
    os.write(reinterpret_cast<const char*>(m.b.data()), sizeof(float));
    if (!os) throw std::runtime_error("cannot write " + path);
}

void load_params(model& m, const std::string& path) {
    std::ifstream is(path, std::ios::binary);
    is.read(reinterpret_cast<char*>(m.w.data()), dim * sizeof(float));
    is.read(reinterpret_cast<char*>(m.b.data()), sizeof(float));
    if (!is) throw std::runtime_error("cannot read " + path);
}

// Steps [from, to) of one worker. With `resume_from`, the worker first restores its
// parameters and trickle's state from the files a stopped run wrote; with `save_to`, it
// writes them at the end.
void run_worker(trickle::comm::local& comm, model& m, int from, int to, const std::string& save_to,
                const std::string& resume_from) {
    const int r = comm.rank();
    if (!resume_from.empty()) load_params(m, resume_from + ".params");
    auto params = m.params();
    // A resumed run keeps the parameters it restored: no broadcast of rank 0's.
    trickle::diloco<outer_opt> diloco(params, comm, {.interval = 20, .seed = 7, .broadcast_initial = resume_from.empty()},
                                      make_outer());
    if (!resume_from.empty()) trickle::load_checkpoint(diloco, resume_from + ".trickle");
    for (int t = from; t < to; ++t) {
        inner_step(m, r, t);
        diloco.step(trickle::exec::host{});
    }
    if (!save_to.empty()) {
        save_params(m, save_to + ".params");
        trickle::save_checkpoint(diloco, save_to + ".trickle");
    }
}

} // namespace

int main(int argc, char** argv) {
    const std::string dir = argc > 1 ? argv[1] : ".";
    auto file = [&](int r) { return dir + "/diloco_resume_rank" + std::to_string(r); };

    // The reference: one uninterrupted run.
    std::vector<model> straight(workers);
    trickle::comm::run_local(workers, [&](trickle::comm::local& c) { run_worker(c, straight[c.rank()], 0, steps, "", ""); });

    // Stop after 100 steps, saving to files; then a new process would start here.
    std::vector<model> first(workers), second(workers);
    trickle::comm::run_local(workers, [&](trickle::comm::local& c) {
        run_worker(c, first[c.rank()], 0, stop_at, file(c.rank()), "");
    });
    trickle::comm::run_local(workers, [&](trickle::comm::local& c) {
        run_worker(c, second[c.rank()], stop_at, steps, "", file(c.rank()));
    });

    bool same = true;
    for (int r = 0; r < workers; ++r) same = same && straight[r].w == second[r].w && straight[r].b == second[r].b;
    std::printf("DiLoCo, %d workers, %d steps, outer step every 20 (Nesterov, lr 0.7 -> 0.07 along a cosine)\n",
                workers, steps);
    std::printf("  distance to the true model: %.4f after step %d, %.4f at the end\n", distance_to_truth(first[0]),
                stop_at, distance_to_truth(second[0]));
    std::printf("  replicas identical after the last outer step: %s\n",
                second[0].w == second[1].w && second[0].w == second[3].w ? "yes" : "no");
    std::printf("  stopped at step %d and resumed from files; same bits as the uninterrupted run: %s\n", stop_at,
                same ? "yes" : "NO");
    for (int r = 0; r < workers; ++r) {
        std::remove((file(r) + ".params").c_str());
        std::remove((file(r) + ".trickle").c_str());
    }
    return same ? 0 : 1;
}
