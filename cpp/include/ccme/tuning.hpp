// ccme/tuning.hpp -- leave-one-out and GCV criteria of RKHS-valued kernel ridge
// regression along a whole path of penalties (no Python, no pybind11).
//
// The ridge CCME regresses RKHS-valued targets (phi(Y) in stage 1, the
// pseudo-outcomes in stage 2) on inputs with a kernel K.  Its hat matrix is
// H = K (K + n lam I)^{-1}; for a linear smoother the leave-one-out residual of
// unit i is r_i / (1 - H_ii) with r = (I - H) Z, whatever the dimension of the
// targets, so
//
//   LOO(lam) = 1/n sum_i ||r_i||^2 / (1 - H_ii)^2,
//   GCV(lam) = 1/n sum_i ||r_i||^2 / (1 - tr(H)/n)^2,
//
// where the targets enter through feature coordinates Z (n x q) whose inner
// products are the RKHS inner products (Z Z^T = the targets' Gram matrix).
//
// To make a whole path cheap the input kernel is factored once, K ~ L L^T,
// by a pivoted (incomplete) Cholesky factorisation that stops when the largest
// residual diagonal falls below a tolerance (exact when it runs to full rank).
// With the thin SVD L = Q S W^T (computed by the caller from the small r x r
// matrix L^T L), H = Q diag(s^2 / (s^2 + n lam)) Q^T, so each penalty costs
// O(n r q) after an O(n r^2) factorisation.
#pragma once

#include "ccme/kernels.hpp"
#include "ccme/parallel.hpp"

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

namespace ccme {

using MatrixCM = Eigen::MatrixXd;

struct PivotedCholesky {
    MatrixRM L;                        // n x r, K ~ L L^T
    std::vector<std::int64_t> pivots;  // the rows chosen, in order
    double residual = 0.0;             // largest residual diagonal at the stop
};

// Block-greedy pivoted Cholesky of k(X, X).  Pivots are taken in panels of
// kPivotPanel candidates: the rows with the largest residual diagonals when the
// panel starts (ties: the smaller index first).  Their residual kernel columns
// are formed with one matrix product against the columns found so far, and
// within the panel each candidate in turn (the largest residual first) is
// accepted if its residual is still > tol, and then removed from the others.
// The whole factorisation stops when the largest residual diagonal is <= tol
// (never below n * machine epsilon, the round-off level) or after max_rank
// columns; run to that floor it is exact up to round-off.  Panels turn the
// memory-bound column-by-column updates of textbook pivoting into products.
constexpr Index kPivotPanel = 64;

inline PivotedCholesky pivoted_cholesky(const CRef& X, const std::string& kernel,
                                        const CVRef& bandwidth, double tol, Index max_rank,
                                        int n_threads) {
    const std::string ctx = "pivoted_cholesky";
    if (!(tol >= 0.0)) throw std::invalid_argument(ctx + ": tol must be >= 0");
    if (max_rank < 1) throw std::invalid_argument(ctx + ": max_rank must be >= 1");
    const int nt = resolve_threads(n_threads);
    const Index n = X.rows();
    // Residual diagonals below n * eps are round-off: pivoting on them would
    // divide noise by its square root.
    tol = std::max(tol, static_cast<double>(n) * std::numeric_limits<double>::epsilon());
    KernelSpec ks = make_kernel(kernel, bandwidth, X.cols(), false, ctx);
    Prescaled p = prescale(X, ks, true, true);
    const Index rmax = std::min(max_rank, n);
    MatrixCM L(n, rmax);
    Eigen::VectorXd diag = Eigen::VectorXd::Ones(n);  // k(x, x) = 1 for every kernel here
    std::vector<std::int64_t> pivots;
    constexpr Index kRows = 512;  // fixed row blocks
    const Index nblocks = ceil_div(n, kRows);
    std::vector<Index> order(n);
    Index r = 0;
    while (r < rmax) {
        // Candidates: the panel's largest residual diagonals above tol.
        for (Index i = 0; i < n; ++i) order[i] = i;
        const Index want = std::min(kPivotPanel, rmax - r);
        std::partial_sort(order.begin(), order.begin() + std::min(want, n), order.end(),
                          [&](Index u, Index v) {
                              return diag[u] > diag[v] || (diag[u] == diag[v] && u < v);
                          });
        std::vector<Index> cand;
        for (Index t = 0; t < want; ++t)
            if (diag[order[t]] > tol) cand.push_back(order[t]);
        if (cand.empty()) break;
        const Index b = static_cast<Index>(cand.size());
        // Residual columns G = k(X, X_cand) - L[:, :r] L[cand, :r]^T  (n x b).
        MatrixRM Xc(b, X.cols());
        for (Index t = 0; t < b; ++t) Xc.row(t) = X.row(cand[t]);
        Prescaled pc = prescale(Xc, ks, true, false);
        MatrixCM Lc(b, r);
        for (Index t = 0; t < b; ++t) Lc.row(t) = L.row(cand[t]).head(r);
        MatrixCM G(n, b);
        parallel_for(nblocks, nt, [&](Index blk) {
            const Index i0 = blk * kRows, i1 = std::min(n, i0 + kRows);
            MatrixRM Kt(b, i1 - i0);
            kernel_block(ks, pc, 0, b, p, i0, i1, Kt.data(), i1 - i0);
            G.middleRows(i0, i1 - i0) = Kt.transpose();
            if (r > 0)
                G.middleRows(i0, i1 - i0).noalias() -= L.block(i0, 0, i1 - i0, r) * Lc.transpose();
        });
        // Sequential pivoting inside the panel.
        std::vector<char> used(b, 0);
        Eigen::VectorXd dc(b);
        for (Index t = 0; t < b; ++t) dc[t] = diag[cand[t]];
        for (Index step = 0; step < b && r < rmax; ++step) {
            Index best = -1;
            for (Index t = 0; t < b; ++t)
                if (!used[t] && (best < 0 || dc[t] > dc[best])) best = t;
            if (best < 0 || !(dc[best] > tol)) break;
            used[best] = 1;
            const double inv_sqrt = 1.0 / std::sqrt(dc[best]);
            L.col(r) = G.col(best) * inv_sqrt;
            const Index piv = cand[best];
            pivots.push_back(piv);
            // Remove the new column from the panel's other columns and the diagonal.
            for (Index t = 0; t < b; ++t) {
                if (used[t]) continue;
                const double c = L(cand[t], r);
                G.col(t) -= c * L.col(r);
                dc[t] -= c * c;
            }
            diag.array() -= L.col(r).array().square();
            diag[piv] = 0.0;  // exactly interpolated
            ++r;
        }
    }
    PivotedCholesky out;
    out.L = L.leftCols(r);
    out.pivots = std::move(pivots);
    out.residual = r < n ? std::max(0.0, diag.maxCoeff()) : 0.0;
    return out;
}

struct LooPath {
    Eigen::VectorXd loo, gcv, dof;  // per penalty; dof = tr(H)
};

// LOO and GCV of the ridge regression of targets Z (n x q) on a kernel whose
// (truncated) eigendecomposition is K ~ Q diag(s2) Q^T, Q (n x k) with
// orthonormal columns (e.g. from the thin SVD of a pivoted Cholesky factor),
// along the penalties lambdas (paper convention K + n lam I, n = rows of Q).
// H = Q diag(s2 / (s2 + n lam)) Q^T; each penalty costs O(n k q).
inline LooPath krr_loo_path(const CRef& Q, const CVRef& s2, const CRef& Z, const CVRef& lambdas,
                            int n_threads) {
    const std::string ctx = "krr_loo_path";
    const Index n = Q.rows(), k = Q.cols(), q = Z.cols();
    if (Z.rows() != n)
        throw ShapeError(ctx + ": Z has " + std::to_string(Z.rows()) +
                                    " rows but Q has " + std::to_string(n));
    if (s2.size() != k)
        throw ShapeError(ctx + ": s2 has length " + std::to_string(s2.size()) +
                                    " but Q has " + std::to_string(k) + " columns");
    for (Index a = 0; a < k; ++a)
        if (!(s2[a] >= 0.0)) throw std::invalid_argument(ctx + ": s2 must be >= 0");
    for (Index l = 0; l < lambdas.size(); ++l)
        if (!(lambdas[l] > 0.0) || !std::isfinite(lambdas[l]))
            throw std::invalid_argument(ctx + ": penalties must be positive and finite");
    const int nt = resolve_threads(n_threads);
    constexpr Index kRows = 512;  // fixed row blocks
    const Index nblocks = ceil_div(n, kRows);
    // P = Q^T Z (k x q), summed over the row blocks in a fixed order.
    MatrixRM P = MatrixRM::Zero(k, q);
    {
        std::vector<MatrixRM> partial(nblocks);
        parallel_for(nblocks, nt, [&](Index b) {
            const Index i0 = b * kRows, i1 = std::min(n, i0 + kRows);
            partial[b].noalias() = Q.middleRows(i0, i1 - i0).transpose() * Z.middleRows(i0, i1 - i0);
        });
        for (Index b = 0; b < nblocks; ++b) P += partial[b];
    }
    LooPath out;
    const Index nl = lambdas.size();
    out.loo.resize(nl);
    out.gcv.resize(nl);
    out.dof.resize(nl);
    std::vector<double> sq(n), h(n);
    for (Index l = 0; l < nl; ++l) {
        const double nlam = static_cast<double>(n) * lambdas[l];
        const Eigen::VectorXd d = (s2.array() / (s2.array() + nlam)).matrix();
        const MatrixRM DP = d.asDiagonal() * P;
        parallel_for(nblocks, nt, [&](Index b) {
            const Index i0 = b * kRows, i1 = std::min(n, i0 + kRows);
            const auto Qb = Q.middleRows(i0, i1 - i0);
            MatrixRM R = Z.middleRows(i0, i1 - i0);
            R.noalias() -= Qb * DP;
            for (Index i = 0; i < i1 - i0; ++i) {
                sq[i0 + i] = R.row(i).squaredNorm();
                h[i0 + i] = Qb.row(i).array().square().matrix().dot(d);
            }
        });
        const double dof = d.sum();
        double loo = 0.0, rss = 0.0;
        for (Index i = 0; i < n; ++i) {  // serial sums in a fixed order
            const double one_minus = 1.0 - h[i];
            loo += sq[i] / (one_minus * one_minus);
            rss += sq[i];
        }
        const double denom = 1.0 - dof / static_cast<double>(n);
        out.loo[l] = loo / static_cast<double>(n);
        out.gcv[l] = rss / static_cast<double>(n) / (denom * denom);
        out.dof[l] = dof;
    }
    return out;
}

}  // namespace ccme
