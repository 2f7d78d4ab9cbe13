// ccme/ridge.hpp -- evaluation of a fitted ridge CCME (one fold, one arm).
//
// result[e, j] = sum_i beta_i(v_e) (a_i F1[i, j] + b_i G[i, j]),
//   beta(v) = (L_V L_V^T)^{-1} k_V(V1, v),
//   F1 = features(Y1, points), F0 = features(Y0, points),
//   G  = K_X0X1^T (L_X0 L_X0^T)^{-1} F0,  K_X0X1 = k_X(X0, X1).
// This is the paper's density formula (eq. emp_density),
//   [k_Y1(y)^T D_a + k_Y0(y)^T (K_X0 + m l0 I)^{-1} K_X0X1 D_b] (K_V + n l1 I)^{-1} k_V(v),
// with the ridge shifts already folded into the factors L_V and L_X0.
//
// Two association orders, both computed block by block (no n x ne, n x q or
// m x n matrix is ever held beyond one block of at most kBlockDoubles):
//   y-side: per block of points, H = (L_V L_V^T)^{-1} (a o F1 + b o G), then
//           out[e, :] += scale * k_V(V_eval_e, V1) H for tiles of V_eval;
//   v-side: per block of V_eval, the weights c1 = a o beta and
//           c0 = (L_X0 L_X0^T)^{-1} K_X0X1 (b o beta), then
//           out += scale * (c1^T F1 + c0^T F0) for tiles of points.
// "auto" picks the order with the smaller flop-count estimate.
#pragma once

#include "ccme/cholesky.hpp"
#include "ccme/kernels.hpp"
#include "ccme/parallel.hpp"

namespace ccme {

struct RidgeProblem {
    Index n = 0, m = 0, ne = 0;
    bool use_a = false, use_b = false;
    CRef L_V;
    CRef L_X0;
    Eigen::VectorXd a, b;
    KernelSpec kv, kx;
    Prescaled V1, Ve, X0, X1;

    RidgeProblem(const CRef& L_V_, const CRef& L_X0_) : L_V(L_V_), L_X0(L_X0_) {}
};

inline std::string rows_msg(const std::string& ctx, const std::string& name, Index got,
                            const std::string& ref, Index want) {
    return ctx + ": " + name + " has " + std::to_string(got) + " rows but " + ref + " has " +
           std::to_string(want);
}

inline RidgeProblem make_ridge_problem(const std::string& ctx, const CRef& L_V, const CRef& V1,
                                       const std::string& v_kernel, const CVRef& v_bandwidth,
                                       const CVRef& a, const CVRef& b, const CRef& X1,
                                       const CRef& L_X0, const CRef& X0,
                                       const std::string& x_kernel, const CVRef& x_bandwidth,
                                       const CRef& V_eval) {
    RidgeProblem P(L_V, L_X0);
    check_square(L_V, ctx, "L_V");
    const Index n = L_V.rows();
    P.n = n;
    if (V1.rows() != n) throw std::invalid_argument(rows_msg(ctx, "V1", V1.rows(), "L_V", n));
    if (V_eval.cols() != V1.cols())
        throw std::invalid_argument(ctx + ": V_eval has " + std::to_string(V_eval.cols()) +
                                    " columns but V1 has " + std::to_string(V1.cols()));
    if (a.size() != n)
        throw std::invalid_argument(ctx + ": a has length " + std::to_string(a.size()) +
                                    " but L_V has shape " + shape_str(n, n));
    if (b.size() != n)
        throw std::invalid_argument(ctx + ": b has length " + std::to_string(b.size()) +
                                    " but L_V has shape " + shape_str(n, n));
    P.kv = make_kernel(v_kernel, v_bandwidth, V1.cols(), false, ctx, "v_bandwidth");
    P.a = a;
    P.b = b;
    P.use_a = (a.array() != 0.0).any();
    P.ne = V_eval.rows();
    P.V1 = prescale(V1, P.kv);
    P.Ve = prescale(V_eval, P.kv);
    const Index m = L_X0.rows();
    P.use_b = m > 0 && (b.array() != 0.0).any();
    if (P.use_b) {
        check_square(L_X0, ctx, "L_X0");
        P.m = m;
        if (X0.rows() != m) throw std::invalid_argument(rows_msg(ctx, "X0", X0.rows(), "L_X0", m));
        if (X1.rows() != n) throw std::invalid_argument(rows_msg(ctx, "X1", X1.rows(), "L_V", n));
        if (X1.cols() != X0.cols())
            throw std::invalid_argument(ctx + ": X1 has " + std::to_string(X1.cols()) +
                                        " columns but X0 has " + std::to_string(X0.cols()));
        P.kx = make_kernel(x_kernel, x_bandwidth, X0.cols(), false, ctx, "x_bandwidth");
        P.X0 = prescale(X0, P.kx);
        P.X1 = prescale(X1, P.kx);
    } else {
        parse_kernel(x_kernel, ctx);  // still reject unknown names
    }
    return P;
}

// Width of the blocks of a dimension of size total when the other side has
// `rows` rows: at most kBlockDoubles / rows, balanced, multiple of kSolveChunk.
inline Index block_width(Index total, Index rows) {
    if (total <= 0) return 1;
    const Index wmax = std::max(kSolveChunk, kBlockDoubles / std::max<Index>(rows, 1));
    const Index nblk = ceil_div(total, wmax);
    const Index w = ceil_div(ceil_div(total, nblk), kSolveChunk) * kSolveChunk;
    return std::min(total, w);
}

// Weights for V_eval rows [e0, e1): beta (n x w) scaled by a into c1 when
// use_a, and c0 (m x w) when use_b.
inline void weights_block(const RidgeProblem& P, Index e0, Index e1, MatrixRM& c1, MatrixRM& c0,
                          int nt) {
    const Index n = P.n, m = P.m, w = e1 - e0;
    c1.resize(n, w);
    parallel_for(ceil_div(n, kRowTile), nt, [&](Index t) {
        const Index i0 = t * kRowTile, i1 = std::min(n, i0 + kRowTile);
        kernel_block(P.kv, P.V1, i0, i1, P.Ve, e0, e1, c1.data() + i0 * w, w);
    });
    chol_solve_inplace(P.L_V, c1, nt);  // beta
    if (P.use_b) {
        MatrixRM tb = P.b.asDiagonal() * c1;
        c0.resize(m, w);
        parallel_for(ceil_div(m, kRowTile), nt, [&](Index t) {
            const Index l0 = t * kRowTile, l1 = std::min(m, l0 + kRowTile);
            MatrixRM K(l1 - l0, n);
            kernel_block(P.kx, P.X0, l0, l1, P.X1, 0, n, K.data(), n);
            c0.middleRows(l0, l1 - l0).noalias() = K * tb;
        });
        chol_solve_inplace(P.L_X0, c0, nt);
    } else {
        c0.resize(0, w);
    }
    if (P.use_a) c1 = P.a.asDiagonal() * c1;
    else c1.resize(0, w);
}

struct RidgeCost {
    double y_side, v_side;
};

inline RidgeCost ridge_cost(const RidgeProblem& P, const FeatureMap& fm) {
    const double n = double(P.n), m = double(P.m), ne = double(P.ne), qo = double(fm.n_out());
    const double kv = P.kv.dp() + 25.0, kx = P.kx.dp() + 25.0, cf = fm.dy + 25.0;
    const double na = P.use_a ? n : 0.0, mb = P.use_b ? m : 0.0;
    const double nbq = double(ceil_div(fm.n_out(), block_width(fm.n_out(), std::max(P.n, P.m))));
    const double nbe = double(ceil_div(P.ne, block_width(P.ne, std::max(P.n, P.m))));
    RidgeCost c;
    c.y_side = (na + mb) * qo * cf + 2.0 * n * n * qo + nbq * ne * n * kv + 2.0 * ne * n * qo;
    if (P.use_b) c.y_side += 2.0 * m * m * qo + nbq * n * m * kx + 2.0 * n * m * qo;
    c.v_side = ne * n * kv + 2.0 * n * n * ne + nbe * (na + mb) * qo * cf + 2.0 * (na + mb) * ne * qo;
    if (P.use_b) c.v_side += nbe * m * n * kx + 2.0 * m * n * ne + 2.0 * m * m * ne;
    return c;
}

inline void ridge_contract_y(const RidgeProblem& P, const FeatureMap& fm, const Prescaled& A1,
                             const Prescaled& A0, MRef out, double scale, int nt) {
    const Index n = P.n, m = P.m, ne = P.ne, qo = fm.n_out();
    const Index Bq = block_width(qo, std::max(n, m));
    for (Index j0 = 0; j0 < qo; j0 += Bq) {
        const Index j1 = std::min(qo, j0 + Bq), w = j1 - j0;
        MatrixRM R(n, w);
        if (P.use_a) {
            parallel_for(ceil_div(n, kRowTile), nt, [&](Index t) {
                const Index i0 = t * kRowTile, i1 = std::min(n, i0 + kRowTile);
                fm.fill(A1, i0, i1, j0, j1, R.data() + i0 * w, w);
                for (Index i = i0; i < i1; ++i) R.row(i) *= P.a[i];
            });
        } else {
            R.setZero();
        }
        if (P.use_b) {
            MatrixRM W(m, w);
            parallel_for(ceil_div(m, kRowTile), nt, [&](Index t) {
                const Index i0 = t * kRowTile, i1 = std::min(m, i0 + kRowTile);
                fm.fill(A0, i0, i1, j0, j1, W.data() + i0 * w, w);
            });
            chol_solve_inplace(P.L_X0, W, nt);
            parallel_for(ceil_div(n, kRowTile), nt, [&](Index t) {
                const Index i0 = t * kRowTile, i1 = std::min(n, i0 + kRowTile);
                MatrixRM K(i1 - i0, m);
                kernel_block(P.kx, P.X1, i0, i1, P.X0, 0, m, K.data(), m);
                MatrixRM G = K * W;
                for (Index i = i0; i < i1; ++i) R.row(i) += P.b[i] * G.row(i - i0);
            });
        }
        chol_solve_inplace(P.L_V, R, nt);  // H
        parallel_for(ceil_div(ne, kRowTile), nt, [&](Index t) {
            const Index e0 = t * kRowTile, e1 = std::min(ne, e0 + kRowTile);
            MatrixRM K(e1 - e0, n);
            kernel_block(P.kv, P.Ve, e0, e1, P.V1, 0, n, K.data(), n);
            out.block(e0, j0, e1 - e0, w).noalias() += scale * (K * R);
        });
    }
}

inline void ridge_contract_v(const RidgeProblem& P, const FeatureMap& fm, const Prescaled& A1,
                             const Prescaled& A0, MRef out, double scale, int nt) {
    const Index n = P.n, m = P.m, ne = P.ne, qo = fm.n_out();
    const Index Be = block_width(ne, std::max(n, m));
    MatrixRM c1, c0;
    for (Index e0 = 0; e0 < ne; e0 += Be) {
        const Index e1 = std::min(ne, e0 + Be), w = e1 - e0;
        weights_block(P, e0, e1, c1, c0, nt);
        parallel_for(ceil_div(qo, kRowTile), nt, [&](Index t) {
            const Index j0 = t * kRowTile, j1 = std::min(qo, j0 + kRowTile), wq = j1 - j0;
            auto o = out.block(e0, j0, w, wq);
            if (P.use_a) {
                MatrixRM F(n, wq);
                fm.fill(A1, 0, n, j0, j1, F.data(), wq);
                o.noalias() += scale * (c1.transpose() * F);
            }
            if (P.use_b) {
                MatrixRM F(m, wq);
                fm.fill(A0, 0, m, j0, j1, F.data(), wq);
                o.noalias() += scale * (c0.transpose() * F);
            }
        });
    }
}

// out (ne x q') += scale * result.  order: "auto", "y" or "v".
inline void ridge_contract(const CRef& L_V, const CRef& V1, const std::string& v_kernel,
                           const CVRef& v_bandwidth, const CVRef& a, const CRef& Y1,
                           const CVRef& b, const CRef& X1, const CRef& L_X0, const CRef& X0,
                           const CRef& Y0, const std::string& x_kernel, const CVRef& x_bandwidth,
                           const CRef& V_eval, const CRef& points, const std::string& feature,
                           const std::string& y_kernel, const CVRef& y_bandwidth, MRef out,
                           double scale, int n_threads, const std::string& order) {
    const std::string ctx = "ridge_contract";
    if (order != "auto" && order != "y" && order != "v")
        throw std::invalid_argument(ctx + ": order must be 'auto', 'y' or 'v', got '" + order + "'");
    if (!std::isfinite(scale)) throw std::invalid_argument(ctx + ": scale must be finite");
    const int nt = resolve_threads(n_threads);
    RidgeProblem P = make_ridge_problem(ctx, L_V, V1, v_kernel, v_bandwidth, a, b, X1, L_X0, X0,
                                        x_kernel, x_bandwidth, V_eval);
    const Index dy = P.use_a ? Y1.cols() : (P.use_b ? Y0.cols() : Y1.cols());
    FeatureMap fm = make_feature_map(feature, y_kernel, y_bandwidth, points, dy, ctx,
                                     "y_bandwidth");
    if (P.use_a && Y1.rows() != P.n)
        throw std::invalid_argument(rows_msg(ctx, "Y1", Y1.rows(), "L_V", P.n));
    if (P.use_b) {
        if (Y0.rows() != P.m) throw std::invalid_argument(rows_msg(ctx, "Y0", Y0.rows(), "L_X0", P.m));
        if (Y0.cols() != fm.dy)
            throw std::invalid_argument(ctx + ": Y0 has " + std::to_string(Y0.cols()) +
                                        " columns but Y1 has " + std::to_string(fm.dy));
    }
    if (out.rows() != P.ne || out.cols() != fm.n_out())
        throw std::invalid_argument(ctx + ": out has shape " + shape_str(out.rows(), out.cols()) +
                                    " but (len(V_eval), n_features) = " +
                                    shape_str(P.ne, fm.n_out()));
    if ((!P.use_a && !P.use_b) || P.ne == 0 || fm.n_out() == 0 || scale == 0.0) return;
    Prescaled A1, A0;
    if (P.use_a) A1 = fm.prepare_atoms(Y1);
    if (P.use_b) A0 = fm.prepare_atoms(Y0);
    bool y_side;
    if (order == "auto") {
        RidgeCost c = ridge_cost(P, fm);
        y_side = c.y_side <= c.v_side;
    } else {
        y_side = order == "y";
    }
    if (y_side) ridge_contract_y(P, fm, A1, A0, out, scale, nt);
    else ridge_contract_v(P, fm, A1, A0, out, scale, nt);
}

// Embedding weights on the atoms: c1 = a o beta (n x ne), c0 (m x ne).
inline std::pair<MatrixRM, MatrixRM> ridge_weights(const CRef& L_V, const CRef& V1,
                                                   const std::string& v_kernel,
                                                   const CVRef& v_bandwidth, const CVRef& a,
                                                   const CVRef& b, const CRef& X1,
                                                   const CRef& L_X0, const CRef& X0,
                                                   const std::string& x_kernel,
                                                   const CVRef& x_bandwidth, const CRef& V_eval,
                                                   int n_threads) {
    const std::string ctx = "ridge_weights";
    const int nt = resolve_threads(n_threads);
    RidgeProblem P = make_ridge_problem(ctx, L_V, V1, v_kernel, v_bandwidth, a, b, X1, L_X0, X0,
                                        x_kernel, x_bandwidth, V_eval);
    const Index n = P.n, m_out = L_X0.rows(), ne = P.ne;
    MatrixRM C1 = MatrixRM::Zero(n, ne), C0 = MatrixRM::Zero(m_out, ne);
    if (!P.use_a && !P.use_b) return {std::move(C1), std::move(C0)};
    const Index Be = block_width(ne, std::max(P.n, P.m));
    MatrixRM c1, c0;
    for (Index e0 = 0; e0 < ne; e0 += Be) {
        const Index e1 = std::min(ne, e0 + Be);
        weights_block(P, e0, e1, c1, c0, nt);
        if (P.use_a) C1.middleCols(e0, e1 - e0) = c1;
        if (P.use_b) C0.middleCols(e0, e1 - e0) = c0;
    }
    return {std::move(C1), std::move(C0)};
}

}  // namespace ccme
