// examples/sim/gemm.hpp: the model's matrix product, through CBLAS when the build found one.
//
// TRICKLE_SIM_HAVE_CBLAS is set by examples/sim/CMakeLists.txt. Without it, blocked_gemm
// runs: operands packed into contiguous row-major tiles so the innermost loop is a
// unit-stride multiply-add the compiler vectorizes.
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

#if TRICKLE_SIM_HAVE_CBLAS
#include <cblas.h>
#endif

namespace trickle_sim {

enum class trans { no, yes };

// C[M×N] = alpha · op(A) · op(B) + beta · C, all row-major. op(A) is M×K: A is M×K with
// leading dimension lda (trans::no) or K×M (trans::yes); likewise op(B) is K×N.
inline void blocked_gemm(trans ta, trans tb, int M, int N, int K, float alpha, const float* A, int lda,
                         const float* B, int ldb, float beta, float* C, int ldc) {
    if (M <= 0 || N <= 0) return;
    for (int i = 0; i < M; ++i) {
        float* c = C + static_cast<std::ptrdiff_t>(i) * ldc;
        if (beta == 0.0f)
            std::fill(c, c + N, 0.0f);
        else if (beta != 1.0f)
            for (int j = 0; j < N; ++j) c[j] *= beta;
    }
    if (K <= 0 || alpha == 0.0f) return;

    constexpr int kb = 128, nb = 512; // a K×N tile of B (256 KiB) stays in L2
    thread_local std::vector<float> a_pack, b_pack;
    a_pack.resize(static_cast<std::size_t>(M) * kb);
    b_pack.resize(static_cast<std::size_t>(kb) * nb);
    auto a_at = [&](int i, int k) {
        return ta == trans::no ? A[static_cast<std::ptrdiff_t>(i) * lda + k] : A[static_cast<std::ptrdiff_t>(k) * lda + i];
    };
    auto b_at = [&](int k, int j) {
        return tb == trans::no ? B[static_cast<std::ptrdiff_t>(k) * ldb + j] : B[static_cast<std::ptrdiff_t>(j) * ldb + k];
    };
    for (int k0 = 0; k0 < K; k0 += kb) {
        const int kc = std::min(kb, K - k0);
        for (int i = 0; i < M; ++i)
            for (int k = 0; k < kc; ++k) a_pack[static_cast<std::size_t>(i) * kb + k] = alpha * a_at(i, k0 + k);
        for (int j0 = 0; j0 < N; j0 += nb) {
            const int nc = std::min(nb, N - j0);
            for (int k = 0; k < kc; ++k)
                for (int j = 0; j < nc; ++j) b_pack[static_cast<std::size_t>(k) * nb + j] = b_at(k0 + k, j0 + j);
            for (int i = 0; i < M; ++i) {
                float* __restrict c = C + static_cast<std::ptrdiff_t>(i) * ldc + j0;
                const float* a = a_pack.data() + static_cast<std::size_t>(i) * kb;
                for (int k = 0; k < kc; ++k) {
                    const float aik = a[k];
                    const float* __restrict b = b_pack.data() + static_cast<std::size_t>(k) * nb;
                    for (int j = 0; j < nc; ++j) c[j] += aik * b[j];
                }
            }
        }
    }
}

// The product the model uses: CBLAS when available, blocked_gemm otherwise.
inline void gemm(trans ta, trans tb, int M, int N, int K, float alpha, const float* A, int lda, const float* B,
                 int ldb, float beta, float* C, int ldc) {
#if TRICKLE_SIM_HAVE_CBLAS
    if (M <= 0 || N <= 0) return;
    cblas_sgemm(CblasRowMajor, ta == trans::no ? CblasNoTrans : CblasTrans, tb == trans::no ? CblasNoTrans : CblasTrans,
                M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
#else
    blocked_gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
#endif
}

// "openblas", "cblas" or "built-in blocked loops": what gemm runs, for the report.
inline const char* gemm_backend() {
#if TRICKLE_SIM_HAVE_CBLAS && defined(OPENBLAS_VERSION)
    return "OpenBLAS";
#elif TRICKLE_SIM_HAVE_CBLAS
    return "CBLAS";
#else
    return "built-in blocked loops";
#endif
}

// One BLAS thread per call: the simulator already runs one thread per worker, and a
// threaded BLAS under them would oversubscribe the cores.
inline void single_threaded_blas() {
#if TRICKLE_SIM_HAVE_CBLAS && defined(OPENBLAS_VERSION)
    openblas_set_num_threads(1);
#endif
}

} // namespace trickle_sim
