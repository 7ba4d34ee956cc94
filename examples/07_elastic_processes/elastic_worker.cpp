// One worker process of an elastic job: DiLoCo (or SPARTA, or SPARTA + DiLoCo) over
// comm::elastic_group, the view in a TCPStore that outlives every worker, each epoch's
// collectives over Gloo.
//
// Start a store, then the workers, each with its own id; kill any of them (SIGKILL) and
// the others carry on; start it again with the same id and it joins, takes the state
// from a live peer (hash-checked) and trains on:
//
//   trickle-store --port 29600 &
//   for i in 0 1 2 3; do elastic_worker --store 127.0.0.1:29600 --id $i --initial 4 & done
//   kill -9 <pid of worker 2>;  elastic_worker --store 127.0.0.1:29600 --id 2 --initial 4
//
// Every worker fits the same linear model y = w·x + b on a shard of its own, with plain
// SGD, and writes its final parameters and what it saw of the membership to --out.
// The --fault options inject failures for the tests (tests/torch/test_elastic_processes.cpp)
// and for measuring (docs/elastic.md): they kill this process with SIGKILL at a chosen
// point, as a crash would.
#include <trickle/torch/elastic_group.hpp>
#include <trickle/trickle.hpp>

#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace {

using namespace std::chrono_literals;

struct args {
    std::string host = "127.0.0.1";
    int port = 29600;
    int id = -1, initial = 4, steps = 120, interval = 10, dim = 64, min_workers = 1;
    int timeout_ms = 3000;
    int liveness_ms = 0;   // elastic_group_options::liveness (0: off)
    int store_recovery_ms = 0; // elastic_group_options::store_recovery (0: off)
    std::string job = "trickle"; // elastic_group_options::job (one per shard, for replicas of many ranks)
    std::string hostname;  // elastic_group_options::hostname: the address Gloo listens on ("": the hostname)
    int shard = 0;         // which shard of the model this rank trains (its data differ per shard)
    std::string algorithm = "diloco";
    std::string fault;     // step:T | allreduce:K | commit:K | transfer | joiner-transfer | corrupt-transfer |
                           // transfer-payload | joiner-transfer-payload
    int hold_at = -1;      // before inner step T, wait until a join request is queued
    int seed = 7;          // the configuration (a joiner with another seed is refused)
    bool tiny = false;     // --inner tiny: an O(1) inner step (for timing the protocol on large states)
    int renew_every = 1;   // elastic_group_options::renew_every
    int step_ms = 0;       // --step-ms: sleep this long each inner step (standing for compute)
    std::string out;
};

[[noreturn]] void usage(const std::string& why) {
    std::fprintf(stderr,
                 "elastic_worker: %s\n"
                 "usage: elastic_worker --id I [--store HOST:PORT] [--initial N] [--steps S] [--interval H]\n"
                 "       [--dim D] [--min-workers M] [--timeout-ms T] [--liveness-ms L] [--job NAME] [--shard S]\n"
                 "       [--hostname ADDR] [--store-recovery-ms R]\n"
                 "       [--algorithm diloco|sparta|sparta_diloco]\n"
                 "       [--fault step:T|allreduce:K|commit:K|transfer|joiner-transfer|corrupt-transfer|\n"
                 "                transfer-payload|joiner-transfer-payload]\n"
                 "       [--hold-at T] [--seed S] [--inner sgd|tiny] [--step-ms MS] [--renew-every K] [--out FILE]\n",
                 why.c_str());
    std::exit(2);
}

int to_int(const std::string& flag, const std::string& v) {
    try {
        std::size_t pos = 0;
        const int x = std::stoi(v, &pos);
        if (pos != v.size()) throw std::invalid_argument(v);
        return x;
    } catch (const std::exception&) {
        usage(flag + " needs an integer, got '" + v + "'");
    }
}

args parse(int argc, char** argv) {
    args a;
    for (int i = 1; i < argc; ++i) {
        const std::string f = argv[i];
        if (i + 1 >= argc) usage("missing the value of " + f);
        const std::string v = argv[++i];
        if (f == "--store") {
            const auto colon = v.rfind(':');
            if (colon == std::string::npos) usage("--store needs HOST:PORT, got '" + v + "'");
            a.host = v.substr(0, colon);
            a.port = to_int(f, v.substr(colon + 1));
        } else if (f == "--id") a.id = to_int(f, v);
        else if (f == "--initial") a.initial = to_int(f, v);
        else if (f == "--steps") a.steps = to_int(f, v);
        else if (f == "--interval") a.interval = to_int(f, v);
        else if (f == "--dim") a.dim = to_int(f, v);
        else if (f == "--min-workers") a.min_workers = to_int(f, v);
        else if (f == "--timeout-ms") a.timeout_ms = to_int(f, v);
        else if (f == "--liveness-ms") a.liveness_ms = to_int(f, v);
        else if (f == "--store-recovery-ms") a.store_recovery_ms = to_int(f, v);
        else if (f == "--job") a.job = v;
        else if (f == "--hostname") a.hostname = v;
        else if (f == "--shard") a.shard = to_int(f, v);
        else if (f == "--algorithm") a.algorithm = v;
        else if (f == "--fault") a.fault = v;
        else if (f == "--hold-at") a.hold_at = to_int(f, v);
        else if (f == "--seed") a.seed = to_int(f, v);
        else if (f == "--out") a.out = v;
        else if (f == "--renew-every") a.renew_every = to_int(f, v);
        else if (f == "--step-ms") {
            a.step_ms = to_int(f, v);
            if (a.step_ms < 0) usage("--step-ms must be >= 0, got '" + v + "'");
        }
        else if (f == "--inner") {
            if (v != "sgd" && v != "tiny") usage("--inner needs sgd or tiny, got '" + v + "'");
            a.tiny = v == "tiny";
        }
        else usage("unknown option " + f);
    }
    if (a.id < 0) usage("--id is required (>= 0)");
    if (a.algorithm != "diloco" && a.algorithm != "sparta" && a.algorithm != "sparta_diloco")
        usage("unknown --algorithm '" + a.algorithm + "'");
    return a;
}

// The injected fault: "kind" or "kind:K".
struct fault {
    std::string kind;
    int at = 0;
    static fault from(const std::string& s) {
        fault f;
        if (s.empty()) return f;
        const auto colon = s.find(':');
        f.kind = s.substr(0, colon);
        if (colon != std::string::npos) f.at = to_int("--fault", s.substr(colon + 1));
        if (f.kind != "step" && f.kind != "allreduce" && f.kind != "commit" && f.kind != "transfer" &&
            f.kind != "joiner-transfer" && f.kind != "corrupt-transfer" && f.kind != "transfer-payload" &&
            f.kind != "joiner-transfer-payload")
            usage("unknown --fault '" + s + "'");
        return f;
    }
};

[[noreturn]] void die() {
    std::fflush(nullptr);
    std::raise(SIGKILL);
    std::abort();
}

// comm::elastic_group with the faults above: forwards everything, and kills this process
// (or damages a received transfer) where the fault says.
class faulty_group {
public:
    using memory_space = trickle::host_space;
    faulty_group(trickle::comm::elastic_group& c, fault f) : c_(c), f_(std::move(f)) {}

    int rank() const { return c_.rank(); }
    int size() const { return c_.size(); }
    int id() const { return c_.id(); }
    std::uint64_t epoch() const { return c_.epoch(); }
    trickle::traffic_counters traffic() const { return c_.traffic(); }
    void synchronize() {}
    void all_reduce_sum(float* d, std::size_t n) {
        if (f_.kind == "allreduce" && ++allreduces_ == f_.at) die();
        c_.all_reduce_sum(d, n);
    }
    void all_gather_bytes(const void* s, void* r, std::size_t b) { c_.all_gather_bytes(s, r, b); }
    void all_gather(const void* s, void* r, std::size_t b) { c_.all_gather(s, r, b); }
    void all_to_all(const void* s, void* r, std::size_t b) { c_.all_to_all(s, r, b); }
    void send_recv(const float* s, std::size_t n, int dst, float* r, std::size_t m, int src) {
        // A transfer's large sections travel by send_recv (comm/byte_stream.hpp): the first
        // piece the donor sends, or the joiner receives.
        if (armed_ && ((f_.kind == "transfer-payload" && n > 0) || (f_.kind == "joiner-transfer-payload" && m > 0)))
            die();
        c_.send_recv(s, n, dst, r, m, src);
    }
    void broadcast(float* d, std::size_t n, int root) {
        // A transfer is the first broadcast after a view that admitted someone.
        if (armed_ && n > 0 && (f_.kind == "transfer" || f_.kind == "joiner-transfer")) die();
        c_.broadcast(d, n, root);
        if (armed_ && n > 0 && f_.kind == "corrupt-transfer" && rank() != root) {
            reinterpret_cast<unsigned char*>(d)[(n * sizeof(float)) / 2] ^= 0x10;
            f_.kind.clear();
        }
        if (n > 0 && f_.kind.find("payload") == std::string::npos) armed_ = false;
    }
    void barrier() { c_.barrier(); }
    trickle::comm::membership_change renew() {
        auto ch = c_.renew();
        armed_ = !ch.joined.empty() && (f_.kind == "transfer" || f_.kind == "transfer-payload");
        return ch;
    }
    trickle::comm::membership_change join() {
        auto ch = c_.join();
        armed_ = f_.kind == "joiner-transfer" || f_.kind == "corrupt-transfer" || f_.kind == "joiner-transfer-payload";
        return ch;
    }
    void leave() { c_.leave(); }
    void commit() {
        c_.commit();
        if (f_.kind == "commit" && ++commits_ == f_.at) die();
    }
    void kill_if_step(int t) const {
        if (f_.kind == "step" && t == f_.at) die();
    }

private:
    trickle::comm::elastic_group& c_;
    fault f_;
    int allreduces_ = 0, commits_ = 0;
    bool armed_ = false;
};
static_assert(trickle::comm::elastic_communicator<faulty_group>);

float truth_w(int i) { return std::cos(0.2f * static_cast<float>(i)); }
constexpr float truth_b = -0.25f;

void inner_step(std::vector<float>& w, std::vector<float>& b, int id, int shard, std::uint64_t t) {
    std::mt19937 rng(static_cast<std::uint32_t>(1000 * id + t + 7777 * shard));
    std::normal_distribution<float> x_dist(0.2f * static_cast<float>(id % 5 - 2), 1.0f), noise(0.0f, 0.05f);
    const std::size_t dim = w.size();
    std::vector<float> gw(dim, 0.0f), x(dim);
    float gb = 0.0f;
    constexpr int batch = 8;
    for (int s = 0; s < batch; ++s) {
        float y = truth_b + noise(rng), pred = b[0];
        for (std::size_t i = 0; i < dim; ++i) {
            x[i] = x_dist(rng);
            y += truth_w(static_cast<int>(i)) * x[i];
            pred += w[i] * x[i];
        }
        const float err = pred - y;
        for (std::size_t i = 0; i < dim; ++i) gw[i] += err * x[i] / batch;
        gb += err / batch;
    }
    for (std::size_t i = 0; i < dim; ++i) w[i] -= 0.05f * gw[i];
    b[0] -= 0.05f * gb;
}

double construct_seconds = 0.0; // how long the algorithm's constructor took (a joiner: admission and state)

template <class Alg>
trickle::membership_stats train(Alg& alg, faulty_group& comm, trickle::comm::elastic_group& group,
                                c10d::Store& store, const args& a, std::vector<float>& w, std::vector<float>& b) {
    std::printf("worker %d: constructed in %.3f s at step %llu%s\n", a.id, construct_seconds, static_cast<unsigned long long>(alg.stats().steps),
                alg.membership().joined > 0 ? " (joined: admission and state transfer)" : "");
    std::fflush(stdout);
    for (auto t = alg.stats().steps; t < static_cast<std::uint64_t>(a.steps); ++t) {
        comm.kill_if_step(static_cast<int>(t));
        if (static_cast<int>(t) == a.hold_at) {
            // Says so in the store (a driver starts the joiner then), and waits for it.
            store.set("trickle-test/holding/" + a.job + "/" + std::to_string(a.id), {'1'});
            while (group.joiners_queued() < 1) std::this_thread::sleep_for(1ms);
        }
        if (a.tiny)
            w[t % w.size()] += 0.001f * static_cast<float>(a.id + 1);
        else
            inner_step(w, b, a.id, a.shard, t);
        if (a.step_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(a.step_ms));
        alg.step(trickle::exec::host{});
    }
    return alg.membership();
}

} // namespace

int main(int argc, char** argv) {
    const args a = parse(argc, argv);
    const fault f = fault::from(a.fault);
    try {
        auto store = trickle::comm::connect_store(a.host, a.port, std::chrono::milliseconds(a.timeout_ms));
        std::vector<float> w(static_cast<std::size_t>(a.dim), 0.0f), b(1, 0.0f);
        trickle::membership_stats ms;
        std::uint64_t rounds = 0, recoveries = 0;
        double recovery_s = 0;
        const auto t0 = std::chrono::steady_clock::now();
        // A joiner whose admission is lost (its donor died during the transfer) joins again
        // through a new handle.
        for (int attempt = 0;; ++attempt) {
            trickle::comm::elastic_group_options eo;
            eo.initial = a.initial;
            eo.timeout = std::chrono::milliseconds(a.timeout_ms);
            eo.liveness = std::chrono::milliseconds(a.liveness_ms);
            eo.job = a.job;
            eo.hostname = a.hostname;
            eo.renew_every = a.renew_every;
            eo.store_recovery = std::chrono::milliseconds(a.store_recovery_ms);
            trickle::comm::elastic_group group(store, a.id, eo);
            faulty_group comm(group, attempt == 0 ? f : fault{});
            trickle::param_group<float> params;
            params.add("w", w.data(), w.size()).add("b", b.data(), b.size());
            const bool join = !group.member();
            // Builds the algorithm (timed: a joiner's constructor is its admission and the
            // state transfer), then trains it.
            const auto run = [&](auto make) {
                const auto c0 = std::chrono::steady_clock::now();
                auto alg = make();
                construct_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - c0).count();
                ms = train(alg, comm, group, *store, a, w, b);
                rounds = alg.stats().exchanges;
                recoveries = group.store_recoveries();
                recovery_s = group.store_recovery_seconds();
            };
            trickle::sparta_options so{.fraction = 0.25, .seed = static_cast<std::uint64_t>(a.seed)};
            trickle::diloco_options dop{.interval = static_cast<std::uint64_t>(a.interval),
                                        .seed = static_cast<std::uint64_t>(a.seed)};
            so.min_workers = dop.min_workers = a.min_workers;
            so.join = dop.join = join;
            try {
                if (a.algorithm == "diloco")
                    run([&] { return trickle::diloco<trickle::outer::nesterov>(params, comm, dop); });
                else if (a.algorithm == "sparta")
                    run([&] { return trickle::sparta<trickle::sampler::uniform>(params, comm, so); });
                else
                    run([&] { return trickle::sparta_diloco<trickle::sampler::uniform>(params, comm, so, dop); });
                break;
            } catch (const trickle::peer_failure& e) {
                if (!join || attempt >= 3) throw;
                std::fprintf(stderr, "worker %d: admission lost (%s); joining again\n", a.id, e.what());
                std::fill(w.begin(), w.end(), 0.0f);
                b[0] = 0.0f;
            }
        }
        const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        std::printf("worker %d: epoch %llu, %d workers, %llu changes (%llu joined, %llu left), %llu rounds retried, "
                    "%llu B of state moved in %.3f s, %.3f s waiting, %.3f s in all, %llu rounds, %llu store recoveries (%.3f s)\n",
                    a.id, static_cast<unsigned long long>(ms.epoch), ms.workers,
                    static_cast<unsigned long long>(ms.changes), static_cast<unsigned long long>(ms.joined),
                    static_cast<unsigned long long>(ms.left), static_cast<unsigned long long>(ms.rounds_retried),
                    static_cast<unsigned long long>(ms.state_bytes), ms.transfer_seconds, ms.wait_seconds, seconds,
                    static_cast<unsigned long long>(rounds), static_cast<unsigned long long>(recoveries), recovery_s);
        if (!a.out.empty()) {
            std::ofstream out(a.out, std::ios::binary);
            out.write(reinterpret_cast<const char*>(w.data()), static_cast<std::streamsize>(w.size() * sizeof(float)));
            out.write(reinterpret_cast<const char*>(b.data()), sizeof(float));
            const std::uint64_t counts[4] = {ms.epoch, ms.joined, ms.left, ms.rounds_retried};
            out.write(reinterpret_cast<const char*>(counts), sizeof counts);
            if (!out) throw std::runtime_error("cannot write " + a.out);
        }
        return 0;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "worker %d: %s\n", a.id, e.what());
        return 1;
    }
}
