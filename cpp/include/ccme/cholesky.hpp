// ccme/cholesky.hpp -- deterministic parallel tiled Cholesky with jitter.
//
// Algorithm: blocked right-looking Cholesky on kCholTile x kCholTile tiles of
// the lower triangle: serial Eigen LLT of the diagonal tile, parallel TRSM of
// the panel tiles below it, parallel (static schedule over the fixed list of
// (i, j) tiles) GEMM / SYRK update of the trailing lower triangle.  Each tile
// is always updated by the same sequence of fixed-size serial Eigen products,
// so the factor is bit-identical for every number of threads.
//
// Jitter rule: the factorisation of A + shift I is first tried with jitter 0.
// If a pivot is not positive, it is restarted from the original matrix with
// jitter = 1e-10 * mean(diag(A) + shift), then 1e-9, ..., up to 1e-4 times that
// mean (each step multiplying by 10).  If A + (shift + 1e-4 * mean) I still
// fails (or the mean is not positive), CholeskyError is thrown.  Only the
// lower triangle of A is read; the upper triangle of the factor is zero.
#pragma once

#include "ccme/errors.hpp"
#include "ccme/kernels.hpp"
#include "ccme/parallel.hpp"

#include <Eigen/Cholesky>
#include <cstdio>
#include <iterator>
#include <utility>

namespace ccme {

constexpr double kJitterFactors[] = {1e-10, 1e-9, 1e-8, 1e-7, 1e-6, 1e-5, 1e-4};

using StridedMap = Eigen::Map<MatrixRM, 0, Eigen::OuterStride<>>;

// In-place tiled Cholesky of the lower triangle of the n x n row-major
// matrix at a (leading dimension lda).  Returns -1 on success or the index
// of the first non-positive pivot.
inline Index tiled_cholesky_inplace(double* a, Index n, Index lda, int nt) {
    StridedMap A(a, n, n, Eigen::OuterStride<>(lda));
    const Index T = ceil_div(n, kCholTile);
    auto lo = [&](Index t) { return t * kCholTile; };
    auto sz = [&](Index t) { return std::min(n, (t + 1) * kCholTile) - t * kCholTile; };
    std::vector<std::pair<Index, Index>> pairs;
    for (Index k = 0; k < T; ++k) {
        const Index k0 = lo(k), kb = sz(k);
        {
            auto Akk = A.block(k0, k0, kb, kb);
            const Index info = Eigen::internal::llt_inplace<double, Eigen::Lower>::blocked(Akk);
            if (info >= 0) return k0 + info;
            for (Index i = 0; i < kb; ++i)
                if (!std::isfinite(Akk(i, i))) return k0 + i;
        }
        const Index rem = T - k - 1;
        if (rem == 0) break;
        // Panel: A_ik <- A_ik L_kk^{-T}
        parallel_for(rem, nt, [&](Index t) {
            const Index i = k + 1 + t;
            auto Lkk = A.block(k0, k0, kb, kb);
            auto Aik = A.block(lo(i), k0, sz(i), kb);
            Lkk.transpose().template triangularView<Eigen::Upper>().template solveInPlace<Eigen::OnTheRight>(Aik);
        });
        // Trailing update of the lower tiles (i >= j > k).
        pairs.clear();
        for (Index i = k + 1; i < T; ++i)
            for (Index j = k + 1; j <= i; ++j) pairs.emplace_back(i, j);
        parallel_for(static_cast<Index>(pairs.size()), nt, [&](Index t) {
            const Index i = pairs[t].first, j = pairs[t].second;
            auto Aik = A.block(lo(i), k0, sz(i), kb);
            if (i == j) {
                auto Aii = A.block(lo(i), lo(i), sz(i), sz(i));
                Aii.template selfadjointView<Eigen::Lower>().rankUpdate(Aik, -1.0);
            } else {
                auto Ajk = A.block(lo(j), k0, sz(j), kb);
                auto Aij = A.block(lo(i), lo(j), sz(i), sz(j));
                Aij.noalias() -= Aik * Ajk.transpose();
            }
        });
    }
    return -1;
}

inline void zero_upper(MatrixRM& L, int nt) {
    const Index n = L.rows();
    parallel_for(ceil_div(n, kCholTile), nt, [&](Index t) {
        const Index i1 = std::min(n, (t + 1) * kCholTile);
        for (Index i = t * kCholTile; i < i1; ++i)
            for (Index j = i + 1; j < n; ++j) L(i, j) = 0.0;
    });
}

inline std::string fmt_double(double x) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.6g", x);
    return buf;
}

// fill(L) must write (at least the lower triangle of) the original matrix
// into L.  Returns the jitter used.
template <class Fill>
double factor_with_jitter(MatrixRM& L, Fill&& fill, double shift, int nt, const std::string& ctx) {
    const Index n = L.rows();
    if (n == 0) return 0.0;
    fill(L);
    double mean_diag = 0.0;
    for (Index i = 0; i < n; ++i) mean_diag += L(i, i);
    mean_diag = mean_diag / static_cast<double>(n) + shift;
    const bool can_jitter = std::isfinite(mean_diag) && mean_diag > 0.0;
    const int n_tries = can_jitter ? 1 + static_cast<int>(std::size(kJitterFactors)) : 1;
    Index pivot = -1;
    for (int t = 0; t < n_tries; ++t) {
        const double jitter = t == 0 ? 0.0 : kJitterFactors[t - 1] * mean_diag;
        if (t > 0) fill(L);
        const double add = shift + jitter;
        for (Index i = 0; i < n; ++i) L(i, i) += add;
        pivot = tiled_cholesky_inplace(L.data(), n, n, nt);
        if (pivot < 0) {
            zero_upper(L, nt);
            return jitter;
        }
    }
    std::string msg = ctx + ": the matrix (n = " + std::to_string(n) + ", shift = " +
                      fmt_double(shift) + ") is not positive definite: pivot " +
                      std::to_string(pivot) + " is not positive";
    if (can_jitter)
        msg += " even with jitter 1e-10..1e-4 times mean(diag + shift) = " + fmt_double(mean_diag) +
               " (largest jitter tried " + fmt_double(1e-4 * mean_diag) + ")";
    else
        msg += "; mean(diag + shift) = " + fmt_double(mean_diag) +
               " is not positive, so no jitter was tried";
    throw CholeskyError(msg);
}

inline void check_square(const CRef& A, const std::string& ctx, const std::string& name) {
    if (A.rows() != A.cols())
        throw ShapeError(ctx + ": " + name + " must be square, got shape " +
                                    shape_str(A.rows(), A.cols()));
}

// Lower Cholesky factor of A + (shift + jitter) I.
inline std::pair<MatrixRM, double> cholesky(const CRef& A, double shift, int n_threads) {
    const std::string ctx = "cholesky";
    check_square(A, ctx, "A");
    if (!std::isfinite(shift)) throw std::invalid_argument(ctx + ": shift must be finite");
    const int nt = resolve_threads(n_threads);
    const Index n = A.rows();
    MatrixRM L(n, n);
    auto fill = [&](MatrixRM& M) {
        parallel_for(ceil_div(n, kCholTile), nt, [&](Index t) {
            const Index i1 = std::min(n, (t + 1) * kCholTile);
            for (Index i = t * kCholTile; i < i1; ++i)
                for (Index j = 0; j <= i; ++j) M(i, j) = A(i, j);
        });
    };
    double jitter = factor_with_jitter(L, fill, shift, nt, ctx);
    return {std::move(L), jitter};
}

// Cholesky factor of gram(X, X) + (shift + jitter) I, the Gram matrix being
// written straight into the output (lower tiles only).
inline std::pair<MatrixRM, double> kernel_ridge_factor(const CRef& X, const std::string& kernel,
                                                       const CVRef& bandwidth, double shift,
                                                       int n_threads) {
    const std::string ctx = "kernel_ridge_factor";
    if (!std::isfinite(shift)) throw std::invalid_argument(ctx + ": shift must be finite");
    const int nt = resolve_threads(n_threads);
    KernelSpec ks = make_kernel(kernel, bandwidth, X.cols(), false, ctx);
    Prescaled px = prescale(X, ks, true, true);
    const Index n = X.rows(), T = ceil_div(n, kCholTile);
    std::vector<std::pair<Index, Index>> pairs;
    for (Index i = 0; i < T; ++i)
        for (Index j = 0; j <= i; ++j) pairs.emplace_back(i, j);
    MatrixRM L(n, n);
    auto fill = [&](MatrixRM& M) {
        parallel_for(static_cast<Index>(pairs.size()), nt, [&](Index t) {
            const Index i0 = pairs[t].first * kCholTile, j0 = pairs[t].second * kCholTile;
            const Index i1 = std::min(n, i0 + kCholTile), j1 = std::min(n, j0 + kCholTile);
            kernel_block(ks, px, i0, i1, px, j0, j1, M.data() + i0 * n + j0, n);
        });
    };
    double jitter = factor_with_jitter(L, fill, shift, nt, ctx);
    return {std::move(L), jitter};
}

// Serial solve of L L^T X = X in place for one block of columns: tiled
// forward and backward substitution whose bulk is GEMM (tiles of kCholTile
// rows), with small triangular solves on the diagonal tiles.
template <class XB>
void chol_solve_block(const CRef& L, XB&& X) {
    const Index n = L.rows(), T = kCholTile;
    for (Index i0 = 0; i0 < n; i0 += T) {
        const Index ib = std::min(T, n - i0);
        auto Xi = X.middleRows(i0, ib);
        if (i0 > 0) Xi.noalias() -= L.block(i0, 0, ib, i0) * X.topRows(i0);
        L.block(i0, i0, ib, ib).template triangularView<Eigen::Lower>().solveInPlace(Xi);
    }
    for (Index i0 = ((n - 1) / T) * T; i0 >= 0; i0 -= T) {
        const Index ib = std::min(T, n - i0), r0 = i0 + ib;
        auto Xi = X.middleRows(i0, ib);
        if (r0 < n) Xi.noalias() -= L.block(r0, i0, n - r0, ib).transpose() * X.bottomRows(n - r0);
        L.block(i0, i0, ib, ib).transpose().template triangularView<Eigen::Upper>().solveInPlace(Xi);
    }
}

// Solve L L^T X = X in place (L lower triangular), in parallel over fixed
// column chunks of X.  A few columns are one serial chunk: splitting their
// substitution by rows was measured 1.5x faster on an idle machine but 3-4x
// slower on a loaded one (a barrier per tile waits for descheduled threads).
template <class XType>
void chol_solve_inplace(const CRef& L, XType& X, int nt) {
    const Index q = X.cols();
    if (L.rows() == 0 || q == 0) return;
    parallel_for(ceil_div(q, kSolveChunk), nt, [&](Index c) {
        const Index c0 = c * kSolveChunk, w = std::min(q, c0 + kSolveChunk) - c0;
        chol_solve_block(L, X.middleCols(c0, w));
    });
}

inline MatrixRM cholesky_solve(const CRef& L, const CRef& B, int n_threads) {
    const std::string ctx = "cholesky_solve";
    check_square(L, ctx, "L");
    if (B.rows() != L.rows())
        throw ShapeError(ctx + ": B has " + std::to_string(B.rows()) +
                                    " rows but L has shape " + shape_str(L.rows(), L.cols()));
    const int nt = resolve_threads(n_threads);
    MatrixRM X = B;
    chol_solve_inplace(L, X, nt);
    return X;
}

}  // namespace ccme
