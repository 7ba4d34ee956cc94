// DeMo (algorithm/demo.hpp): the DCT bodies against the transform written out in double,
// the optimizer against a reference written here from the paper's equations (momentum in
// the parameters' domain, top-k of each chunk's DCT, the sent part removed, the mean of the
// workers' sparse coefficients inverted, p -= lr (sign(Q) + wd p)), bit-identical
// replicas, bytes equal to the cost model, the shared-index variant, checkpoints, bad input.
#include <trickle/algorithm/demo.hpp>
#include <trickle/codec/codecs.hpp>
#include <trickle/comm/local.hpp>

#include "test_support.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <numbers>
#include <random>
#include <sstream>
#include <vector>

using namespace trickle;
using trickle_test::bitwise_equal;

namespace {

// The orthonormal DCT-II basis in double.
double basis(std::size_t m, std::size_t k, std::size_t i) {
    const double a = k == 0 ? std::sqrt(1.0 / static_cast<double>(m)) : std::sqrt(2.0 / static_cast<double>(m));
    return a * std::cos(std::numbers::pi * static_cast<double>((2 * i + 1) * k) / static_cast<double>(2 * m));
}

// The 2-D DCT of an r x c block (row major), or its inverse, in double.
std::vector<double> dct2(const std::vector<double>& x, std::size_t r, std::size_t c, bool inverse) {
    std::vector<double> y(r * c, 0.0);
    for (std::size_t a = 0; a < r; ++a)
        for (std::size_t b = 0; b < c; ++b) {
            double s = 0;
            for (std::size_t i = 0; i < r; ++i)
                for (std::size_t j = 0; j < c; ++j)
                    s += inverse ? basis(r, i, a) * basis(c, j, b) * x[i * c + j] : basis(r, a, i) * basis(c, b, j) * x[i * c + j];
            y[a * c + b] = s;
        }
    return y;
}

struct block {
    std::size_t tensor, first, rows, cols, ld;
};

// The chunks of each tensor, as the paper splits them (s x s tiles, 1-D chunks of s).
std::vector<block> blocks_of(const std::vector<demo_shape>& shapes, std::size_t s) {
    std::vector<block> out;
    for (std::size_t t = 0; t < shapes.size(); ++t) {
        const auto [R, C] = shapes[t];
        if (R == 1) {
            for (std::size_t c0 = 0; c0 < C; c0 += s) out.push_back({t, c0, 1, std::min(s, C - c0), C});
        } else {
            for (std::size_t r0 = 0; r0 < R; r0 += s)
                for (std::size_t c0 = 0; c0 < C; c0 += s)
                    out.push_back({t, r0 * C + c0, std::min(s, R - r0), std::min(s, C - c0), C});
        }
    }
    return out;
}

using tensors = std::vector<std::vector<double>>;

// One reference DeMo step on every worker at once: m[w] (momentum), g[w] (gradients),
// p (the parameters, equal on every worker). Returns |Q| per element (to skip signs of
// values that round to about zero).
tensors reference_step(std::vector<tensors>& m, const std::vector<tensors>& g, tensors& p,
                       const std::vector<demo_shape>& shapes, const demo_options& o) {
    const std::size_t N = m.size();
    tensors sum(p.size()), absq(p.size());
    for (std::size_t t = 0; t < p.size(); ++t) sum[t].assign(p[t].size(), 0.0), absq[t].assign(p[t].size(), 0.0);
    const auto blocks = blocks_of(shapes, o.chunk);
    for (const block& b : blocks) {
        std::vector<double> coef_sum(b.rows * b.cols, 0.0);
        for (std::size_t w = 0; w < N; ++w) {
            std::vector<double> x(b.rows * b.cols);
            for (std::size_t r = 0; r < b.rows; ++r)
                for (std::size_t c = 0; c < b.cols; ++c) {
                    double& mv = m[w][b.tensor][b.first + r * b.ld + c];
                    mv = o.compression_decay * mv + g[w][b.tensor][b.first + r * b.ld + c];
                    x[r * b.cols + c] = mv;
                }
            std::vector<double> y = dct2(x, b.rows, b.cols, false);
            // The k largest magnitudes (a vector's chunk keeps min(k, s)).
            const std::size_t k = std::min({o.k, b.rows == 1 && shapes[b.tensor].rows == 1 ? o.chunk : o.k, y.size()});
            std::vector<std::size_t> idx(y.size());
            for (std::size_t i = 0; i < idx.size(); ++i) idx[i] = i;
            std::stable_sort(idx.begin(), idx.end(), [&](std::size_t a, std::size_t c) { return std::abs(y[a]) > std::abs(y[c]); });
            std::vector<double> sent(y.size(), 0.0);
            for (std::size_t j = 0; j < k; ++j) sent[idx[j]] = y[idx[j]];
            const std::vector<double> removed = dct2(sent, b.rows, b.cols, true);
            for (std::size_t r = 0; r < b.rows; ++r)
                for (std::size_t c = 0; c < b.cols; ++c) m[w][b.tensor][b.first + r * b.ld + c] -= removed[r * b.cols + c];
            for (std::size_t i = 0; i < y.size(); ++i) coef_sum[i] += sent[i];
        }
        for (double& v : coef_sum) v /= static_cast<double>(N);
        const std::vector<double> q = dct2(coef_sum, b.rows, b.cols, true);
        for (std::size_t r = 0; r < b.rows; ++r)
            for (std::size_t c = 0; c < b.cols; ++c) {
                const std::size_t i = b.first + r * b.ld + c;
                const double qv = q[r * b.cols + c];
                absq[b.tensor][i] = std::abs(qv);
                const double sg = qv > 0 ? 1.0 : qv < 0 ? -1.0 : 0.0;
                p[b.tensor][i] -= o.lr * (sg + o.weight_decay * p[b.tensor][i]);
            }
    }
    return absq;
}

// The test model: a vector of 70 (chunks 8 + partial), a 10 x 13 matrix (partial tiles),
// a 1 x 5 vector shorter than a chunk.
const std::vector<demo_shape> shapes = {{1, 70}, {10, 13}, {1, 5}};

float grad(int w, std::size_t t, std::size_t i, int step) {
    std::mt19937 g(static_cast<unsigned>(1000003 * w + 7919 * t + 31 * i + 104729 * static_cast<unsigned>(step)));
    return std::uniform_real_distribution<float>(-1.0f, 1.0f)(g);
}

struct worker_model {
    std::vector<std::vector<float>> p, g;
    param_group<float> params, grads;
    explicit worker_model() {
        for (const auto& s : shapes) {
            p.emplace_back(s.rows * s.cols);
            g.emplace_back(s.rows * s.cols);
        }
        for (std::size_t t = 0; t < shapes.size(); ++t) {
            for (std::size_t i = 0; i < p[t].size(); ++i) p[t][i] = std::sin(0.1f * static_cast<float>(i + 3 * t));
            params.add("t" + std::to_string(t), p[t].data(), p[t].size());
            grads.add("t" + std::to_string(t), g[t].data(), g[t].size());
        }
    }
    void fill(int w, int step) {
        for (std::size_t t = 0; t < g.size(); ++t)
            for (std::size_t i = 0; i < g[t].size(); ++i) g[t][i] = grad(w, t, i, step);
    }
    std::vector<float> flat() const {
        std::vector<float> out;
        for (const auto& v : p) out.insert(out.end(), v.begin(), v.end());
        return out;
    }
};

} // namespace

TEST_CASE("dct bodies: the forward and inverse transforms of 1-D chunks and 2-D tiles, padded slots") {
    const std::size_t s = 8;
    const dct_bases bases(s);
    const std::size_t R = 11, C = 13;
    std::vector<float> x(R * C);
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = std::cos(0.37f * static_cast<float>(i)) + 0.01f * static_cast<float>(i % 5);
    const float* in[] = {x.data()};
    // Tile (8, 8) at row 8, col 8: a 3 x 5 partial tile.
    const std::vector<dct_chunk> chunks = {{0, 0, 8, 8, C, 0}, {8 * C + 8, 0, 3, 5, C, 1}, {3, 0, 1, 7, C, 2}};
    std::vector<float> coef(3 * s * s, -1.0f);
    dct_encode_body enc{chunks.data(), bases.data(), in, coef.data(), s * s, s};
    enc.run(0, chunks.size());
    for (std::size_t j = 0; j < chunks.size(); ++j) {
        const dct_chunk c = chunks[j];
        std::vector<double> blockv(c.rows * c.cols);
        for (std::size_t r = 0; r < c.rows; ++r)
            for (std::size_t q = 0; q < c.cols; ++q) blockv[r * c.cols + q] = x[c.first + r * C + q];
        const auto want = dct2(blockv, c.rows, c.cols, false);
        for (std::size_t r = 0; r < s; ++r)
            for (std::size_t q = 0; q < s; ++q) {
                const float got = coef[j * s * s + r * s + q];
                if (r < c.rows && q < c.cols)
                    CHECK(got == doctest::Approx(want[r * c.cols + q]).epsilon(1e-5).scale(1.0));
                else
                    CHECK(got == 0.0f); // the padding
            }
    }
    // The inverse gives the values back: update(p, x) writes x.
    struct assign {
        void operator()(float& p, float v) const { p = v; }
    };
    std::vector<float> back(R * C, 0.0f);
    float* out[] = {back.data()};
    dct_decode_body<assign> dec{chunks.data(), bases.data(), coef.data(), out, s * s, s, {}};
    dec.run(0, chunks.size());
    for (const dct_chunk& c : chunks)
        for (std::size_t r = 0; r < c.rows; ++r)
            for (std::size_t q = 0; q < c.cols; ++q) {
                const std::size_t i = c.first + r * C + q;
                CHECK(back[i] == doctest::Approx(x[i]).epsilon(1e-5).scale(1.0));
            }
    CHECK_THROWS_AS(dct_bases(0), invalid_argument);
    CHECK_THROWS_AS(dct_bases(max_dct_chunk + 1), invalid_argument);
}

TEST_CASE("demo: the paper's equations, bit-identical replicas, bytes as the cost model says") {
    const int N = 3, steps = 4;
    const demo_options o{.lr = 0.01, .compression_decay = 0.9, .weight_decay = 0.1, .chunk = 8, .k = 3};
    std::vector<std::vector<float>> after(N);
    std::vector<exchange_stats> stats(N);
    std::vector<std::vector<codec::wire_parts>> parts(N);
    comm::run_local(N, [&](comm::local& c) {
        worker_model m;
        demo_engine<comm::local> d(m.params, m.grads, shapes, c, o);
        CHECK(d.chunks() == 9 + 4 + 1);
        for (int t = 0; t < steps; ++t) {
            m.fill(c.rank(), t);
            d.step(exec::host{});
        }
        after[static_cast<std::size_t>(c.rank())] = m.flat();
        stats[static_cast<std::size_t>(c.rank())] = d.stats();
        // The cost model: each step, the vectors' and the tiles' all-gathers of packed payloads.
        const codec::chunk_topk<> v{.chunk = 8, .k = 3}, t{.chunk = 64, .k = 3};
        parts[static_cast<std::size_t>(c.rank())] = {codec::sparse_all_reduce_parts(v, 10 * 8, N, c.rank()),
                                                     codec::sparse_all_reduce_parts(t, 4 * 64, N, c.rank())};
    });
    for (int r = 1; r < N; ++r) CHECK(bitwise_equal(after[static_cast<std::size_t>(r)], after[0]));
    for (int r = 0; r < N; ++r) {
        const auto& p = parts[static_cast<std::size_t>(r)];
        const std::uint64_t per_step = p[0].total() + p[1].total(); // codes, indices, padding
        CHECK(stats[static_cast<std::size_t>(r)].total.bytes_sent == steps * per_step);
        CHECK(stats[static_cast<std::size_t>(r)].exchanges == steps);
        CHECK(stats[static_cast<std::size_t>(r)].sent.indices == steps * (p[0].indices + p[1].indices));
        CHECK(stats[static_cast<std::size_t>(r)].reduction() > 1.0);
    }
    // The reference, in double.
    std::vector<tensors> m(N), g(N);
    tensors p;
    {
        worker_model w;
        for (const auto& v : w.p) p.emplace_back(v.begin(), v.end());
    }
    for (int w = 0; w < N; ++w)
        for (const auto& s : shapes) {
            m[static_cast<std::size_t>(w)].emplace_back(s.rows * s.cols, 0.0);
            g[static_cast<std::size_t>(w)].emplace_back(s.rows * s.cols, 0.0);
        }
    tensors absq;
    std::size_t checked = 0, skipped = 0;
    std::vector<tensors> ref_hist;
    for (int t = 0; t < steps; ++t) {
        for (int w = 0; w < N; ++w)
            for (std::size_t ti = 0; ti < shapes.size(); ++ti)
                for (std::size_t i = 0; i < g[static_cast<std::size_t>(w)][ti].size(); ++i)
                    g[static_cast<std::size_t>(w)][ti][i] = grad(w, ti, i, t);
        absq = reference_step(m, g, p, shapes, o);
    }
    // Compare: a sign decided by a value within rounding of zero may differ (skipped).
    std::size_t flat = 0;
    for (std::size_t ti = 0; ti < p.size(); ++ti)
        for (std::size_t i = 0; i < p[ti].size(); ++i, ++flat) {
            if (absq[ti][i] < 1e-4) {
                ++skipped;
                continue;
            }
            ++checked;
            CHECK(after[0][flat] == doctest::Approx(p[ti][i]).epsilon(1e-4).scale(1.0));
        }
    CHECK(checked > 9 * skipped);
}

TEST_CASE("demo: the shared-index variant sums k coefficients per chunk through the all-reduce") {
    const int N = 4;
    const demo_options o{.lr = 0.01, .compression_decay = 0.999, .chunk = 8, .k = 2, .seed = 5};
    std::vector<std::vector<float>> after(N);
    std::vector<exchange_stats> stats(N);
    comm::run_local(N, [&](comm::local& c) {
        worker_model m;
        demo_engine<comm::local, demo_select::shared> d(m.params, m.grads, shapes, c, o);
        for (int t = 0; t < 5; ++t) {
            m.fill(c.rank(), t);
            d.step(exec::host{});
        }
        after[static_cast<std::size_t>(c.rank())] = m.flat();
        stats[static_cast<std::size_t>(c.rank())] = d.stats();
    });
    for (int r = 1; r < N; ++r) CHECK(bitwise_equal(after[static_cast<std::size_t>(r)], after[0]));
    for (int r = 0; r < N; ++r) {
        // No index: the all-reduce of 2 values per chunk, 10 vector chunks and 4 tiles.
        const std::uint64_t per_step = trickle::detail::all_reduce_bytes(10 * 2, 4, N, r) +
                                       trickle::detail::all_reduce_bytes(4 * 2, 4, N, r);
        CHECK(stats[static_cast<std::size_t>(r)].total.bytes_sent == 5 * per_step);
        CHECK(stats[static_cast<std::size_t>(r)].sent.indices == 0);
    }
    worker_model start;
    CHECK(!bitwise_equal(after[0], start.flat())); // it trained
}

TEST_CASE("demo: sign values through a codec, a checkpoint resumes bit for bit") {
    const int N = 2;
    const demo_options o{.lr = 0.02, .compression_decay = 0.95, .chunk = 8, .k = 4};
    std::vector<std::vector<float>> straight(N), resumed(N);
    std::vector<std::string> saved(N);
    comm::run_local(N, [&](comm::local& c) {
        const auto r = static_cast<std::size_t>(c.rank());
        worker_model m;
        demo_engine<comm::local, demo_select::top_k, codec::sign2_block> d(m.params, m.grads, shapes, c, o);
        for (int t = 0; t < 6; ++t) {
            if (t == 3) {
                std::ostringstream os;
                d.save(os);
                saved[r] = os.str();
            }
            m.fill(c.rank(), t);
            d.step(exec::host{});
        }
        straight[r] = m.flat();
        // Resume at step 3 in a fresh object: the parameters as they were then, the momentum from the checkpoint.
        worker_model m2;
        demo_engine<comm::local, demo_select::top_k, codec::sign2_block> e(m2.params, m2.grads, shapes, c, o);
        for (int t = 0; t < 3; ++t) {
            m2.fill(c.rank(), t);
            e.step(exec::host{});
        }
        worker_model m3;
        m3.p = m2.p; // (the trainer restores its parameters)
        param_group<float> pg, gg;
        for (std::size_t t = 0; t < shapes.size(); ++t) {
            pg.add("t" + std::to_string(t), m3.p[t].data(), m3.p[t].size());
            gg.add("t" + std::to_string(t), m3.g[t].data(), m3.g[t].size());
        }
        demo_engine<comm::local, demo_select::top_k, codec::sign2_block> f(pg, gg, shapes, c, o);
        std::istringstream is(saved[r]);
        f.load(is);
        CHECK(f.stats().steps == 3);
        for (int t = 3; t < 6; ++t) {
            for (std::size_t ti = 0; ti < m3.g.size(); ++ti)
                for (std::size_t i = 0; i < m3.g[ti].size(); ++i) m3.g[ti][i] = grad(c.rank(), ti, i, t);
            f.step(exec::host{});
        }
        resumed[r] = m3.flat();
    });
    for (int r = 0; r < N; ++r) CHECK(bitwise_equal(resumed[static_cast<std::size_t>(r)], straight[static_cast<std::size_t>(r)]));
    CHECK(bitwise_equal(straight[1], straight[0]));
}

TEST_CASE("demo: bad input is refused on every worker and changes nothing") {
    const auto refused = [](demo_options o, std::vector<demo_shape> sh, bool bad_grads, const char* what) {
        CAPTURE(what);
        comm::run_local(2, [&](comm::local& c) {
            worker_model m;
            const auto before = m.flat();
            param_group<float> grads = m.grads;
            std::vector<float> extra(3);
            if (bad_grads) {
                grads = param_group<float>{};
                grads.add("t0", m.g[0].data(), m.g[0].size()).add("t1", m.g[1].data(), m.g[1].size() - 1);
                grads.add("t2", extra.data(), extra.size());
            }
            CHECK_THROWS_WITH_AS((demo_engine<comm::local>(m.params, grads, sh, c, o)), doctest::Contains(what),
                                 invalid_argument);
            CHECK(bitwise_equal(m.flat(), before));
        });
    };
    refused({.k = 0}, shapes, false, "k must be in");
    refused({.chunk = 4, .k = 17}, shapes, false, "k must be in");
    refused({.chunk = 0}, shapes, false, "chunk must be in");
    refused({.chunk = 300}, shapes, false, "chunk must be in");
    refused({.lr = 0.0}, shapes, false, "lr must be");
    refused({.compression_decay = 1.5}, shapes, false, "compression_decay");
    refused({.weight_decay = -1.0}, shapes, false, "weight_decay");
    refused({}, {{1, 70}, {13, 10}, {2, 2}}, false, "does not hold");
    refused({}, {{1, 70}}, false, "1 shapes for 3 tensors");
    refused({}, shapes, true, "gradient 1");
}
