// A libtorch character model trained by 4 workers with trickle: SPARTA, DiLoCo, or both.
//
// Each worker is a thread with its own model, optimizer and data shard, joined to the
// others by a torch.distributed Gloo process group (c10d::ProcessGroupGloo over an
// in-memory store), which trickle uses through comm::process_group, exactly as a
// multi-process trainer would with a TCPStore. The program checks what a user relies on:
//   - after construction every replica holds rank 0's weights (the initial broadcast),
//   - after a DiLoCo outer step every replica holds the same bits,
//   - trickle's byte counts are what the cost model says,
//   - the loss goes down.
//
//   libtorch_trainer [--workers N] [--steps S] [--algo sparta|diloco|sparta-diloco|all]
#include <trickle/algorithm/cost.hpp>
#include <trickle/torch.hpp>
#include <trickle/torch/gloo.hpp>

#include <ATen/CPUGeneratorImpl.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/torch.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace {

const std::string text =
    "it is a truth universally acknowledged, that a single man in possession of a good fortune, must be in want "
    "of a wife. however little known the feelings or views of such a man may be on his first entering a "
    "neighbourhood, this truth is so well fixed in the minds of the surrounding families, that he is considered "
    "the rightful property of some one or other of their daughters. my dear mr. bennet, said his lady to him one "
    "day, have you heard that netherfield park is let at last? mr. bennet replied that he had not. but it is, "
    "returned she; for mrs. long has just been here, and she told me all about it.";

constexpr int context = 8;

// Next-character prediction from the previous `context` characters.
struct char_modelImpl : torch::nn::Module {
    torch::nn::Embedding embed{nullptr};
    torch::nn::Linear hidden{nullptr}, out{nullptr};
    explicit char_modelImpl(int vocab) {
        embed = register_module("embed", torch::nn::Embedding(vocab, 16));
        hidden = register_module("hidden", torch::nn::Linear(16 * context, 128));
        out = register_module("out", torch::nn::Linear(128, vocab));
    }
    at::Tensor forward(const at::Tensor& x) {
        return out(torch::tanh(hidden(embed(x).reshape({x.size(0), -1}))));
    }
};
TORCH_MODULE(char_model);

struct batch {
    at::Tensor x, y;
};

// Worker `rank`'s batch at `step`: its own positions of the text (a data shard by seed).
batch sample(const std::vector<std::int64_t>& ids, int rank, int step, int size) {
    auto gen = at::detail::createCPUGenerator(static_cast<std::uint64_t>(rank) * 100003 + static_cast<std::uint64_t>(step));
    const auto starts = at::randint(static_cast<std::int64_t>(ids.size()) - context - 1, {size}, gen, at::kLong);
    at::Tensor x = at::empty({size, context}, at::kLong), y = at::empty({size}, at::kLong);
    for (int b = 0; b < size; ++b) {
        const std::int64_t s = starts[b].item<std::int64_t>();
        for (int k = 0; k < context; ++k) x[b][k] = ids[static_cast<std::size_t>(s + k)];
        y[b] = ids[static_cast<std::size_t>(s + context)];
    }
    return {x, y};
}

// FNV-1a over every parameter's bytes: equal hashes on all ranks = identical replicas.
std::uint64_t weights_hash(const torch::nn::Module& m) {
    std::uint64_t h = 0xcbf29ce484222325ull;
    for (const auto& p : m.parameters()) {
        const auto* b = static_cast<const unsigned char*>(p.data_ptr());
        for (std::size_t i = 0; i < static_cast<std::size_t>(p.nbytes()); ++i) h = (h ^ b[i]) * 0x100000001b3ull;
    }
    return h;
}

// Every rank holds the same weights (checked through the communicator itself).
void require_identical(trickle::comm::process_group& comm, const torch::nn::Module& m, const char* when) {
    const std::uint64_t mine = weights_hash(m);
    std::vector<std::uint64_t> all(static_cast<std::size_t>(comm.size()));
    comm.all_gather_bytes(&mine, all.data(), sizeof mine);
    for (std::size_t r = 1; r < all.size(); ++r)
        if (all[r] != all[0]) throw std::runtime_error(std::string("replicas differ ") + when);
}

struct settings {
    int workers = 4;
    int steps = 120;
    std::string algo = "all";
};

settings parse(int argc, char** argv) {
    settings s;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        auto value = [&]() -> std::string {
            if (i + 1 >= argc) throw std::invalid_argument("missing value after " + a);
            return argv[++i];
        };
        if (a == "--workers")
            s.workers = std::stoi(value());
        else if (a == "--steps")
            s.steps = std::stoi(value());
        else if (a == "--algo")
            s.algo = value();
        else
            throw std::invalid_argument("unknown option '" + a + "' (options: --workers N --steps S --algo sparta|diloco|sparta-diloco|all)");
    }
    if (s.workers < 1 || s.steps < 1) throw std::invalid_argument("--workers and --steps must be >= 1");
    if (s.algo != "sparta" && s.algo != "diloco" && s.algo != "sparta-diloco" && s.algo != "all")
        throw std::invalid_argument("unknown --algo '" + s.algo + "'");
    return s;
}

// Trains with `algo` on every worker; returns rank 0's final loss.
void train(const settings& cfg, const std::string& algo) {
    std::vector<std::int64_t> ids(text.size());
    std::string vocab;
    for (char ch : text)
        if (vocab.find(ch) == std::string::npos) vocab.push_back(ch);
    for (std::size_t i = 0; i < text.size(); ++i) ids[i] = static_cast<std::int64_t>(vocab.find(text[i]));

    auto store = c10::make_intrusive<c10d::HashStore>();
    std::mutex print;
    std::vector<std::string> errors(static_cast<std::size_t>(cfg.workers));
    std::vector<std::thread> threads;
    for (int r = 0; r < cfg.workers; ++r)
        threads.emplace_back([&, r] {
            try {
                trickle::comm::process_group comm(trickle::comm::gloo_group(store, r, cfg.workers));

                char_model model(static_cast<int>(vocab.size())); // different random weights on every thread
                torch::optim::Adam opt(model->parameters(), torch::optim::AdamOptions(3e-3));
                // The algorithm over the whole model; construction gives every worker rank 0's weights.
                trickle::torch::sparta<trickle::sampler::permutation> sparta;
                trickle::torch::diloco<trickle::outer::nesterov> diloco;
                trickle::torch::sparta_diloco<trickle::sampler::permutation> both;
                const int H = 20;
                if (algo == "sparta")
                    sparta = {model, comm, {.fraction = 0.01, .seed = 42}};
                else if (algo == "diloco")
                    diloco = {model, comm, {.interval = H, .seed = 42}, {.lr = 0.7f, .momentum = 0.9f}};
                else
                    both = {model, comm, {.fraction = 0.005, .seed = 42}, {.interval = H, .seed = 42}, {}, {}, {},
                            {.lr = 0.7f, .momentum = 0.9f}};
                require_identical(comm, *model, "after construction");

                float first = 0, last = 0;
                for (int t = 0; t < cfg.steps; ++t) {
                    const batch b = sample(ids, r, t, 32);
                    opt.zero_grad();
                    at::Tensor loss = torch::nn::functional::cross_entropy(model->forward(b.x), b.y);
                    loss.backward();
                    opt.step();
                    if (sparta) sparta.step(); // after optimizer.step(), before the next forward
                    if (diloco) diloco.step();
                    if (both) both.step();
                    (t == 0 ? first : last) = loss.item<float>();
                }
                const trickle::exchange_stats st = sparta ? sparta.stats() : diloco ? diloco.stats() : both.stats();
                if (algo != "sparta" && cfg.steps % H == 0) require_identical(comm, *model, "after the last outer step");
                if (!(last < first)) throw std::runtime_error("the loss did not go down");
                if (algo == "diloco") {
                    // One outer step = the workers' 16-byte reports (who takes part), then one
                    // all-reduce of every parameter's delta and the weight (trickle::cost).
                    const std::size_t n = trickle::torch::params(*model).elements();
                    const std::uint64_t expect = static_cast<std::uint64_t>(cfg.steps / H) *
                                                 trickle::cost::diloco_round(n, cfg.workers, r);
                    if (st.total.bytes_sent != expect) throw std::runtime_error("bytes differ from the cost model");
                }
                if (r == 0) {
                    std::lock_guard<std::mutex> lock(print);
                    std::printf("%-14s loss %.3f -> %.3f   sent %8.1f KB  (initial broadcast %6.1f KB)   %6.0fx less than "
                                "dense all-reduce\n",
                                algo.c_str(), first, last, static_cast<double>(st.total.bytes_sent) / 1e3,
                                static_cast<double>(st.initial.bytes_sent) / 1e3, st.reduction());
                }
            } catch (const std::exception& e) {
                errors[static_cast<std::size_t>(r)] = e.what();
            }
        });
    for (auto& t : threads) t.join();
    for (std::size_t r = 0; r < errors.size(); ++r)
        if (!errors[r].empty()) throw std::runtime_error(algo + ", rank " + std::to_string(r) + ": " + errors[r]);
}

} // namespace

int main(int argc, char** argv) {
    try {
        const settings cfg = parse(argc, argv);
        torch::set_num_threads(1); // the workers are the parallelism
        for (const char* algo : {"sparta", "diloco", "sparta-diloco"})
            if (cfg.algo == "all" || cfg.algo == algo) train(cfg, algo);
        std::printf("ok: replicas started from rank 0's weights, matched after every outer step, bytes as modelled\n");
        return 0;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "libtorch_trainer: %s\n", e.what());
        return 1;
    }
}
