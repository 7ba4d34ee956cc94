// tests/sim/test_gpt.cpp: the GPT of --model gpt: layout, gradients against finite differences of an fp64
// reference, the loss and gradients of a PyTorch build of the same model, threads, and training.
#include "corpus.hpp"
#include "gpt.hpp"
#include "model.hpp"
#include "sim_test_support.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numbers>
#include <string>
#include <vector>

using namespace trickle_sim;

namespace {

// The loss of gpt.hpp's architecture written out plainly, a scalar at a time, over any
// floating type: double for the finite differences. Shares nothing with the float code
// but the layout (tensor offsets) and the definition of a window.
template <class S>
S reference_loss(const gpt& m, const std::vector<S>& w, const std::vector<std::uint8_t>& tokens,
                 const std::vector<std::uint32_t>& positions) {
    const int T = m.context(), D = m.d_model(), H = m.heads(), hd = m.head_dim(), V = m.vocab();
    auto at = [&](const tensor_slot& t, int r, int c) {
        return w[t.offset + static_cast<std::size_t>(r) * t.cols + static_cast<std::size_t>(c)];
    };
    using mat = std::vector<std::vector<S>>;
    auto norm = [&](const mat& x, const tensor_slot& gain, const tensor_slot& bias) {
        mat y = x;
        for (int t = 0; t < T; ++t) {
            S mu = 0, var = 0;
            for (int i = 0; i < D; ++i) mu += x[t][i];
            mu /= D;
            for (int i = 0; i < D; ++i) var += (x[t][i] - mu) * (x[t][i] - mu);
            var /= D;
            for (int i = 0; i < D; ++i)
                y[t][i] = (x[t][i] - mu) / std::sqrt(var + S(1e-5)) * at(gain, 0, i) + at(bias, 0, i);
        }
        return y;
    };
    auto linear = [&](const mat& x, const tensor_slot& weight, const tensor_slot& bias) {
        mat y(static_cast<std::size_t>(T), std::vector<S>(weight.cols));
        for (int t = 0; t < T; ++t)
            for (int o = 0; o < static_cast<int>(weight.cols); ++o) {
                S s = at(bias, 0, o);
                for (int i = 0; i < static_cast<int>(weight.rows); ++i) s += x[t][i] * at(weight, i, o);
                y[t][o] = s;
            }
        return y;
    };
    S total = 0;
    for (std::uint32_t p : positions) {
        mat x(static_cast<std::size_t>(T), std::vector<S>(static_cast<std::size_t>(D)));
        for (int t = 0; t < T; ++t)
            for (int i = 0; i < D; ++i)
                x[t][i] = at(m.tok_embedding(), tokens[p - T + t], i) + at(m.pos_embedding(), t, i);
        for (int l = 0; l < m.layers(); ++l) {
            const auto& b = m.block(l);
            const mat qkv = linear(norm(x, m.slot(b.ln1_w), m.slot(b.ln1_b)), m.slot(b.qkv_w), m.slot(b.qkv_b));
            mat att(static_cast<std::size_t>(T), std::vector<S>(static_cast<std::size_t>(D), S(0)));
            for (int h = 0; h < H; ++h)
                for (int t = 0; t < T; ++t) {
                    std::vector<S> score(static_cast<std::size_t>(t) + 1);
                    S mx = -1e300;
                    for (int s = 0; s <= t; ++s) {
                        S dot = 0;
                        for (int i = 0; i < hd; ++i) dot += qkv[t][h * hd + i] * qkv[s][D + h * hd + i];
                        score[s] = dot / std::sqrt(S(hd));
                        mx = std::max(mx, score[s]);
                    }
                    S sum = 0;
                    for (auto& e : score) sum += e = std::exp(e - mx);
                    for (int s = 0; s <= t; ++s)
                        for (int i = 0; i < hd; ++i) att[t][h * hd + i] += score[s] / sum * qkv[s][2 * D + h * hd + i];
                }
            const mat proj = linear(att, m.slot(b.proj_w), m.slot(b.proj_b));
            for (int t = 0; t < T; ++t)
                for (int i = 0; i < D; ++i) x[t][i] += proj[t][i];
            mat hidden = linear(norm(x, m.slot(b.ln2_w), m.slot(b.ln2_b)), m.slot(b.fc_w), m.slot(b.fc_b));
            const S c = std::sqrt(S(2) / std::numbers::pi_v<S>);
            for (auto& row : hidden)
                for (auto& u : row) u = S(0.5) * u * (S(1) + std::tanh(c * (u + S(0.044715) * u * u * u)));
            const mat out = linear(hidden, m.slot(b.out_w), m.slot(b.out_b));
            for (int t = 0; t < T; ++t)
                for (int i = 0; i < D; ++i) x[t][i] += out[t][i];
        }
        const mat y = norm(x, m.lnf_weight(), m.lnf_bias());
        for (int t = 0; t < T; ++t) {
            std::vector<S> logits(static_cast<std::size_t>(V));
            for (int v = 0; v < V; ++v) {
                S s = 0;
                for (int i = 0; i < D; ++i) s += y[t][i] * at(m.tok_embedding(), v, i);
                logits[v] = s;
            }
            const S mx = *std::max_element(logits.begin(), logits.end());
            S sum = 0;
            for (S l : logits) sum += std::exp(l - mx);
            total += std::log(sum) + mx - logits[tokens[p - T + 1 + t]];
        }
    }
    return total / static_cast<S>(positions.size() * static_cast<std::size_t>(T));
}

// The configuration gpt_reference.py builds.
model_config reference_config() {
    model_config c;
    c.kind = model_kind::gpt;
    c.context = 6;
    c.d_model = 8;
    c.heads = 2;
    c.layers = 2;
    return c;
}
constexpr int reference_vocab = 7;

// gpt_reference.py's formula weights: element i of tensor j.
std::vector<float> formula_weights(const gpt& m) {
    std::vector<float> w(m.size());
    for (std::size_t j = 0; j < m.tensors().size(); ++j) {
        const tensor_slot& t = m.tensors()[j];
        const bool norm = t.name.starts_with("ln") || t.name.find(".ln") != std::string::npos;
        const bool bias = t.name.ends_with("bias");
        for (std::size_t i = 0; i < t.size(); ++i) {
            const double s = std::sin(1.3 * static_cast<double>(i) + 0.7 * static_cast<double>(j) + 0.1);
            const double v = norm ? (bias ? 0.1 * s : 1.0 + 0.2 * s) : bias ? 0.1 * s : 0.5 * s;
            w[t.offset + i] = static_cast<float>(v);
        }
    }
    return w;
}

std::vector<std::uint8_t> formula_tokens() {
    std::vector<std::uint8_t> tok(16);
    for (int i = 0; i < 16; ++i)
        tok[static_cast<std::size_t>(i)] = static_cast<std::uint8_t>((3 * i * i + 5 * i + 1) % reference_vocab);
    return tok;
}

const std::vector<std::uint32_t> reference_positions{6, 13};

struct recorded_grad {
    const char* name;
    double first, middle, last, norm;
};

// Recorded from tests/sim/gpt_reference.py (PyTorch, float64). To regenerate after a
// deliberate change of the architecture or the formulas, run
//     /usr/bin/python3 tests/sim/gpt_reference.py
// and replace this block with its output.
// torch 1.13.0a0, float64: /usr/bin/python3 tests/sim/gpt_reference.py
constexpr double recorded_loss = 3.2570445980070879;
// name, gradient element 0, element size/2, last element, L2 norm
const recorded_grad recorded[] = {
    {"tok_embedding", -0.068226219797910298, 1.3497043778494129, 0.089670060128563892, 6.8918968952857407},
    {"pos_embedding", -0.23418350859529447, -0.22791475017212542, 1.1415789443545918, 7.2789262005422186},
    {"block0.ln1.weight", 0.17626919191333681, -0.02217423939665614, -0.13010499041585152, 0.4912152027365706},
    {"block0.ln1.bias", -0.30846029767017519, -0.24483146217484017, -0.076646246211159841, 0.69985205715759746},
    {"block0.attn.qkv.weight", 0.047805545848394332, 0.087810477139409857, -0.69301229000289555, 6.1973354977425732},
    {"block0.attn.qkv.bias", 0.04455745412378085, 4.3368086899420177e-18, -1.2512685246871857, 4.3573521425245954},
    {"block0.attn.proj.weight", -0.58749824431717479, -0.15723343276287549, -0.27437061731655049, 3.647973670029538},
    {"block0.attn.proj.bias", -2.5039115094938147, 2.6989083361832185, 1.7444689155135407, 7.182083536541823},
    {"block0.ln2.weight", 0.59464009465232393, -0.11561477148573043, -0.061067434590327159, 1.3132106907889618},
    {"block0.ln2.bias", -0.19901953750412282, 0.18411244944065924, 0.0035478862993786886, 0.48318938378142656},
    {"block0.mlp.fc.weight", 1.0682329937793271, -0.027627271043537047, 0.31232476082247668, 11.933942733458226},
    {"block0.mlp.fc.bias", -0.92150455754405003, -0.53417769170108054, -0.47058319491949818, 3.7659480063364863},
    {"block0.mlp.proj.weight", 0.15500666702655033, -0.50306278065428234, -0.35267779942380045, 9.0913153449513455},
    {"block0.mlp.proj.bias", -1.7493532813647477, 2.4224126170705897, 0.50787316950718064, 5.1252485694453851},
    {"block1.ln1.weight", -0.027744854985332103, -0.05174805322332246, -0.19299801266876959, 0.3410123644199779},
    {"block1.ln1.bias", 0.11017032038278644, -0.14924708213536553, -0.2834091963283345, 0.47839580918736324},
    {"block1.attn.qkv.weight", -0.03063282339096679, -0.023704978814400226, -0.21265227169614842, 6.701412061191264},
    {"block1.attn.qkv.bias", 0.013272542420427781, -2.1684043449710089e-19, -0.43089161165600465, 2.4138969064242786},
    {"block1.attn.proj.weight", 0.46715647327178189, 0.8153667331893627, 0.47342572385517168, 3.4092167220123093},
    {"block1.attn.proj.bias", -2.4764607511316741, 2.6644853890796734, 1.1343480406662787, 5.3425747101385106},
    {"block1.ln2.weight", 0.2754798407828013, -0.054943490024524172, 0.010538616349047181, 0.77441717730287152},
    {"block1.ln2.bias", -0.33107490471810841, 0.35765038437530478, 0.41198894595352953, 0.84238930908661924},
    {"block1.mlp.fc.weight", -0.061553956985010892, 0.084854119864661362, -0.072480001540110126, 10.951302322905089},
    {"block1.mlp.fc.bias", -0.24117899263630124, 0.27365866447862208, 0.57701710188571376, 2.8434908600494304},
    {"block1.mlp.proj.weight", 0.052753098650815414, 0.17664494598792463, -0.011870992486122001, 2.0741656730604241},
    {"block1.mlp.proj.bias", -0.17215542904435549, -0.64415308986233111, 0.21534355974305291, 1.1875305245641876},
    {"ln_f.weight", 0.40353459238083544, 0.15861078801042652, 0.40696553393149709, 0.81816008810791241},
    {"ln_f.bias", -0.063918098872957685, -0.095047430404362379, 0.084090545707368083, 0.19699276553388673},
};

} // namespace

TEST_CASE("gpt: the layout covers every parameter once; the same seed gives the same initialisation") {
    model_config c = reference_config();
    const gpt m(c, reference_vocab);
    const std::size_t D = 8, V = 7, T = 6;
    const std::size_t block = 2 * D + (D * 3 * D + 3 * D) + (D * D + D) + 2 * D + (D * 4 * D + 4 * D) + (4 * D * D + D);
    CHECK(m.size() == V * D + T * D + 2 * block + 2 * D);
    CHECK(m.tensors().size() == 2 + 12 * 2 + 2);
    std::size_t next = 0;
    for (const auto& t : m.tensors()) {
        CAPTURE(t.name);
        CHECK(t.offset == next);
        next += t.size();
        // Matrices and embeddings decay; gains and biases do not.
        CHECK(t.decay == (t.rows > 1));
    }
    CHECK(next == m.size());
    std::vector<float> a(m.size()), b(m.size()), other(m.size());
    m.init(a, 1);
    m.init(b, 1);
    m.init(other, 2);
    CHECK(a == b);
    CHECK(a != other);
    for (std::size_t i = 0; i < m.lnf_weight().size(); ++i) CHECK(a[m.lnf_weight().offset + i] == 1.0f);
    // Small initial weights: the tied output predicts nearly uniformly.
    gpt_workspace ws(m, 2);
    const auto tok = formula_tokens();
    const double loss = ws.loss_sum(a.data(), tok.data(), reference_positions.data(), 2) / (2.0 * 6);
    CHECK(loss == doctest::Approx(std::log(7.0)).epsilon(0.01));
}

TEST_CASE("gpt: the float forward equals the fp64 reference; backward matches its central differences, every tensor") {
    const gpt m(reference_config(), reference_vocab);
    const std::vector<float> w = formula_weights(m);
    const auto tok = formula_tokens();
    gpt_workspace ws(m, 2);
    std::vector<float> grads(m.size(), std::nanf(""));
    const float loss = ws.train_step(w.data(), grads.data(), tok.data(), reference_positions.data(), 2);

    std::vector<double> wd(w.begin(), w.end());
    const double ref = reference_loss(m, wd, tok, reference_positions);
    CHECK(loss == doctest::Approx(ref).epsilon(1e-5));

    // Every coordinate of every tensor: the model is tiny.
    constexpr double h = 1e-5;
    for (const auto& t : m.tensors()) {
        CAPTURE(t.name);
        std::vector<double> numeric(t.size());
        double largest = 0;
        for (std::size_t i = 0; i < t.size(); ++i) {
            const std::size_t k = t.offset + i;
            const double keep = wd[k];
            wd[k] = keep + h;
            const double up = reference_loss(m, wd, tok, reference_positions);
            wd[k] = keep - h;
            const double down = reference_loss(m, wd, tok, reference_positions);
            wd[k] = keep;
            numeric[i] = (up - down) / (2 * h);
            largest = std::max(largest, std::abs(numeric[i]));
        }
        REQUIRE(largest > 1e-3); // every tensor has a gradient worth checking
        double worst = 0;
        for (std::size_t i = 0; i < t.size(); ++i) {
            const double g = grads[t.offset + i];
            // Relative error, with a floor of 1e-3 of the tensor's largest entry for the
            // entries that are (near) zero, such as the key biases'.
            const double err = std::abs(g - numeric[i]) / std::max(std::abs(numeric[i]), 1e-3 * largest);
            worst = std::max(worst, err);
        }
        CHECK(worst < 2e-3);
    }
}

TEST_CASE("gpt: the loss and gradients equal those of the same model in PyTorch (recorded)") {
    const gpt m(reference_config(), reference_vocab);
    const std::vector<float> w = formula_weights(m);
    const auto tok = formula_tokens();
    gpt_workspace ws(m, 2);
    std::vector<float> grads(m.size());
    const float loss = ws.train_step(w.data(), grads.data(), tok.data(), reference_positions.data(), 2);
    CHECK(loss == doctest::Approx(recorded_loss).epsilon(1e-5));
    // The plain fp64 reference agrees with PyTorch to rounding.
    const std::vector<double> wd(w.begin(), w.end());
    CHECK(std::abs(reference_loss(m, wd, tok, reference_positions) - recorded_loss) < 1e-12);

    REQUIRE(std::size(recorded) == m.tensors().size());
    for (std::size_t j = 0; j < m.tensors().size(); ++j) {
        const tensor_slot& t = m.tensors()[j];
        const recorded_grad& r = recorded[j];
        CAPTURE(t.name);
        REQUIRE(t.name == r.name);
        const float* g = grads.data() + t.offset;
        double ss = 0;
        for (std::size_t i = 0; i < t.size(); ++i) ss += static_cast<double>(g[i]) * g[i];
        CHECK(std::sqrt(ss) == doctest::Approx(r.norm).epsilon(1e-4));
        // Entries within 1e-4 of the tensor's norm (the key bias's is 0 in exact arithmetic).
        const double tol = 1e-4 * r.norm;
        CHECK(std::abs(g[0] - r.first) <= tol);
        CHECK(std::abs(g[t.size() / 2] - r.middle) <= tol);
        CHECK(std::abs(g[t.size() - 1] - r.last) <= tol);
    }
}

TEST_CASE("gpt: splitting the products and attention over threads does not change a bit") {
    model_config c = reference_config();
    c.context = 16;
    c.d_model = 16;
    c.heads = 4;
    sim_config cfg = sim_test::tiny_config(1);
    cfg.model = c;
    const dataset d = make_dataset(generate_corpus(5, 20'000), "t", cfg, "t");
    const gpt m(c, d.vocab());
    std::vector<float> w(m.size());
    m.init(w, 3);
    const std::vector<std::uint32_t> batch(d.shards[0].begin(), d.shards[0].begin() + 6);
    std::vector<float> g1(m.size()), g2(m.size());
    gpt_workspace one(m, 6, 1), two(m, 6, 2);
    const float l1 = one.train_step(w.data(), g1.data(), d.tokens.data(), batch.data(), 6);
    const float l2 = two.train_step(w.data(), g2.data(), d.tokens.data(), batch.data(), 6);
    CHECK(l1 == l2);
    CHECK(std::memcmp(g1.data(), g2.data(), g1.size() * sizeof(float)) == 0);
}

TEST_CASE("gpt: AdamW with clipping and the cosine schedule lowers the held-out loss on the generated corpus") {
    sim_config cfg = sim_test::tiny_config(1, 120);
    cfg.model = reference_config();
    cfg.model.context = 8;
    cfg.model.d_model = 16;
    cfg.lr = 1e-2f;
    cfg.warmup = 10;
    cfg.lr_schedule = schedule_kind::cosine;
    const dataset d = make_dataset(generate_corpus(cfg.seed, 20'000), "t", cfg, "t");
    // Evaluation windows tile the held-out text: consecutive, each context targets long.
    REQUIRE(d.eval_positions.size() == 32); // eval_size 256 / context 8
    for (std::size_t k = 1; k < d.eval_positions.size(); ++k)
        CHECK(d.eval_positions[k] - d.eval_positions[k - 1] == 8u);
    CHECK(d.eval_positions[0] == d.train_end + 8);

    const gpt m(cfg.model, d.vocab());
    std::vector<float> params(m.size()), grads(m.size());
    m.init(params, 1);
    gpt_workspace ws(m, 16);
    adamw opt(m, 0.1f);
    const auto eval = [&] {
        return ws.loss_sum(params.data(), d.tokens.data(), d.eval_positions.data(), d.eval_positions.size()) /
               static_cast<double>(d.eval_positions.size() * 8);
    };
    const double before = eval();
    CHECK(before == doctest::Approx(std::log(d.vocab())).epsilon(0.02));
    rng g(3);
    std::vector<std::uint32_t> batch(16);
    double largest_norm = 0;
    for (int t = 1; t <= cfg.steps; ++t) {
        for (auto& p : batch) p = d.shards[0][g.below(d.shards[0].size())];
        ws.train_step(params.data(), grads.data(), d.tokens.data(), batch.data(), 16);
        largest_norm = std::max(largest_norm, clip_global_norm(grads.data(), grads.size(), 0.5f));
        double ss = 0;
        for (float x : grads) ss += static_cast<double>(x) * x;
        REQUIRE(std::sqrt(ss) <= 0.5 * (1 + 1e-5));
        opt.step(params.data(), grads.data(), learning_rate(cfg, t));
    }
    CHECK(largest_norm > 0.5); // the clip did act
    CHECK(eval() < before - 0.5);
}

TEST_CASE("learning rate: linear and cosine decay after the warm-up end at 0.1 x lr") {
    sim_config c;
    c.lr = 0.01f;
    c.warmup = 10;
    c.steps = 110;
    c.lr_schedule = schedule_kind::cosine;
    CHECK(learning_rate(c, 5) == doctest::Approx(0.005));
    CHECK(learning_rate(c, 10) == doctest::Approx(0.01));
    CHECK(learning_rate(c, 60) == doctest::Approx(0.01 * (0.1 + 0.9 * 0.5)));
    CHECK(learning_rate(c, 110) == doctest::Approx(0.001));
    c.lr_schedule = schedule_kind::linear;
    CHECK(learning_rate(c, 60) == doctest::Approx(0.01 * (0.1 + 0.9 * 0.5)));
    CHECK(learning_rate(c, 35) == doctest::Approx(0.01 * (0.1 + 0.9 * 0.75)));
    CHECK(learning_rate(c, 110) == doctest::Approx(0.001));
    c.lr_schedule = schedule_kind::constant;
    CHECK(learning_rate(c, 110) == doctest::Approx(0.01));
}
