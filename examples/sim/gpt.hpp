// examples/sim/gpt.hpp: the character-level decoder-only transformer (--model gpt).
//
// GPT-2's shape at toy size: token and position embeddings, `layers` blocks of
// pre-LayerNorm causal multi-head self-attention and a 4x GELU MLP, each added to the
// residual stream, a final LayerNorm, and an output layer tied to the token embedding
// (logits = x · E^T). Forward and backward are written out here over the BLAS product of
// gemm.hpp, so the simulator needs no deep-learning framework (docs/simulator.md says
// why). As in the MLP, every tensor lives in one flat float array, so the trainer hands
// the model to trickle as one param_group, tensor by tensor.
//
// An example is a window of `context` (T) tokens ending at a target position p: inputs
// tokens[p-T .. p-1], targets tokens[p-T+1 .. p], so one window trains T predictions
// (each with the context its causal mask allows).
#pragma once

#include "gemm.hpp"
#include "model.hpp"
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

#if TRICKLE_SIM_HAVE_OPENMP
#include <omp.h>
#endif

namespace trickle_sim {

class gpt {
public:
    // The tensors of one block, as indices into tensors().
    struct block_slots {
        std::size_t ln1_w, ln1_b, qkv_w, qkv_b, proj_w, proj_b, ln2_w, ln2_b, fc_w, fc_b, out_w, out_b;
    };

    gpt(const model_config& m, int vocab)
        : vocab_(vocab), context_(m.context), d_(m.d_model), heads_(m.heads), layers_(m.layers) {
        const auto V = static_cast<std::size_t>(vocab), T = static_cast<std::size_t>(context_),
                   D = static_cast<std::size_t>(d_), F = 4 * D;
        tok_ = add("tok_embedding", V, D, true);
        pos_ = add("pos_embedding", T, D, true);
        for (int l = 0; l < layers_; ++l) {
            const std::string p = "block" + std::to_string(l) + ".";
            block_slots b{};
            b.ln1_w = add(p + "ln1.weight", 1, D, false);
            b.ln1_b = add(p + "ln1.bias", 1, D, false);
            b.qkv_w = add(p + "attn.qkv.weight", D, 3 * D, true);
            b.qkv_b = add(p + "attn.qkv.bias", 1, 3 * D, false);
            b.proj_w = add(p + "attn.proj.weight", D, D, true);
            b.proj_b = add(p + "attn.proj.bias", 1, D, false);
            b.ln2_w = add(p + "ln2.weight", 1, D, false);
            b.ln2_b = add(p + "ln2.bias", 1, D, false);
            b.fc_w = add(p + "mlp.fc.weight", D, F, true);
            b.fc_b = add(p + "mlp.fc.bias", 1, F, false);
            b.out_w = add(p + "mlp.proj.weight", F, D, true);
            b.out_b = add(p + "mlp.proj.bias", 1, D, false);
            blocks_.push_back(b);
        }
        lnf_w_ = add("ln_f.weight", 1, D, false);
        lnf_b_ = add("ln_f.bias", 1, D, false);
    }

    int vocab() const { return vocab_; }
    int context() const { return context_; }
    int d_model() const { return d_; }
    int heads() const { return heads_; }
    int head_dim() const { return d_ / heads_; }
    int layers() const { return layers_; }
    std::size_t size() const { return size_; }
    const std::vector<tensor_slot>& tensors() const { return tensors_; }

    const tensor_slot& tok_embedding() const { return tensors_[tok_]; }
    const tensor_slot& pos_embedding() const { return tensors_[pos_]; }
    const block_slots& block(int l) const { return blocks_[static_cast<std::size_t>(l)]; }
    const tensor_slot& slot(std::size_t index) const { return tensors_[index]; }
    const tensor_slot& lnf_weight() const { return tensors_[lnf_w_]; }
    const tensor_slot& lnf_bias() const { return tensors_[lnf_b_]; }

    // GPT-2's initialisation, the same for the same seed on every worker: weights and
    // embeddings N(0, 0.02²), the two projections into the residual stream scaled down by
    // sqrt(2·layers) so the stream's variance does not grow with depth, biases 0,
    // LayerNorm gains 1. The tied output starts near uniform: initial loss ≈ ln V.
    void init(std::span<float> params, std::uint64_t seed) const {
        rng g = rng::stream(seed, 0x677074696e6974ull);
        auto fill = [&](std::size_t index, double scale, double constant) {
            const tensor_slot& t = tensors_[index];
            for (std::size_t i = 0; i < t.size(); ++i)
                params[t.offset + i] = static_cast<float>(scale == 0 ? constant : scale * g.normal());
        };
        const double residual = 0.02 / std::sqrt(2.0 * layers_);
        fill(tok_, 0.02, 0);
        fill(pos_, 0.02, 0);
        for (const auto& b : blocks_) {
            fill(b.ln1_w, 0, 1);
            fill(b.ln1_b, 0, 0);
            fill(b.qkv_w, 0.02, 0);
            fill(b.qkv_b, 0, 0);
            fill(b.proj_w, residual, 0);
            fill(b.proj_b, 0, 0);
            fill(b.ln2_w, 0, 1);
            fill(b.ln2_b, 0, 0);
            fill(b.fc_w, 0.02, 0);
            fill(b.fc_b, 0, 0);
            fill(b.out_w, residual, 0);
            fill(b.out_b, 0, 0);
        }
        fill(lnf_w_, 0, 1);
        fill(lnf_b_, 0, 0);
    }

private:
    std::size_t add(std::string name, std::size_t rows, std::size_t cols, bool decay) {
        tensors_.push_back(tensor_slot{std::move(name), size_, rows, cols, decay});
        size_ += rows * cols;
        return tensors_.size() - 1;
    }

    int vocab_, context_, d_, heads_, layers_;
    std::vector<tensor_slot> tensors_;
    std::vector<block_slots> blocks_;
    std::size_t tok_ = 0, pos_ = 0, lnf_w_ = 0, lnf_b_ = 0;
    std::size_t size_ = 0;
};

namespace detail {

inline constexpr float layer_norm_eps = 1e-5f;

// GPT-2's GELU, the tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x³))).
inline constexpr float gelu_c = 0.7978845608028654f; // sqrt(2 / pi)
inline constexpr float gelu_k = 0.044715f;

// tanh through one exp: 1 - 2 / (e^{2y} + 1). Cheaper than std::tanh, which took over 40%
// of a step's time in the GELUs; its absolute error (~1e-7) is float rounding.
// Saturates correctly: e^{2y} overflows to inf for large y (giving 1) and underflows to 0
// for very negative y (giving -1).
inline float fast_tanh(float y) { return 1.0f - 2.0f / (std::exp(2.0f * y) + 1.0f); }

// gemm with the rows of C cut into chunks of gemm_chunk_rows, the chunks spread over
// `threads` OpenMP threads. The cut does not depend on the thread count, so neither does
// any bit of the result (BLAS may pick its kernels by the matrix sizes, so a cut that
// followed the thread count would change the rounding; tests/sim checks 1 against 2
// threads).
inline constexpr int gemm_chunk_rows = 64;
inline void gemm_rows(int threads, trans ta, trans tb, int M, int N, int K, float alpha, const float* A, int lda,
                      const float* B, int ldb, float beta, float* C, int ldc) {
    const int chunks = (M + gemm_chunk_rows - 1) / gemm_chunk_rows;
    auto chunk = [&](int c) {
        const int i0 = c * gemm_chunk_rows, rows = std::min(gemm_chunk_rows, M - i0);
        const float* a = ta == trans::no ? A + static_cast<std::ptrdiff_t>(i0) * lda : A + i0;
        gemm(ta, tb, rows, N, K, alpha, a, lda, B, ldb, beta, C + static_cast<std::ptrdiff_t>(i0) * ldc, ldc);
    };
#if TRICKLE_SIM_HAVE_OPENMP
    if (threads > 1 && chunks > 1) {
#pragma omp parallel for num_threads(std::min(threads, chunks)) schedule(static)
        for (int c = 0; c < chunks; ++c) chunk(c);
        return;
    }
#else
    (void)threads;
#endif
    for (int c = 0; c < chunks; ++c) chunk(c);
}

} // namespace detail

// One worker's activations and scratch for forward and backward passes over up to
// max_batch windows. `threads` > 1 runs the products and attention on an OpenMP team of
// that many threads (one team per worker thread; --threads); without OpenMP it is ignored.
// It is 1 by default because the workers already run one thread each: on the 2-core
// build machine, shared with other jobs, a second thread per worker made a step several
// times slower (OpenMP's threads spin while they wait for a core; docs/simulator.md).
class gpt_workspace {
public:
    gpt_workspace(const gpt& model, int max_batch, int threads = 1)
        : m_(model), max_batch_(max_batch), threads_(std::max(1, threads)) {
        const std::size_t N = rows(max_batch), D = static_cast<std::size_t>(m_.d_model()), F = 4 * D,
                          T = static_cast<std::size_t>(m_.context()),
                          V = static_cast<std::size_t>(m_.vocab());
        const std::size_t BH = static_cast<std::size_t>(max_batch) * static_cast<std::size_t>(m_.heads());
        layers_.resize(static_cast<std::size_t>(m_.layers()));
        for (auto& a : layers_) {
            a.x.resize(N * D);
            a.ln1.resize(N * D);
            a.ln1_mean.resize(N);
            a.ln1_rstd.resize(N);
            a.qkv.resize(N * 3 * D);
            a.probs.resize(BH * T * T);
            a.att.resize(N * D);
            a.mid.resize(N * D);
            a.ln2.resize(N * D);
            a.ln2_mean.resize(N);
            a.ln2_rstd.resize(N);
            a.pre.resize(N * F);
            a.tanh.resize(N * F);
            a.act.resize(N * F);
        }
        final_x_.resize(N * D);
        lnf_.resize(N * D);
        lnf_mean_.resize(N);
        lnf_rstd_.resize(N);
        logits_.resize(N * V);
        dx_.resize(N * D);
        dmid_.resize(N * D);
        dtmp_.resize(N * D);
        dwide_.resize(N * F);
        dqkv_.resize(N * 3 * D);
        dscores_.resize(static_cast<std::size_t>(threads_) * T * T);
    }

    // Targets each example (window) predicts: the trainer normalises losses by this.
    int targets_per_example() const { return m_.context(); }

    // Mean cross-entropy (nats) over the B·T targets of B <= max_batch windows ending at
    // `positions`; writes the gradient of that mean into grads (m.size() floats, fully
    // overwritten).
    float train_step(const float* params, float* grads, const std::uint8_t* tokens, const std::uint32_t* positions,
                     int B) {
        const double loss = forward(params, tokens, positions, B, true);
        backward(params, grads, tokens, positions, B);
        return static_cast<float>(loss / static_cast<double>(rows(B)));
    }

    // Summed cross-entropy (nats) over the count·T targets of `count` windows, in batches
    // of max_batch.
    double loss_sum(const float* params, const std::uint8_t* tokens, const std::uint32_t* positions,
                    std::size_t count) {
        double sum = 0;
        for (std::size_t b = 0; b < count; b += static_cast<std::size_t>(max_batch_)) {
            const int n = static_cast<int>(std::min<std::size_t>(static_cast<std::size_t>(max_batch_), count - b));
            sum += forward(params, tokens, positions + b, n, false);
        }
        return sum;
    }

private:
    struct layer_acts {
        std::vector<float> x;                  // residual stream entering the block
        std::vector<float> ln1, ln1_mean, ln1_rstd;
        std::vector<float> qkv;                // [N × 3D]: queries, keys, values
        std::vector<float> probs;              // [B·H × T × T] attention weights (0 above the diagonal)
        std::vector<float> att;                // [N × D] heads' outputs, concatenated
        std::vector<float> mid;                // x + attention branch
        std::vector<float> ln2, ln2_mean, ln2_rstd;
        std::vector<float> pre, tanh, act;     // [N × 4D] MLP before GELU, GELU's tanh, after GELU
    };

    std::size_t rows(int B) const { return static_cast<std::size_t>(B) * static_cast<std::size_t>(m_.context()); }
    const float* p(const float* params, std::size_t index) const { return params + m_.slot(index).offset; }
    float* g(float* grads, std::size_t index) const { return grads + m_.slot(index).offset; }

    static void layer_norm(const float* x, const float* w, const float* b, float* y, float* mean, float* rstd,
                           std::size_t N, int D) {
        for (std::size_t r = 0; r < N; ++r) {
            const float* xr = x + r * static_cast<std::size_t>(D);
            float* yr = y + r * static_cast<std::size_t>(D);
            double s = 0, ss = 0;
            for (int i = 0; i < D; ++i) s += xr[i];
            const double mu = s / D;
            for (int i = 0; i < D; ++i) ss += (xr[i] - mu) * (xr[i] - mu);
            const auto rs = static_cast<float>(1.0 / std::sqrt(ss / D + static_cast<double>(detail::layer_norm_eps)));
            const auto m = static_cast<float>(mu);
            mean[r] = m;
            rstd[r] = rs;
            for (int i = 0; i < D; ++i) yr[i] = (xr[i] - m) * rs * w[i] + b[i];
        }
    }

    // dx += LayerNorm'ᵀ dy; dw, db accumulate the gains' and biases' gradients.
    static void layer_norm_backward(const float* x, const float* w, const float* mean, const float* rstd,
                                    const float* dy, float* dx, float* dw, float* db, std::size_t N, int D) {
        for (std::size_t r = 0; r < N; ++r) {
            const float* xr = x + r * static_cast<std::size_t>(D);
            const float* dyr = dy + r * static_cast<std::size_t>(D);
            float* dxr = dx + r * static_cast<std::size_t>(D);
            const float m = mean[r], rs = rstd[r];
            float sum_d = 0, sum_dx = 0;
            for (int i = 0; i < D; ++i) {
                const float xhat = (xr[i] - m) * rs;
                const float d = dyr[i] * w[i];
                sum_d += d;
                sum_dx += d * xhat;
                dw[i] += dyr[i] * xhat;
                db[i] += dyr[i];
            }
            const float mean_d = sum_d / static_cast<float>(D), mean_dx = sum_dx / static_cast<float>(D);
            for (int i = 0; i < D; ++i) {
                const float xhat = (xr[i] - m) * rs;
                dxr[i] += rs * (dyr[i] * w[i] - mean_d - xhat * mean_dx);
            }
        }
    }

    static void add_bias(float* y, const float* bias, std::size_t N, int W) {
        for (std::size_t r = 0; r < N; ++r)
            for (int i = 0; i < W; ++i) y[r * static_cast<std::size_t>(W) + static_cast<std::size_t>(i)] += bias[i];
    }

    static void column_sums(const float* m, std::size_t rows, int cols, float* out) {
        std::fill(out, out + cols, 0.0f);
        for (std::size_t r = 0; r < rows; ++r)
            for (int c = 0; c < cols; ++c)
                out[c] += m[r * static_cast<std::size_t>(cols) + static_cast<std::size_t>(c)];
    }

    // Causal attention of every (window, head): probs and att of layer a from its qkv.
    // Each (window, head) writes only its own slices, so they run in parallel.
    void attention_forward(layer_acts& a, int B) {
        const int T = m_.context(), D = m_.d_model(), H = m_.heads(), hd = m_.head_dim();
        const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
        const int pairs = B * H;
#if TRICKLE_SIM_HAVE_OPENMP
#pragma omp parallel for num_threads(threads_) schedule(static) if (threads_ > 1)
#endif
        for (int bh = 0; bh < pairs; ++bh) {
            const int b = bh / H, h = bh % H;
            const float* q = a.qkv.data() + static_cast<std::size_t>(b) * T * 3 * D + static_cast<std::size_t>(h) * hd;
            const float* k = q + D;
            const float* v = q + 2 * D;
            float* P = a.probs.data() + static_cast<std::size_t>(bh) * T * T;
            gemm(trans::no, trans::yes, T, T, hd, scale, q, 3 * D, k, 3 * D, 0.0f, P, T);
            for (int t = 0; t < T; ++t) {
                float* row = P + static_cast<std::size_t>(t) * T;
                const float mx = *std::max_element(row, row + t + 1);
                float sum = 0;
                for (int s = 0; s <= t; ++s) sum += row[s] = std::exp(row[s] - mx);
                const float inv = 1.0f / sum;
                for (int s = 0; s <= t; ++s) row[s] *= inv;
                std::fill(row + t + 1, row + T, 0.0f);
            }
            float* y = a.att.data() + static_cast<std::size_t>(b) * T * D + static_cast<std::size_t>(h) * hd;
            gemm(trans::no, trans::no, T, hd, T, 1.0f, P, T, v, 3 * D, 0.0f, y, D);
        }
    }

    // From datt (the gradient of att) to dqkv_, for every (window, head) in parallel.
    void attention_backward(const layer_acts& a, const float* datt, int B) {
        const int T = m_.context(), D = m_.d_model(), H = m_.heads(), hd = m_.head_dim();
        const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
        const int pairs = B * H;
#if TRICKLE_SIM_HAVE_OPENMP
#pragma omp parallel for num_threads(threads_) schedule(static) if (threads_ > 1)
#endif
        for (int bh = 0; bh < pairs; ++bh) {
#if TRICKLE_SIM_HAVE_OPENMP
            const int tid = omp_get_thread_num();
#else
            const int tid = 0;
#endif
            const int b = bh / H, h = bh % H;
            const std::size_t head_off = static_cast<std::size_t>(b) * T * 3 * D + static_cast<std::size_t>(h) * hd;
            const float* q = a.qkv.data() + head_off;
            const float* k = q + D;
            const float* v = q + 2 * D;
            float* dq = dqkv_.data() + head_off;
            float* dk = dq + D;
            float* dv = dq + 2 * D;
            const float* P = a.probs.data() + static_cast<std::size_t>(bh) * T * T;
            const float* dy = datt + static_cast<std::size_t>(b) * T * D + static_cast<std::size_t>(h) * hd;
            float* dS = dscores_.data() + static_cast<std::size_t>(tid) * T * T;
            // dV = Pᵀ dY; dP = dY Vᵀ.
            gemm(trans::yes, trans::no, T, hd, T, 1.0f, P, T, dy, D, 0.0f, dv, 3 * D);
            gemm(trans::no, trans::yes, T, T, hd, 1.0f, dy, D, v, 3 * D, 0.0f, dS, T);
            // Softmax backward, row by row: dS = P ∘ (dP − Σ P dP); 0 above the diagonal.
            for (int t = 0; t < T; ++t) {
                const float* pr = P + static_cast<std::size_t>(t) * T;
                float* dr = dS + static_cast<std::size_t>(t) * T;
                float dot = 0;
                for (int s = 0; s <= t; ++s) dot += pr[s] * dr[s];
                for (int s = 0; s <= t; ++s) dr[s] = pr[s] * (dr[s] - dot);
                std::fill(dr + t + 1, dr + T, 0.0f);
            }
            // dQ = scale · dS K; dK = scale · dSᵀ Q.
            gemm(trans::no, trans::no, T, hd, T, scale, dS, T, k, 3 * D, 0.0f, dq, 3 * D);
            gemm(trans::yes, trans::no, T, hd, T, scale, dS, T, q, 3 * D, 0.0f, dk, 3 * D);
        }
    }

    // Runs the model over B windows; returns the summed loss of the B·T targets. With
    // `for_backward`, the logits are turned into the softmax for backward to use.
    double forward(const float* params, const std::uint8_t* tokens, const std::uint32_t* positions, int B,
                   bool for_backward) {
        const int T = m_.context(), D = m_.d_model(), V = m_.vocab(), F = 4 * D;
        const std::size_t N = rows(B), Dz = static_cast<std::size_t>(D);
        const float* tok = params + m_.tok_embedding().offset;
        const float* pos = params + m_.pos_embedding().offset;

        float* x = m_.layers() > 0 ? layers_[0].x.data() : final_x_.data();
        for (int b = 0; b < B; ++b) {
            const std::uint32_t first = positions[b] - static_cast<std::uint32_t>(T);
            for (int t = 0; t < T; ++t) {
                const float* e = tok + static_cast<std::size_t>(tokens[first + static_cast<std::uint32_t>(t)]) * Dz;
                const float* pe = pos + static_cast<std::size_t>(t) * Dz;
                float* xr = x + (static_cast<std::size_t>(b) * T + static_cast<std::size_t>(t)) * Dz;
                for (int i = 0; i < D; ++i) xr[i] = e[i] + pe[i];
            }
        }

        for (int l = 0; l < m_.layers(); ++l) {
            layer_acts& a = layers_[static_cast<std::size_t>(l)];
            const gpt::block_slots& s = m_.block(l);
            float* next = l + 1 < m_.layers() ? layers_[static_cast<std::size_t>(l) + 1].x.data() : final_x_.data();

            layer_norm(a.x.data(), p(params, s.ln1_w), p(params, s.ln1_b), a.ln1.data(), a.ln1_mean.data(),
                       a.ln1_rstd.data(), N, D);
            for (std::size_t r = 0; r < N; ++r)
                std::copy(p(params, s.qkv_b), p(params, s.qkv_b) + 3 * D, a.qkv.data() + r * 3 * Dz);
            detail::gemm_rows(threads_, trans::no, trans::no, static_cast<int>(N), 3 * D, D, 1.0f, a.ln1.data(), D,
                              p(params, s.qkv_w), 3 * D, 1.0f, a.qkv.data(), 3 * D);
            attention_forward(a, B);
            std::copy(a.x.begin(), a.x.begin() + static_cast<std::ptrdiff_t>(N * Dz), a.mid.begin());
            add_bias(a.mid.data(), p(params, s.proj_b), N, D);
            detail::gemm_rows(threads_, trans::no, trans::no, static_cast<int>(N), D, D, 1.0f, a.att.data(), D,
                              p(params, s.proj_w), D, 1.0f, a.mid.data(), D);

            layer_norm(a.mid.data(), p(params, s.ln2_w), p(params, s.ln2_b), a.ln2.data(), a.ln2_mean.data(),
                       a.ln2_rstd.data(), N, D);
            for (std::size_t r = 0; r < N; ++r)
                std::copy(p(params, s.fc_b), p(params, s.fc_b) + F, a.pre.data() + r * static_cast<std::size_t>(F));
            detail::gemm_rows(threads_, trans::no, trans::no, static_cast<int>(N), F, D, 1.0f, a.ln2.data(), D,
                              p(params, s.fc_w), F, 1.0f, a.pre.data(), F);
            for (std::size_t i = 0, n = N * static_cast<std::size_t>(F); i < n; ++i) {
                const float u = a.pre[i];
                const float th = detail::fast_tanh(detail::gelu_c * (u + detail::gelu_k * u * u * u));
                a.tanh[i] = th;
                a.act[i] = 0.5f * u * (1.0f + th);
            }
            std::copy(a.mid.begin(), a.mid.begin() + static_cast<std::ptrdiff_t>(N * Dz), next);
            add_bias(next, p(params, s.out_b), N, D);
            detail::gemm_rows(threads_, trans::no, trans::no, static_cast<int>(N), D, F, 1.0f, a.act.data(), F,
                              p(params, s.out_w), D, 1.0f, next, D);
        }

        layer_norm(final_x_.data(), params + m_.lnf_weight().offset, params + m_.lnf_bias().offset, lnf_.data(),
                   lnf_mean_.data(), lnf_rstd_.data(), N, D);
        // Tied output: logits = ln_f(x) · Eᵀ.
        float* logits = logits_.data();
        detail::gemm_rows(threads_, trans::no, trans::yes, static_cast<int>(N), V, D, 1.0f, lnf_.data(), D, tok, D,
                          0.0f, logits, V);

        double loss = 0;
        for (int b = 0; b < B; ++b) {
            const std::uint32_t first = positions[b] - static_cast<std::uint32_t>(T) + 1;
            for (int t = 0; t < T; ++t) {
                float* row = logits + (static_cast<std::size_t>(b) * T + static_cast<std::size_t>(t)) *
                                          static_cast<std::size_t>(V);
                const float mx = *std::max_element(row, row + V);
                const int target = tokens[first + static_cast<std::uint32_t>(t)];
                const double target_logit = static_cast<double>(row[target]) - mx;
                double sum = 0;
                for (int v = 0; v < V; ++v) sum += row[v] = std::exp(row[v] - mx);
                loss += std::log(sum) - target_logit;
                if (for_backward) {
                    const auto inv = static_cast<float>(1.0 / sum);
                    for (int v = 0; v < V; ++v) row[v] *= inv;
                }
            }
        }
        return loss;
    }

    void backward(const float* params, float* grads, const std::uint8_t* tokens, const std::uint32_t* positions,
                  int B) {
        const int T = m_.context(), D = m_.d_model(), V = m_.vocab(), F = 4 * D;
        const std::size_t N = rows(B), Dz = static_cast<std::size_t>(D), Fz = static_cast<std::size_t>(F);
        const int Ni = static_cast<int>(N);
        std::fill(grads, grads + m_.size(), 0.0f);
        const float* tok = params + m_.tok_embedding().offset;
        float* dtok = grads + m_.tok_embedding().offset;

        // dlogits = (softmax − onehot) / (B·T), in place of the probabilities.
        float* dl = logits_.data();
        const float inv_n = 1.0f / static_cast<float>(N);
        for (int b = 0; b < B; ++b) {
            const std::uint32_t first = positions[b] - static_cast<std::uint32_t>(T) + 1;
            for (int t = 0; t < T; ++t)
                dl[(static_cast<std::size_t>(b) * T + static_cast<std::size_t>(t)) * static_cast<std::size_t>(V) +
                   tokens[first + static_cast<std::uint32_t>(t)]] -= 1.0f;
        }
        for (std::size_t i = 0, n = N * static_cast<std::size_t>(V); i < n; ++i) dl[i] *= inv_n;

        // The tied output's share of the embedding gradient, and the gradient into ln_f.
        detail::gemm_rows(threads_, trans::yes, trans::no, V, D, Ni, 1.0f, dl, V, lnf_.data(), D, 0.0f, dtok, D);
        detail::gemm_rows(threads_, trans::no, trans::no, Ni, D, V, 1.0f, dl, V, tok, D, 0.0f, dtmp_.data(), D);
        std::fill(dx_.begin(), dx_.begin() + static_cast<std::ptrdiff_t>(N * Dz), 0.0f);
        layer_norm_backward(final_x_.data(), params + m_.lnf_weight().offset, lnf_mean_.data(), lnf_rstd_.data(),
                            dtmp_.data(), dx_.data(), grads + m_.lnf_weight().offset, grads + m_.lnf_bias().offset, N,
                            D);

        // dx_ holds the gradient of the residual stream leaving block l.
        for (int l = m_.layers() - 1; l >= 0; --l) {
            const layer_acts& a = layers_[static_cast<std::size_t>(l)];
            const gpt::block_slots& s = m_.block(l);

            // MLP branch: next = mid + gelu(ln2(mid) Wfc + bfc) Wout + bout.
            detail::gemm_rows(threads_, trans::yes, trans::no, F, D, Ni, 1.0f, a.act.data(), F, dx_.data(), D, 0.0f,
                              g(grads, s.out_w), D);
            column_sums(dx_.data(), N, D, g(grads, s.out_b));
            detail::gemm_rows(threads_, trans::no, trans::yes, Ni, F, D, 1.0f, dx_.data(), D, p(params, s.out_w), D,
                              0.0f, dwide_.data(), F);
            for (std::size_t i = 0, n = N * Fz; i < n; ++i) {
                const float u = a.pre[i], th = a.tanh[i];
                const float dth = (1.0f - th * th) * detail::gelu_c * (1.0f + 3.0f * detail::gelu_k * u * u);
                dwide_[i] *= 0.5f * (1.0f + th) + 0.5f * u * dth;
            }
            detail::gemm_rows(threads_, trans::yes, trans::no, D, F, Ni, 1.0f, a.ln2.data(), D, dwide_.data(), F, 0.0f,
                              g(grads, s.fc_w), F);
            column_sums(dwide_.data(), N, F, g(grads, s.fc_b));
            detail::gemm_rows(threads_, trans::no, trans::yes, Ni, D, F, 1.0f, dwide_.data(), F, p(params, s.fc_w), F,
                              0.0f, dtmp_.data(), D);
            std::copy(dx_.begin(), dx_.begin() + static_cast<std::ptrdiff_t>(N * Dz), dmid_.begin());
            layer_norm_backward(a.mid.data(), p(params, s.ln2_w), a.ln2_mean.data(), a.ln2_rstd.data(), dtmp_.data(),
                                dmid_.data(), g(grads, s.ln2_w), g(grads, s.ln2_b), N, D);

            // Attention branch: mid = x + att Wproj + bproj.
            detail::gemm_rows(threads_, trans::yes, trans::no, D, D, Ni, 1.0f, a.att.data(), D, dmid_.data(), D, 0.0f,
                              g(grads, s.proj_w), D);
            column_sums(dmid_.data(), N, D, g(grads, s.proj_b));
            detail::gemm_rows(threads_, trans::no, trans::yes, Ni, D, D, 1.0f, dmid_.data(), D, p(params, s.proj_w), D,
                              0.0f, dtmp_.data(), D);
            attention_backward(a, dtmp_.data(), B);
            detail::gemm_rows(threads_, trans::yes, trans::no, D, 3 * D, Ni, 1.0f, a.ln1.data(), D, dqkv_.data(),
                              3 * D, 0.0f, g(grads, s.qkv_w), 3 * D);
            column_sums(dqkv_.data(), N, 3 * D, g(grads, s.qkv_b));
            detail::gemm_rows(threads_, trans::no, trans::yes, Ni, D, 3 * D, 1.0f, dqkv_.data(), 3 * D,
                              p(params, s.qkv_w), 3 * D, 0.0f, dtmp_.data(), D);
            std::copy(dmid_.begin(), dmid_.begin() + static_cast<std::ptrdiff_t>(N * Dz), dx_.begin());
            layer_norm_backward(a.x.data(), p(params, s.ln1_w), a.ln1_mean.data(), a.ln1_rstd.data(), dtmp_.data(),
                                dx_.data(), g(grads, s.ln1_w), g(grads, s.ln1_b), N, D);
        }

        // The embeddings: each input token's row and each position's row.
        float* dpos = grads + m_.pos_embedding().offset;
        for (int b = 0; b < B; ++b) {
            const std::uint32_t first = positions[b] - static_cast<std::uint32_t>(T);
            for (int t = 0; t < T; ++t) {
                const float* d = dx_.data() + (static_cast<std::size_t>(b) * T + static_cast<std::size_t>(t)) * Dz;
                float* e = dtok + static_cast<std::size_t>(tokens[first + static_cast<std::uint32_t>(t)]) * Dz;
                float* pe = dpos + static_cast<std::size_t>(t) * Dz;
                for (int i = 0; i < D; ++i) {
                    e[i] += d[i];
                    pe[i] += d[i];
                }
            }
        }
    }

    const gpt& m_;
    int max_batch_, threads_;
    std::vector<layer_acts> layers_;
    std::vector<float> final_x_, lnf_, lnf_mean_, lnf_rstd_, logits_;
    std::vector<float> dx_, dmid_, dtmp_, dwide_, dqkv_, dscores_;
};

} // namespace trickle_sim
