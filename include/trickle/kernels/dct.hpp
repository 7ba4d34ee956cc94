// trickle/kernels/dct.hpp: the orthonormal DCT-II of short chunks, 1-D and 2-D tiles: the
// frequency domain DeMo codes momentum in (algorithm/demo.hpp).
//
// What is computed (shared by every backend):
//   basis       B_m, the m x m orthonormal DCT-II matrix, row k = frequency k:
//                 B_m[k][i] = a_k cos(pi (2 i + 1) k / (2 m)),  a_0 = sqrt(1 / m), a_k = sqrt(2 / m)
//               computed in double and rounded to float once (dct_bases), so every worker and
//               backend multiplies by the same floats. Orthonormal: the inverse is B_m^T.
//   a chunk     a block of a tensor viewed as rows x cols (row stride ld in the tensor): a
//               1-D chunk is 1 x m (m <= s consecutive values), a 2-D tile r x c (r, c <= s)
//               of a matrix. Its coefficients live in a slot of the coefficient buffer, row
//               major with row stride `pitch` (s for tiles, the slot's width for 1-D
//               chunks), zero outside r x c: a partial chunk at a tensor's edge is padded
//               with zeros in the frequency domain, so every slot has the same size.
//   forward     Y = B_r X B_c^T: every row transformed by B_c, then every column by B_r;
//   inverse     X = B_r^T Y B_c: every column by B_r^T, then every row by B_c^T.
// Each 1-D transform sums its m products in index order in fp32 (mul then add, no fused
// multiply-add: add_rn / mul_rn), so the bits depend on the inputs and m alone.
//
// dct_encode_body (tensor -> slot) and dct_decode_body (slot -> the tensor update) are the
// kernel bodies, run over chunk indices; the host runs them by ranges (one chunk at a time,
// a row or column of at most max_dct_chunk floats on the stack). This version has no device
// dispatch for them (DeMo runs on host parameters): see docs/demo.md.
#pragma once

#include <trickle/config.hpp>
#include <trickle/error.hpp>
#include <trickle/kernels/outer_rule.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <numbers>
#include <vector>

TRICKLE_NAMESPACE_BEGIN

// The largest chunk side a DCT chunk may have (its row buffer lives on the stack).
inline constexpr std::size_t max_dct_chunk = 256;

// Outputs each 1-D transform computes together (dct_forward_1d, dct_inverse_1d): one
// accumulator per output, so the compiler can keep them in vector registers. Each output's
// sum still runs in index order, so the bits do not depend on it.
inline constexpr std::size_t dct_lanes = 16;

// The orthonormal DCT-II bases of every size 1 .. s, in one array. For each m: B_m (m rows
// of pitch(m) floats, row k = frequency k, zero past column m), then its transpose B_m^T
// (row i = sample i, the same padding): B_m starts at offset(m), B_m^T at offset(m) +
// m pitch(m). The padding lets a block of dct_lanes outputs read whole rows.
class dct_bases {
public:
    dct_bases() = default;
    explicit dct_bases(std::size_t s) : s_(s) {
        require(s >= 1 && s <= max_dct_chunk, "dct: chunk size must be in [1, ", max_dct_chunk, "], got ", s);
        data_.assign(offset(s + 1), 0.0f);
        for (std::size_t m = 1; m <= s; ++m) {
            float* b = data_.data() + offset(m);
            float* bt = b + m * pitch(m);
            const double a0 = std::sqrt(1.0 / static_cast<double>(m)), ak = std::sqrt(2.0 / static_cast<double>(m));
            for (std::size_t k = 0; k < m; ++k)
                for (std::size_t i = 0; i < m; ++i) {
                    const auto v = static_cast<float>(
                        (k == 0 ? a0 : ak) *
                        std::cos(std::numbers::pi * static_cast<double>((2 * i + 1) * k) / static_cast<double>(2 * m)));
                    b[k * pitch(m) + i] = v;
                    bt[i * pitch(m) + k] = v;
                }
        }
    }
    // The row length of B_m and B_m^T: m rounded up to a multiple of dct_lanes.
    static constexpr std::size_t pitch(std::size_t m) { return (m + dct_lanes - 1) / dct_lanes * dct_lanes; }
    static constexpr std::size_t offset(std::size_t m) {
        std::size_t o = 0;
        for (std::size_t j = 1; j < m; ++j) o += 2 * j * pitch(j);
        return o;
    }
    std::size_t max_size() const { return s_; }
    // B_m[k][i] = of(m)[k * pitch(m) + i].
    const float* of(std::size_t m) const { return data_.data() + offset(m); }
    const float* data() const { return data_.data(); }

private:
    std::size_t s_ = 0;
    std::vector<float> data_;
};

namespace detail {

// In place along a row or column v[0], v[stride], ... of m values, through tmp:
//   forward  v[k] = sum_i B[k][i] v[i]   (B_m^T read by rows: BT[i][k]);
//   inverse  v[i] = sum_k B[k][i] v[k]   (B_m read by rows).
// Both are out[o] = sum_j M[j][o] in[j] over the rows of a padded matrix M (pitch P), one
// block of dct_lanes outputs at a time, each output summed in j order (mul, then add).
TRICKLE_HOST_DEVICE void dct_apply_1d(const float* M, std::size_t m, float* v, std::size_t stride, float* tmp) {
    const std::size_t P = dct_bases::pitch(m);
    for (std::size_t j = 0; j < m; ++j) tmp[j] = v[j * stride];
    for (std::size_t o0 = 0; o0 < m; o0 += dct_lanes) {
        float acc[dct_lanes] = {};
        for (std::size_t j = 0; j < m; ++j) {
            const float x = tmp[j];
            const float* row = M + j * P + o0;
            TRICKLE_UNROLL_ALL
            for (std::size_t l = 0; l < dct_lanes; ++l) acc[l] = add_rn(acc[l], mul_rn(row[l], x));
        }
        const std::size_t count = m - o0 < dct_lanes ? m - o0 : dct_lanes;
        for (std::size_t l = 0; l < count; ++l) v[(o0 + l) * stride] = acc[l];
    }
}

TRICKLE_HOST_DEVICE void dct_forward_1d(const float* bases, std::size_t m, float* v, std::size_t stride, float* tmp) {
    dct_apply_1d(bases + dct_bases::offset(m) + m * dct_bases::pitch(m), m, v, stride, tmp);
}

TRICKLE_HOST_DEVICE void dct_inverse_1d(const float* bases, std::size_t m, float* v, std::size_t stride, float* tmp) {
    dct_apply_1d(bases + dct_bases::offset(m), m, v, stride, tmp);
}

} // namespace detail

// One chunk of a tensor: rows x cols values of tensor `tensor` starting at its element
// `first`, row stride ld; its slot in the coefficient buffer is `slot`.
struct dct_chunk {
    std::uint64_t first = 0;
    std::uint32_t tensor = 0;
    std::uint32_t rows = 1, cols = 1, ld = 1;
    std::uint64_t slot = 0;
};

// How DeMo cuts tensor `tensor` (rows x cols, row major) with chunk side s: a vector (rows
// = 1) into 1-D chunks of s values, appended to `vectors`; a matrix into s x s tiles in row
// major order, appended to `tiles`; partial chunks at the edges. Each chunk's slot is its
// index in its list (the two lists have their own coefficient buffers: slots of s and s * s).
inline void append_dct_chunks(std::vector<dct_chunk>& vectors, std::vector<dct_chunk>& tiles, std::uint32_t tensor,
                              std::size_t rows, std::size_t cols, std::size_t s) {
    const auto u32 = [](std::size_t v) { return static_cast<std::uint32_t>(v); };
    if (rows == 1) {
        for (std::size_t c0 = 0; c0 < cols; c0 += s)
            vectors.push_back({c0, tensor, 1, u32(std::min(s, cols - c0)), u32(cols), vectors.size()});
        return;
    }
    for (std::size_t r0 = 0; r0 < rows; r0 += s)
        for (std::size_t c0 = 0; c0 < cols; c0 += s)
            tiles.push_back({r0 * cols + c0, tensor, u32(std::min(s, rows - r0)), u32(std::min(s, cols - c0)), u32(cols),
                             tiles.size()});
}

// Y (in the slot) = the DCT of the chunk of in[tensor] (element first + r ld + c).
struct dct_encode_body {
    const dct_chunk* chunks = nullptr;
    const float* bases = nullptr; // dct_bases::data()
    const float* const* in = nullptr;
    float* coef = nullptr;
    std::size_t slot_size = 0, pitch = 0;

    TRICKLE_HOST_DEVICE void operator()(std::size_t j) const {
        const dct_chunk c = chunks[j];
        float* y = coef + static_cast<std::size_t>(c.slot) * slot_size;
        const float* x = in[c.tensor] + c.first;
        for (std::size_t i = 0; i < slot_size; ++i) y[i] = 0.0f;
        for (std::size_t r = 0; r < c.rows; ++r)
            for (std::size_t q = 0; q < c.cols; ++q) y[r * pitch + q] = x[r * c.ld + q];
        float tmp[max_dct_chunk];
        for (std::size_t r = 0; r < c.rows; ++r) detail::dct_forward_1d(bases, c.cols, y + r * pitch, 1, tmp);
        if (c.rows > 1)
            for (std::size_t q = 0; q < c.cols; ++q) detail::dct_forward_1d(bases, c.rows, y + q, pitch, tmp);
    }
    TRICKLE_HOST_DEVICE void run(std::size_t j0, std::size_t j1) const {
        for (std::size_t j = j0; j < j1; ++j) (*this)(j);
    }
};

// The slot's inverse DCT in place, then update(value, x) for each of the chunk's values of
// out[tensor] with x its inverse-DCT value.
template <class Update>
struct dct_decode_body {
    const dct_chunk* chunks = nullptr;
    const float* bases = nullptr;
    float* coef = nullptr;
    float* const* out = nullptr;
    std::size_t slot_size = 0, pitch = 0;
    Update update{};

    TRICKLE_HOST_DEVICE void operator()(std::size_t j) const {
        const dct_chunk c = chunks[j];
        float* y = coef + static_cast<std::size_t>(c.slot) * slot_size;
        float tmp[max_dct_chunk];
        if (c.rows > 1)
            for (std::size_t q = 0; q < c.cols; ++q) detail::dct_inverse_1d(bases, c.rows, y + q, pitch, tmp);
        for (std::size_t r = 0; r < c.rows; ++r) detail::dct_inverse_1d(bases, c.cols, y + r * pitch, 1, tmp);
        float* p = out[c.tensor] + c.first;
        for (std::size_t r = 0; r < c.rows; ++r)
            for (std::size_t q = 0; q < c.cols; ++q) update(p[r * c.ld + q], y[r * pitch + q]);
    }
    TRICKLE_HOST_DEVICE void run(std::size_t j0, std::size_t j1) const {
        for (std::size_t j = j0; j < j1; ++j) (*this)(j);
    }
};

// DeMo's parameter update from the decoded mean Q (DisTrO's sign form):
//   p <- p - lr (sign(q) + wd p),  q = scale * x  (scale = 1 / workers; sign(0) = 0)
struct demo_sign_update {
    float lr = 0.0f, wd = 0.0f, scale = 1.0f;
    TRICKLE_HOST_DEVICE void operator()(float& p, float x) const {
        const float q = mul_rn(x, scale);
        const float s = q > 0.0f ? 1.0f : q < 0.0f ? -1.0f : 0.0f;
        p = sub_rn(p, mul_rn(lr, add_rn(s, mul_rn(wd, p))));
    }
};

TRICKLE_NAMESPACE_END
