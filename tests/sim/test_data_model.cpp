// tests/sim/test_data_model.cpp: the simulator's corpus, shards, matrix product, model gradients, AdamW and replica measures.
#include "corpus.hpp"
#include "gemm.hpp"
#include "model.hpp"
#include "replicas.hpp"
#include "rng.hpp"
#include "sim_test_support.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>
#include <string>
#include <vector>

using namespace trickle_sim;

TEST_CASE("corpus: the generated text is deterministic per seed and has sentence structure") {
    const std::string a = generate_corpus(7, 30'000), b = generate_corpus(7, 30'000), c = generate_corpus(8, 30'000);
    CHECK(a.size() == 30'000);
    CHECK(a == b);
    CHECK(a != c);
    const auto count = [&](char ch) { return std::count(a.begin(), a.end(), ch); };
    CHECK(count('.') > 300); // sentences end
    CHECK(count('\n') > 50); // paragraphs
    CHECK(count('?') > 10);  // questions
    CHECK(count('"') > 10);  // quoted speech
    // A sentence starts with a capital letter, or with a quote and a capital letter.
    for (std::size_t i = 0; i + 3 < a.size(); ++i)
        if (a[i] == '.' && a[i + 1] == ' ') {
            const std::size_t first = a[i + 2] == '"' ? i + 3 : i + 2;
            REQUIRE(std::isupper(static_cast<unsigned char>(a[first])));
        }
    // Words repeat (a Zipfian lexicon), so there is something to learn.
    std::set<std::string> words;
    std::size_t total = 0;
    for (std::size_t i = 0; i < a.size();) {
        while (i < a.size() && !std::isalpha(static_cast<unsigned char>(a[i]))) ++i;
        std::size_t j = i;
        while (j < a.size() && std::isalpha(static_cast<unsigned char>(a[j]))) ++j;
        if (j > i) {
            words.insert(a.substr(i, j - i));
            ++total;
        }
        i = j;
    }
    CHECK(total > 10 * words.size() / 2);
    CHECK(words.size() > 100);
}

TEST_CASE("dataset: vocabulary, held-out split and shards") {
    sim_config cfg = sim_test::tiny_config(3);
    for (auto mode : {shard_mode::iid, shard_mode::non_iid}) {
        CAPTURE(name_of(mode));
        cfg.shards = mode;
        const std::string text = generate_corpus(cfg.seed, 20'000);
        const dataset d = make_dataset(text, "test", cfg, "test");
        REQUIRE(d.tokens.size() == text.size());
        for (std::size_t i = 0; i < text.size(); ++i)
            REQUIRE(d.alphabet[d.tokens[i]] == static_cast<unsigned char>(text[i]));
        CHECK(std::is_sorted(d.alphabet.begin(), d.alphabet.end()));
        CHECK(d.train_end == text.size() - text.size() / 10);

        // Shards are disjoint whole sequences of training targets, as equal as possible.
        REQUIRE(d.shards.size() == 3);
        std::set<std::uint32_t> seen;
        std::size_t smallest = d.shards[0].size(), largest = 0;
        for (const auto& s : d.shards) {
            CHECK(s.size() % shard_sequence == 0);
            smallest = std::min(smallest, s.size());
            largest = std::max(largest, s.size());
            for (auto p : s) {
                REQUIRE(p >= static_cast<std::uint32_t>(cfg.model.context));
                REQUIRE(p < d.train_end);
                REQUIRE(seen.insert(p).second);
            }
        }
        CHECK(largest - smallest <= shard_sequence);
        CHECK(seen.size() == (d.train_end - cfg.model.context) / shard_sequence * shard_sequence);
        const bool contiguous = std::is_sorted(d.shards[0].begin(), d.shards[0].end()) &&
                                d.shards[0].back() < d.shards[1].front() && d.shards[1].back() < d.shards[2].front();
        CHECK(contiguous == (mode == shard_mode::non_iid));

        // Held-out positions, contexts included, lie after the training text.
        CHECK(d.eval_positions.size() == 256);
        for (auto p : d.eval_positions) REQUIRE(p >= d.train_end + cfg.model.context);
        CHECK(std::is_sorted(d.eval_positions.begin(), d.eval_positions.end()));
    }
}

TEST_CASE("dataset: a text too small to shard, or with one distinct byte, is refused") {
    sim_config cfg = sim_test::tiny_config(4);
    const std::size_t min = minimum_text_size(4, cfg.model.context);
    const std::string text = generate_corpus(1, 20'000);
    CHECK_NOTHROW(make_dataset(text.substr(0, min), "t", cfg, "--data t"));
    const std::string expected = "--data t: " + std::to_string(min - 1) + " bytes are too few to shard over 4 workers";
    CHECK_THROWS_WITH_AS(make_dataset(text.substr(0, min - 1), "t", cfg, "--data t"),
                         doctest::Contains(expected.c_str()), usage_error);
    CHECK_THROWS_WITH_AS(make_dataset(std::string(min, 'a'), "t", cfg, "--data t"),
                         doctest::Contains("single distinct byte"), usage_error);
    // More workers need more text.
    CHECK(minimum_text_size(8, 4) > minimum_text_size(4, 4));
}

TEST_CASE("dataset: --data reads a file; missing and empty files are errors") {
    sim_config cfg = sim_test::tiny_config(2);
    const std::string text = generate_corpus(3, 20'000);
    const sim_test::temp_file f("corpus.txt", text);
    cfg.data_file = f.path();
    const dataset d = prepare_data(cfg);
    CHECK(d.tokens.size() == text.size());
    CHECK(d.source == f.path());
    cfg.data_file = f.path() + ".missing";
    CHECK_THROWS_WITH_AS(prepare_data(cfg), doctest::Contains("does not exist"), usage_error);
}

namespace {

// Plain triple loop: the reference for both gemm paths.
std::vector<float> reference_gemm(trans ta, trans tb, int M, int N, int K, float alpha, const std::vector<float>& A,
                                  const std::vector<float>& B, float beta, std::vector<float> C) {
    for (int i = 0; i < M; ++i)
        for (int j = 0; j < N; ++j) {
            double s = 0;
            for (int k = 0; k < K; ++k) {
                const float a = ta == trans::no ? A[static_cast<std::size_t>(i * K + k)] : A[static_cast<std::size_t>(k * M + i)];
                const float b = tb == trans::no ? B[static_cast<std::size_t>(k * N + j)] : B[static_cast<std::size_t>(j * K + k)];
                s += static_cast<double>(a) * b;
            }
            auto& c = C[static_cast<std::size_t>(i * N + j)];
            c = static_cast<float>(alpha * s + (beta == 0.0f ? 0.0 : beta * static_cast<double>(c)));
        }
    return C;
}

} // namespace

TEST_CASE("gemm: the blocked loops and the BLAS path match a plain triple loop") {
    rng g(5);
    for (auto [M, N, K] : {std::tuple{1, 1, 1}, std::tuple{3, 5, 7}, std::tuple{17, 130, 260}, std::tuple{64, 520, 9}}) {
        for (auto ta : {trans::no, trans::yes})
            for (auto tb : {trans::no, trans::yes})
                for (auto [alpha, beta] : {std::pair{1.0f, 0.0f}, std::pair{0.5f, 1.0f}, std::pair{-2.0f, 0.25f}}) {
                    std::vector<float> A(static_cast<std::size_t>(M * K)), B(static_cast<std::size_t>(K * N)),
                        C(static_cast<std::size_t>(M * N));
                    for (auto* v : {&A, &B, &C})
                        for (auto& x : *v) x = static_cast<float>(g.normal());
                    const auto want = reference_gemm(ta, tb, M, N, K, alpha, A, B, beta, C);
                    const int lda = ta == trans::no ? K : M, ldb = tb == trans::no ? N : K;
                    auto blocked = C, dispatched = C;
                    blocked_gemm(ta, tb, M, N, K, alpha, A.data(), lda, B.data(), ldb, beta, blocked.data(), N);
                    gemm(ta, tb, M, N, K, alpha, A.data(), lda, B.data(), ldb, beta, dispatched.data(), N);
                    for (std::size_t i = 0; i < want.size(); ++i) {
                        const double tol = 1e-4 * (1 + std::abs(want[i])) * std::sqrt(static_cast<double>(K));
                        REQUIRE(std::abs(blocked[i] - want[i]) <= tol);
                        REQUIRE(std::abs(dispatched[i] - want[i]) <= tol);
                    }
                }
    }
}

TEST_CASE("model: the same seed gives the same initialisation; the layout covers every parameter once") {
    const mlp m({.context = 3, .embed = 2, .hidden = 5, .layers = 2}, 7);
    CHECK(m.size() == 7 * 2 + (6 * 5 + 5) + (5 * 5 + 5) + (5 * 7 + 7));
    std::size_t next = 0;
    for (const auto& t : m.tensors()) {
        CHECK(t.offset == next);
        next += t.size();
        CHECK(t.decay == (t.name.find("bias") == std::string::npos));
    }
    CHECK(next == m.size());
    std::vector<float> a(m.size()), b(m.size()), c(m.size());
    m.init(a, 1);
    m.init(b, 1);
    m.init(c, 2);
    CHECK(a == b);
    CHECK(a != c);
}

TEST_CASE("model: backward matches finite differences of the loss") {
    for (int layers : {1, 2}) {
        CAPTURE(layers);
        const std::string text = generate_corpus(11, 20'000);
        sim_config cfg = sim_test::tiny_config(1);
        cfg.model = {.context = 3, .embed = 3, .hidden = 6, .layers = layers};
        const dataset d = make_dataset(text, "t", cfg, "t");
        const mlp m(cfg.model, d.vocab());
        std::vector<float> params(m.size()), grads(m.size()), scratch(m.size());
        m.init(params, 4);
        // Larger output weights than the initialisation, so every tensor's gradient is sizeable.
        rng g(9);
        for (std::size_t i = m.output_weight().offset; i < m.output_weight().offset + m.output_weight().size(); ++i)
            params[i] = static_cast<float>(0.5 * g.normal());
        mlp_workspace ws(m, 16);
        const std::vector<std::uint32_t> batch(d.shards[0].begin(), d.shards[0].begin() + 16);
        ws.train_step(params.data(), grads.data(), d.tokens.data(), batch.data(), 16);
        auto loss_at = [&](const std::vector<float>& p) {
            return ws.loss_sum(p.data(), d.tokens.data(), batch.data(), batch.size()) / 16.0;
        };
        // Check a few coordinates of every tensor (the embedding rows the batch uses).
        for (const auto& t : m.tensors()) {
            std::vector<std::size_t> coords;
            for (std::size_t i = 0; i < t.size() && coords.size() < 6; i += 1 + t.size() / 6) coords.push_back(t.offset + i);
            if (&t == &m.tensors().front()) {
                coords.clear();
                const std::size_t tok = d.tokens[batch[0] - 1];
                for (int e = 0; e < 3; ++e) coords.push_back(t.offset + tok * 3 + static_cast<std::size_t>(e));
            }
            for (std::size_t i : coords) {
                CAPTURE(t.name);
                CAPTURE(i);
                const float h = 1e-2f;
                auto plus = params, minus = params;
                plus[i] += h;
                minus[i] -= h;
                const double numeric = (loss_at(plus) - loss_at(minus)) / (2.0 * h);
                CHECK(grads[i] == doctest::Approx(numeric).epsilon(0.02).scale(0.01));
            }
        }
    }
}

TEST_CASE("model: training on the generated corpus lowers the loss") {
    sim_config cfg = sim_test::tiny_config(1);
    const dataset d = make_dataset(generate_corpus(cfg.seed, 20'000), "t", cfg, "t");
    const mlp m(cfg.model, d.vocab());
    std::vector<float> params(m.size()), grads(m.size());
    m.init(params, 1);
    mlp_workspace ws(m, 32);
    adamw opt(m, 0.0f);
    const auto eval = [&] {
        return ws.loss_sum(params.data(), d.tokens.data(), d.eval_positions.data(), d.eval_positions.size()) /
               static_cast<double>(d.eval_positions.size());
    };
    const double before = eval();
    CHECK(before == doctest::Approx(std::log(d.vocab())).epsilon(0.1)); // near uniform at the start
    rng g(3);
    std::vector<std::uint32_t> batch(32);
    for (int t = 0; t < 150; ++t) {
        for (auto& p : batch) p = d.shards[0][g.below(d.shards[0].size())];
        ws.train_step(params.data(), grads.data(), d.tokens.data(), batch.data(), 32);
        opt.step(params.data(), grads.data(), 1e-2f);
    }
    CHECK(eval() < before - 0.7);
}

TEST_CASE("adamw: the first step moves each parameter by lr against its gradient's sign; decay spares biases") {
    const mlp m({.context = 1, .embed = 1, .hidden = 1, .layers = 1}, 2);
    std::vector<float> p(m.size(), 1.0f), g(m.size());
    for (std::size_t i = 0; i < g.size(); ++i) g[i] = i % 2 ? 0.3f : -2.0f;
    adamw opt(m, 0.5f);
    opt.step(p.data(), g.data(), 0.1f);
    for (const auto& t : m.tensors())
        for (std::size_t i = t.offset; i < t.offset + t.size(); ++i) {
            const float decayed = t.decay ? 1.0f - 0.1f * 0.5f : 1.0f;
            CHECK(p[i] == doctest::Approx(decayed - 0.1f * (g[i] > 0 ? 1.0f : -1.0f)).epsilon(1e-5));
        }
    CHECK(opt.steps() == 1);
}

TEST_CASE("learning rate: linear warm-up, then constant") {
    sim_config c;
    c.lr = 0.01f;
    c.warmup = 10;
    CHECK(learning_rate(c, 1) == doctest::Approx(0.001));
    CHECK(learning_rate(c, 5) == doctest::Approx(0.005));
    CHECK(learning_rate(c, 10) == doctest::Approx(0.01));
    CHECK(learning_rate(c, 1000) == doctest::Approx(0.01));
    c.warmup = 0;
    CHECK(learning_rate(c, 1) == doctest::Approx(0.01));
}

TEST_CASE("replicas: averaging and the correlation of changes") {
    const std::vector<float> origin{1, 1, 1, 1}, a{2, 3, 1, 0}, b{3, 5, 1, -1}, c{0, -1, 1, 2};
    const std::vector<const float*> reps{a.data(), b.data(), c.data()};
    std::vector<float> avg(4);
    average_slice(reps, avg.data(), 0, 2);
    average_slice(reps, avg.data(), 2, 4);
    CHECK(avg == std::vector<float>{5.0f / 3, 7.0f / 3, 1, 1.0f / 3});

    // b's change is twice a's: perfectly correlated; c's is the negation of a's.
    CHECK(change_correlation(a.data(), b.data(), origin.data(), 4) == doctest::Approx(1.0));
    CHECK(change_correlation(a.data(), c.data(), origin.data(), 4) == doctest::Approx(-1.0));
    CHECK(change_correlation(a.data(), a.data(), origin.data(), 4) == 1.0);
    CHECK(change_correlation(origin.data(), origin.data(), origin.data(), 4) == 1.0); // identical, no change
    const std::vector<float> shifted{2, 2, 2, 2};
    CHECK(std::isnan(change_correlation(shifted.data(), a.data(), origin.data(), 4))); // no variance: undefined
    // A hand-computed value: changes (1,2,0,-1) and (0,1,1,0).
    const std::vector<float> d{1, 2, 2, 1};
    const double mx = 0.5, my = 0.5;
    const double xs[] = {1, 2, 0, -1}, ys[] = {0, 1, 1, 0};
    double sxy = 0, sxx = 0, syy = 0;
    for (int i = 0; i < 4; ++i) {
        sxy += (xs[i] - mx) * (ys[i] - my);
        sxx += (xs[i] - mx) * (xs[i] - mx);
        syy += (ys[i] - my) * (ys[i] - my);
    }
    CHECK(change_correlation(a.data(), d.data(), origin.data(), 4) == doctest::Approx(sxy / std::sqrt(sxx * syy)));

    CHECK(replica_pairs(4).size() == 6);
    CHECK(replica_pairs(1).empty());
    const double mean = (1.0 + (-1.0) + (-1.0)) / 3.0; // (a,b), (a,c), (b,c)
    CHECK(mean_pairwise_correlation(reps, origin.data(), 4) == doctest::Approx(mean));
    CHECK(mean_pairwise_correlation(std::vector<const float*>{a.data()}, origin.data(), 4) == 1.0);
}

TEST_CASE("rng: deterministic streams, bounded draws, standard normal moments") {
    rng a = rng::stream(1, 2), b = rng::stream(1, 2), c = rng::stream(1, 3);
    CHECK(a.next() == b.next());
    CHECK(a.next() != c.next());
    rng g(77);
    double sum = 0, sq = 0;
    const int n = 20000;
    for (int i = 0; i < n; ++i) {
        REQUIRE(g.below(7) < 7);
        const double u = g.uniform();
        REQUIRE((u >= 0 && u < 1));
        const double z = g.normal();
        sum += z;
        sq += z * z;
    }
    CHECK(std::abs(sum / n) < 0.05);
    CHECK(sq / n == doctest::Approx(1.0).epsilon(0.05));
}
