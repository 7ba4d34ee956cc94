// examples/sim/model.hpp: the character-level language model: an MLP over a window of characters.
//
// Bengio-style: the previous `context` characters are embedded, concatenated, passed
// through `layers` tanh layers and a softmax over the vocabulary. All parameters live in
// one flat float array (the layout below), so the trainer can hand every tensor to
// trickle as one param_group and average, correlate or all-reduce replicas in one loop.
#pragma once

#include "gemm.hpp"
#include "options.hpp"
#include "rng.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <numbers>
#include <span>
#include <string>
#include <vector>

namespace trickle_sim {

// One tensor of the model: where it sits in the flat array and how it is initialised.
struct tensor_slot {
    std::string name;
    std::size_t offset = 0;
    std::size_t rows = 0, cols = 0; // row-major
    bool decay = false;             // AdamW weight decay applies (matrices, not biases)
    std::size_t size() const { return rows * cols; }
};

class mlp {
public:
    mlp(const model_config& m, int vocab)
        : vocab_(vocab), context_(m.context), embed_(m.embed), hidden_(m.hidden), layers_(m.layers) {
        add("embedding", static_cast<std::size_t>(vocab), static_cast<std::size_t>(embed_), true);
        std::size_t in = static_cast<std::size_t>(input_width());
        for (int k = 0; k < layers_; ++k) {
            add("hidden" + std::to_string(k) + ".weight", in, static_cast<std::size_t>(hidden_), true);
            add("hidden" + std::to_string(k) + ".bias", 1, static_cast<std::size_t>(hidden_), false);
            in = static_cast<std::size_t>(hidden_);
        }
        add("output.weight", in, static_cast<std::size_t>(vocab), true);
        add("output.bias", 1, static_cast<std::size_t>(vocab), false);
    }

    int vocab() const { return vocab_; }
    int context() const { return context_; }
    int embed() const { return embed_; }
    int hidden() const { return hidden_; }
    int layers() const { return layers_; }
    int input_width() const { return context_ * embed_; }
    std::size_t size() const { return size_; }
    const std::vector<tensor_slot>& tensors() const { return tensors_; }

    const tensor_slot& embedding() const { return tensors_[0]; }
    const tensor_slot& weight(int k) const { return tensors_[1 + 2 * static_cast<std::size_t>(k)]; }
    const tensor_slot& bias(int k) const { return tensors_[2 + 2 * static_cast<std::size_t>(k)]; }
    const tensor_slot& output_weight() const { return tensors_[tensors_.size() - 2]; }
    const tensor_slot& output_bias() const { return tensors_.back(); }

    // The same parameters for the same seed on every worker: unit-normal embeddings,
    // tanh-gain (5/3) scaled hidden weights, small output weights (initial loss ≈ ln V).
    void init(std::span<float> params, std::uint64_t seed) const {
        rng g = rng::stream(seed, 0x696e6974ull);
        auto fill = [&](const tensor_slot& t, double scale) {
            for (std::size_t i = 0; i < t.size(); ++i)
                params[t.offset + i] = static_cast<float>(scale * g.normal());
        };
        fill(embedding(), 1.0);
        for (int k = 0; k < layers_; ++k) {
            fill(weight(k), (5.0 / 3.0) / std::sqrt(static_cast<double>(weight(k).rows)));
            fill(bias(k), 0.01);
        }
        fill(output_weight(), 0.1 / std::sqrt(static_cast<double>(output_weight().rows)));
        fill(output_bias(), 0.0);
    }

private:
    void add(std::string name, std::size_t rows, std::size_t cols, bool decay) {
        tensors_.push_back(tensor_slot{std::move(name), size_, rows, cols, decay});
        size_ += rows * cols;
    }

    int vocab_, context_, embed_, hidden_, layers_;
    std::vector<tensor_slot> tensors_;
    std::size_t size_ = 0;
};

// One thread's scratch for forward and backward passes of up to max_batch examples.
// An example is a target position p in a token array: inputs tokens[p-C .. p-1], target tokens[p].
class mlp_workspace {
public:
    mlp_workspace(const mlp& model, int max_batch) : m_(model), max_batch_(max_batch) {
        const auto B = static_cast<std::size_t>(max_batch);
        x_.resize(B * static_cast<std::size_t>(m_.input_width()));
        dx_.resize(x_.size());
        acts_.resize(static_cast<std::size_t>(m_.layers()));
        for (auto& a : acts_) a.resize(B * static_cast<std::size_t>(m_.hidden()));
        dh_.resize(B * static_cast<std::size_t>(m_.hidden()));
        dh2_.resize(dh_.size());
        probs_.resize(B * static_cast<std::size_t>(m_.vocab()));
    }

    // Mean cross-entropy (nats) of a batch of B <= max_batch examples; writes the gradient
    // of that mean into grads (m.size() floats, fully overwritten).
    float train_step(const float* params, float* grads, const std::uint8_t* tokens, const std::uint32_t* positions,
                     int B) {
        const double loss = forward(params, tokens, positions, B);
        backward(params, grads, tokens, positions, B);
        return static_cast<float>(loss / B);
    }

    // Summed cross-entropy (nats) over `count` examples, in batches of max_batch.
    double loss_sum(const float* params, const std::uint8_t* tokens, const std::uint32_t* positions,
                    std::size_t count) {
        double sum = 0;
        for (std::size_t b = 0; b < count; b += static_cast<std::size_t>(max_batch_)) {
            const int n = static_cast<int>(std::min<std::size_t>(static_cast<std::size_t>(max_batch_), count - b));
            sum += forward(params, tokens, positions + b, n);
        }
        return sum;
    }

private:
    // Leaves the embedded inputs in x_, activations in acts_ and softmax in probs_;
    // returns the summed loss.
    double forward(const float* params, const std::uint8_t* tokens, const std::uint32_t* positions, int B) {
        const int C = m_.context(), E = m_.embed(), D = m_.input_width(), H = m_.hidden(), V = m_.vocab();
        const float* emb = params + m_.embedding().offset;
        for (int b = 0; b < B; ++b) {
            const std::uint32_t p = positions[b];
            for (int c = 0; c < C; ++c) {
                const float* row = emb + static_cast<std::size_t>(tokens[p - static_cast<std::uint32_t>(C - c)]) * E;
                std::copy(row, row + E, x_.data() + static_cast<std::size_t>(b) * D + static_cast<std::size_t>(c) * E);
            }
        }
        const float* in = x_.data();
        int in_w = D;
        for (int k = 0; k < m_.layers(); ++k) {
            float* a = acts_[static_cast<std::size_t>(k)].data();
            const float* bias = params + m_.bias(k).offset;
            for (int b = 0; b < B; ++b) std::copy(bias, bias + H, a + static_cast<std::size_t>(b) * H);
            gemm(trans::no, trans::no, B, H, in_w, 1.0f, in, in_w, params + m_.weight(k).offset, H, 1.0f, a, H);
            for (std::size_t i = 0, n = static_cast<std::size_t>(B) * H; i < n; ++i) a[i] = std::tanh(a[i]);
            in = a;
            in_w = H;
        }
        float* logits = probs_.data();
        const float* out_b = params + m_.output_bias().offset;
        for (int b = 0; b < B; ++b) std::copy(out_b, out_b + V, logits + static_cast<std::size_t>(b) * V);
        gemm(trans::no, trans::no, B, V, H, 1.0f, in, H, params + m_.output_weight().offset, V, 1.0f, logits, V);

        double loss = 0;
        for (int b = 0; b < B; ++b) {
            float* row = logits + static_cast<std::size_t>(b) * V;
            const float mx = *std::max_element(row, row + V);
            const int target = tokens[positions[b]];
            const double target_logit = static_cast<double>(row[target]) - mx;
            double sum = 0;
            for (int v = 0; v < V; ++v) sum += row[v] = std::exp(row[v] - mx);
            const auto inv = static_cast<float>(1.0 / sum);
            loss += std::log(sum) - target_logit;
            for (int v = 0; v < V; ++v) row[v] *= inv;
        }
        return loss;
    }

    void backward(const float* params, float* grads, const std::uint8_t* tokens, const std::uint32_t* positions,
                  int B) {
        const int C = m_.context(), E = m_.embed(), D = m_.input_width(), H = m_.hidden(), V = m_.vocab();
        const std::size_t BV = static_cast<std::size_t>(B) * V, BH = static_cast<std::size_t>(B) * H;
        // dlogits = (softmax - onehot) / B, in place of the probabilities.
        float* dl = probs_.data();
        for (int b = 0; b < B; ++b) dl[static_cast<std::size_t>(b) * V + tokens[positions[b]]] -= 1.0f;
        const float inv_b = 1.0f / static_cast<float>(B);
        for (std::size_t i = 0; i < BV; ++i) dl[i] *= inv_b;

        const float* last = acts_.back().data();
        gemm(trans::yes, trans::no, H, V, B, 1.0f, last, H, dl, V, 0.0f, grads + m_.output_weight().offset, V);
        column_sums(dl, B, V, grads + m_.output_bias().offset);
        gemm(trans::no, trans::yes, B, H, V, 1.0f, dl, V, params + m_.output_weight().offset, V, 0.0f, dh_.data(), H);

        for (int k = m_.layers() - 1; k >= 0; --k) {
            const float* act = acts_[static_cast<std::size_t>(k)].data();
            float* da = dh_.data();
            for (std::size_t i = 0; i < BH; ++i) da[i] *= 1.0f - act[i] * act[i];
            const float* in = k > 0 ? acts_[static_cast<std::size_t>(k) - 1].data() : x_.data();
            const int in_w = k > 0 ? H : D;
            gemm(trans::yes, trans::no, in_w, H, B, 1.0f, in, in_w, da, H, 0.0f, grads + m_.weight(k).offset, H);
            column_sums(da, B, H, grads + m_.bias(k).offset);
            float* d_in = k > 0 ? dh2_.data() : dx_.data();
            gemm(trans::no, trans::yes, B, in_w, H, 1.0f, da, H, params + m_.weight(k).offset, H, 0.0f, d_in, in_w);
            if (k > 0) std::swap(dh_, dh2_);
        }

        float* demb = grads + m_.embedding().offset;
        std::fill(demb, demb + m_.embedding().size(), 0.0f);
        for (int b = 0; b < B; ++b) {
            const std::uint32_t p = positions[b];
            for (int c = 0; c < C; ++c) {
                float* row = demb + static_cast<std::size_t>(tokens[p - static_cast<std::uint32_t>(C - c)]) * E;
                const float* d = dx_.data() + static_cast<std::size_t>(b) * D + static_cast<std::size_t>(c) * E;
                for (int e = 0; e < E; ++e) row[e] += d[e];
            }
        }
    }

    static void column_sums(const float* m, int rows, int cols, float* out) {
        std::fill(out, out + cols, 0.0f);
        for (int r = 0; r < rows; ++r)
            for (int c = 0; c < cols; ++c) out[c] += m[static_cast<std::size_t>(r) * cols + c];
    }

    const mlp& m_;
    int max_batch_;
    std::vector<float> x_, dx_, dh_, dh2_, probs_;
    std::vector<std::vector<float>> acts_;
};

// AdamW (decoupled weight decay) with the replica's own moment estimates, as each DiLoCo
// worker keeps its own inner optimizer state. Model: mlp or gpt (its tensors() say which
// parameters decay).
class adamw {
public:
    template <class Model>
    adamw(const Model& model, float weight_decay, float beta1 = 0.9f, float beta2 = 0.95f, float eps = 1e-8f)
        : tensors_(model.tensors()), m_(model.size(), 0.0f), v_(model.size(), 0.0f), wd_(weight_decay),
          b1_(beta1), b2_(beta2), eps_(eps) {}

    void step(float* params, const float* grads, float lr) {
        ++t_;
        const float c1 = 1.0f - std::pow(b1_, static_cast<float>(t_));
        const float c2 = 1.0f - std::pow(b2_, static_cast<float>(t_));
        const float step_size = lr / c1, inv_sqrt_c2 = 1.0f / std::sqrt(c2);
        for (const auto& t : tensors_) {
            const float decay = t.decay ? 1.0f - lr * wd_ : 1.0f;
            for (std::size_t i = t.offset, e = t.offset + t.size(); i < e; ++i) {
                const float g = grads[i];
                m_[i] = b1_ * m_[i] + (1.0f - b1_) * g;
                v_[i] = b2_ * v_[i] + (1.0f - b2_) * g * g;
                params[i] = params[i] * decay - step_size * m_[i] / (std::sqrt(v_[i]) * inv_sqrt_c2 + eps_);
            }
        }
    }

    std::int64_t steps() const { return t_; }

private:
    std::vector<tensor_slot> tensors_;
    std::vector<float> m_, v_;
    float wd_, b1_, b2_, eps_;
    std::int64_t t_ = 0;
};

// Inner learning rate at step t (1-based): linear warm-up, then --lr-schedule: constant,
// or a linear or cosine decay that reaches lr_floor x lr at the last step.
inline constexpr double lr_floor = 0.1;
inline float learning_rate(const sim_config& c, int t) {
    if (c.warmup > 0 && t < c.warmup) return c.lr * static_cast<float>(t) / static_cast<float>(c.warmup);
    if (c.lr_schedule == schedule_kind::constant) return c.lr;
    const int span = c.steps - c.warmup;
    const double progress = span > 0 ? std::clamp(static_cast<double>(t - c.warmup) / span, 0.0, 1.0) : 1.0;
    const double shape = c.lr_schedule == schedule_kind::linear
                             ? 1.0 - progress
                             : 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
    return static_cast<float>(c.lr * (lr_floor + (1.0 - lr_floor) * shape));
}

// Scales the gradient down to global L2 norm max_norm when it is longer (max_norm 0: never);
// returns the norm before clipping. Summed in double, in index order, so every worker that
// holds the same gradient (ddp) clips it the same way.
inline double clip_global_norm(float* grads, std::size_t n, float max_norm) {
    double ss = 0;
    for (std::size_t i = 0; i < n; ++i) ss += static_cast<double>(grads[i]) * grads[i];
    const double norm = std::sqrt(ss);
    if (max_norm > 0 && norm > max_norm) {
        const auto scale = static_cast<float>(max_norm / norm);
        for (std::size_t i = 0; i < n; ++i) grads[i] *= scale;
    }
    return norm;
}

} // namespace trickle_sim
