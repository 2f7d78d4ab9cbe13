// ccme/mmd.hpp -- kernel quadratic forms w_e^T K w_e for many weight vectors,
// without forming the N x N Gram matrix (no Python, no pybind11).
//
//   q[e] = sum_{k,l} W[k, e] W[l, e] k(Z_k, Z_l),   e = 0 .. ne-1.
//
// With Z the atoms of two embeddings stacked and W = [c1; -c0], q[e] is the
// squared RKHS distance ||mu_1(v_e) - mu_0(v_e)||^2 =
//   c1^T K11 c1 - 2 c1^T K10 c0 + c0^T K00 c0
// (the maximum mean discrepancy between the two embeddings).
//
// Work decomposition (fixed by the problem sizes only, never by the thread
// count, so results are bit-identical for any number of threads):
//   - the atoms are cut into tiles of kMmdTile rows; the work items are the
//     pairs of tiles (I, J) with I <= J of the lower triangle (K is symmetric,
//     so an off-diagonal pair counts twice);
//   - the columns of W are processed in blocks of width w chosen from N and
//     ne (at most kBlockDoubles partial sums held at once);
//   - item (I, J) computes the kernel tile K_IJ, T = K_IJ W_J and writes
//     p[e] = sum_i W_I[i, e] T[i, e] into its own row of a partial-sum matrix;
//   - the rows of that matrix are then summed in pair order, serially per
//     column.
// Memory: one kernel tile and one tile x w product per thread, plus the
// (number of pairs) x w partial sums.
#pragma once

#include "ccme/kernels.hpp"
#include "ccme/parallel.hpp"

namespace ccme {

constexpr Index kMmdTile = 256;  // atoms per tile of the (never formed) Gram matrix

inline Eigen::VectorXd kernel_quadratic_forms(const CRef& Z, const CRef& W,
                                              const std::string& kernel,
                                              const CVRef& bandwidth, bool normalized,
                                              int n_threads) {
    const std::string ctx = "kernel_quadratic_forms";
    const Index N = Z.rows(), ne = W.cols();
    if (W.rows() != N)
        throw ShapeError(ctx + ": W has " + std::to_string(W.rows()) +
                                    " rows but Z has " + std::to_string(N) + " (one weight per atom)");
    const int nt = resolve_threads(n_threads);
    KernelSpec ks = make_kernel(kernel, bandwidth, Z.cols(), normalized, ctx);
    Eigen::VectorXd q = Eigen::VectorXd::Zero(ne);
    if (N == 0 || ne == 0) return q;
    Prescaled pz = prescale(Z, ks, true, true);

    const Index nt_tiles = ceil_div(N, kMmdTile);
    std::vector<std::pair<Index, Index>> pairs;
    pairs.reserve(static_cast<size_t>(nt_tiles * (nt_tiles + 1) / 2));
    for (Index I = 0; I < nt_tiles; ++I)
        for (Index J = I; J < nt_tiles; ++J) pairs.emplace_back(I, J);
    const Index np = static_cast<Index>(pairs.size());
    // Column block width: all columns if the partial sums fit, else a fixed
    // width determined by N alone.
    const Index w = std::max<Index>(1, std::min<Index>(ne, kBlockDoubles / std::max<Index>(np, 1)));
    MatrixRM partial(np, w);

    for (Index c0 = 0; c0 < ne; c0 += w) {
        const Index wc = std::min(w, ne - c0);
        parallel_for(np, nt, [&](Index t) {
            const Index I = pairs[static_cast<size_t>(t)].first;
            const Index J = pairs[static_cast<size_t>(t)].second;
            const Index i0 = I * kMmdTile, i1 = std::min(N, i0 + kMmdTile);
            const Index j0 = J * kMmdTile, j1 = std::min(N, j0 + kMmdTile);
            MatrixRM K(i1 - i0, j1 - j0);
            kernel_block(ks, pz, i0, i1, pz, j0, j1, K.data(), j1 - j0);
            MatrixRM T = K * W.block(j0, c0, j1 - j0, wc);
            const double factor = (I == J) ? 1.0 : 2.0;
            auto Wi = W.block(i0, c0, i1 - i0, wc);
            for (Index e = 0; e < wc; ++e) {
                double s = 0.0;
                for (Index i = 0; i < i1 - i0; ++i) s += Wi(i, e) * T(i, e);
                partial(t, e) = factor * s;
            }
        });
        // Fixed-order reduction over the pairs, one column at a time.
        parallel_for(wc, nt, [&](Index e) {
            double s = 0.0;
            for (Index t = 0; t < np; ++t) s += partial(t, e);
            q[c0 + e] = s;
        });
    }
    return q;
}

}  // namespace ccme
