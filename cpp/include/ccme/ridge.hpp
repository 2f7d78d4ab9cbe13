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
//
// A RidgeArm is one fitted fold-arm set up once: its inputs are checked and
// V1, X1, X0 pre-scaled by their bandwidths when it is made, so that each
// evaluation only pre-scales its own V_eval and points.  It is immutable after
// construction, so concurrent evaluations (GIL released) are safe.
#pragma once

#include "ccme/cholesky.hpp"
#include "ccme/kernels.hpp"
#include "ccme/parallel.hpp"

namespace ccme {

inline std::string rows_msg(const std::string& ctx, const std::string& name, Index got,
                            const std::string& ref, Index want) {
    return ctx + ": " + name + " has " + std::to_string(got) + " rows but " + ref + " has " +
           std::to_string(want);
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

struct RidgeCost {
    double y_side, v_side;
};

class RidgeArm {
   public:
    // The factors are referenced, not copied (an n x n factor can be most of
    // the memory a fit holds, and one L_V serves both arms of a fold): L_V and
    // L_X0 must refer to memory that outlives the object (a matrix or numpy
    // buffer, never a temporary).  Everything else is copied.  b all zero or
    // L_X0 with no rows skips the first stage (X1, X0, Y0 may then be empty);
    // a all zero skips the direct term (Y1 may then have no rows).  Y1 and Y0
    // are needed by contract() only: a weights-only arm may pass them with no
    // columns.
    RidgeArm(const CRef& L_V, const CRef& V1, const std::string& v_kernel,
             const CVRef& v_bandwidth, const CVRef& a, const CRef& Y1, const CVRef& b,
             const CRef& X1, const CRef& L_X0, const CRef& X0, const CRef& Y0,
             const std::string& x_kernel, const CVRef& x_bandwidth,
             const std::string& ctx = "RidgeArm")
        : L_V_(view(L_V)), L_X0_(view(L_X0)) {
        check_square(L_V, ctx, "L_V");
        const Index n = L_V.rows();
        n_ = n;
        if (V1.rows() != n) throw ShapeError(rows_msg(ctx, "V1", V1.rows(), "L_V", n));
        if (a.size() != n)
            throw ShapeError(ctx + ": a has length " + std::to_string(a.size()) +
                             " but L_V has shape " + shape_str(n, n));
        if (b.size() != n)
            throw ShapeError(ctx + ": b has length " + std::to_string(b.size()) +
                             " but L_V has shape " + shape_str(n, n));
        kv_ = make_kernel(v_kernel, v_bandwidth, V1.cols(), false, ctx, "v_bandwidth");
        a_ = a;
        b_ = b;
        use_a_ = (a.array() != 0.0).any();
        V1_ = prescale(V1, kv_);
        m_out_ = L_X0.rows();
        use_b_ = m_out_ > 0 && (b.array() != 0.0).any();
        if (use_b_) {
            check_square(L_X0, ctx, "L_X0");
            const Index m = m_out_;
            m_ = m;
            if (X0.rows() != m) throw ShapeError(rows_msg(ctx, "X0", X0.rows(), "L_X0", m));
            if (X1.rows() != n) throw ShapeError(rows_msg(ctx, "X1", X1.rows(), "L_V", n));
            if (X1.cols() != X0.cols())
                throw ShapeError(ctx + ": X1 has " + std::to_string(X1.cols()) +
                                 " columns but X0 has " + std::to_string(X0.cols()));
            kx_ = make_kernel(x_kernel, x_bandwidth, X0.cols(), false, ctx, "x_bandwidth");
            X0_ = prescale(X0, kx_);
            X1_ = prescale(X1, kx_);
        } else {
            parse_kernel(x_kernel, ctx);  // still reject unknown names
        }
        // The outcomes' dimension comes from the atoms that are used.
        dy_ = use_a_ ? Y1.cols() : (use_b_ ? Y0.cols() : Y1.cols());
        if (use_a_ && Y1.rows() != n) throw ShapeError(rows_msg(ctx, "Y1", Y1.rows(), "L_V", n));
        if (use_b_) {
            if (Y0.rows() != m_) throw ShapeError(rows_msg(ctx, "Y0", Y0.rows(), "L_X0", m_));
            if (Y0.cols() != dy_)
                throw ShapeError(ctx + ": Y0 has " + std::to_string(Y0.cols()) +
                                 " columns but Y1 has " + std::to_string(dy_));
        }
        Y1_ = use_a_ ? MatrixRM(Y1) : MatrixRM(0, dy_);
        Y0_ = use_b_ ? MatrixRM(Y0) : MatrixRM(0, dy_);
    }

    Index n() const { return n_; }          // second-stage units
    Index m() const { return m_out_; }      // first-stage units (rows of L_X0)
    Index dv() const { return kv_.d; }
    Index dy() const { return dy_; }
    bool uses_a() const { return use_a_; }  // the direct term a o phi(Y1) is present
    bool uses_b() const { return use_b_; }  // the first-stage term is present

    // out (ne x q') += scale * result[e, j] of the file comment.
    // order: "auto", "y" or "v".
    void contract(const CRef& V_eval, const CRef& points, const std::string& feature,
                  const std::string& y_kernel, const CVRef& y_bandwidth, MRef out, double scale,
                  int n_threads, const std::string& order = "auto") const {
        const std::string ctx = "RidgeArm.contract";
        if (order != "auto" && order != "y" && order != "v")
            throw std::invalid_argument(ctx + ": order must be 'auto', 'y' or 'v', got '" + order +
                                        "'");
        if (!std::isfinite(scale)) throw std::invalid_argument(ctx + ": scale must be finite");
        const int nt = resolve_threads(n_threads);
        const Prescaled Ve = prescale_eval(V_eval, ctx);
        const Index ne = V_eval.rows();
        FeatureMap fm = make_feature_map(feature, y_kernel, y_bandwidth, points, dy_, ctx,
                                         "y_bandwidth");
        if (out.rows() != ne || out.cols() != fm.n_out())
            throw ShapeError(ctx + ": out has shape " + shape_str(out.rows(), out.cols()) +
                             " but (len(V_eval), n_features) = " + shape_str(ne, fm.n_out()));
        if ((!use_a_ && !use_b_) || ne == 0 || fm.n_out() == 0 || scale == 0.0) return;
        Prescaled A1, A0;
        if (use_a_) A1 = fm.prepare_atoms(Y1_);
        if (use_b_) A0 = fm.prepare_atoms(Y0_);
        bool y_side;
        if (order == "auto") {
            RidgeCost c = cost(ne, fm);
            y_side = c.y_side <= c.v_side;
        } else {
            y_side = order == "y";
        }
        if (y_side) contract_y(Ve, ne, fm, A1, A0, out, scale, nt);
        else contract_v(Ve, ne, fm, A1, A0, out, scale, nt);
    }

    // Embedding weights on the atoms: c1 = a o beta (n x ne; zero when a is),
    // c0 = (L_X0 L_X0^T)^{-1} K_X0X1 (b o beta) (m x ne; zero when b is).
    std::pair<MatrixRM, MatrixRM> weights(const CRef& V_eval, int n_threads) const {
        const std::string ctx = "RidgeArm.weights";
        const int nt = resolve_threads(n_threads);
        const Prescaled Ve = prescale_eval(V_eval, ctx);
        const Index ne = V_eval.rows();
        MatrixRM C1 = MatrixRM::Zero(n_, ne), C0 = MatrixRM::Zero(m_out_, ne);
        if (!use_a_ && !use_b_) return {std::move(C1), std::move(C0)};
        const Index Be = block_width(ne, std::max(n_, m_));
        MatrixRM c1, c0;
        for (Index e0 = 0; e0 < ne; e0 += Be) {
            const Index e1 = std::min(ne, e0 + Be);
            weights_block(Ve, e0, e1, c1, c0, nt);
            if (use_a_) C1.middleCols(e0, e1 - e0) = c1;
            if (use_b_) C0.middleCols(e0, e1 - e0) = c0;
        }
        return {std::move(C1), std::move(C0)};
    }

    // beta = (L_V L_V^T)^{-1} k_V(V1, V_eval), (n x ne), whatever a and b:
    // the second stage's smoother, which the multiplier bootstrap needs.  Its
    // blocks are those of weights() for an arm without a first stage, so it
    // equals weights()'s c1 with a = 1, b = 0 bit for bit.
    MatrixRM beta(const CRef& V_eval, int n_threads) const {
        const std::string ctx = "RidgeArm.beta";
        const int nt = resolve_threads(n_threads);
        const Prescaled Ve = prescale_eval(V_eval, ctx);
        const Index ne = V_eval.rows();
        MatrixRM B(n_, ne);
        const Index Be = block_width(ne, n_);
        MatrixRM c1;
        for (Index e0 = 0; e0 < ne; e0 += Be) {
            const Index e1 = std::min(ne, e0 + Be);
            beta_block(Ve, e0, e1, c1, nt);
            B.middleCols(e0, e1 - e0) = c1;
        }
        return B;
    }

   private:
    using FactorMap = Eigen::Map<const MatrixRM, 0, Eigen::OuterStride<>>;

    static FactorMap view(const CRef& A) {
        return FactorMap(A.data(), A.rows(), A.cols(),
                         Eigen::OuterStride<>(std::max<Index>(A.outerStride(), A.cols())));
    }

    Prescaled prescale_eval(const CRef& V_eval, const std::string& ctx) const {
        if (V_eval.cols() != kv_.d)
            throw ShapeError(ctx + ": V_eval has " + std::to_string(V_eval.cols()) +
                             " columns but V1 has " + std::to_string(kv_.d));
        return prescale(V_eval, kv_);
    }

    // beta for V_eval rows [e0, e1) into c1 (n x w).
    void beta_block(const Prescaled& Ve, Index e0, Index e1, MatrixRM& c1, int nt) const {
        const Index n = n_, w = e1 - e0;
        c1.resize(n, w);
        parallel_for(ceil_div(n, kRowTile), nt, [&](Index t) {
            const Index i0 = t * kRowTile, i1 = std::min(n, i0 + kRowTile);
            kernel_block(kv_, V1_, i0, i1, Ve, e0, e1, c1.data() + i0 * w, w);
        });
        chol_solve_inplace(L_V_, c1, nt);
    }

    // Weights for V_eval rows [e0, e1): beta (n x w) scaled by a into c1 when
    // use_a, and c0 (m x w) when use_b.
    void weights_block(const Prescaled& Ve, Index e0, Index e1, MatrixRM& c1, MatrixRM& c0,
                       int nt) const {
        const Index n = n_, m = m_, w = e1 - e0;
        beta_block(Ve, e0, e1, c1, nt);
        if (use_b_) {
            MatrixRM tb = b_.asDiagonal() * c1;
            c0.resize(m, w);
            parallel_for(ceil_div(m, kRowTile), nt, [&](Index t) {
                const Index l0 = t * kRowTile, l1 = std::min(m, l0 + kRowTile);
                MatrixRM K(l1 - l0, n);
                kernel_block(kx_, X0_, l0, l1, X1_, 0, n, K.data(), n);
                c0.middleRows(l0, l1 - l0).noalias() = K * tb;
            });
            chol_solve_inplace(L_X0_, c0, nt);
        } else {
            c0.resize(0, w);
        }
        if (use_a_) c1 = a_.asDiagonal() * c1;
        else c1.resize(0, w);
    }

    RidgeCost cost(Index ne_, const FeatureMap& fm) const {
        const double n = double(n_), m = double(m_), ne = double(ne_), qo = double(fm.n_out());
        const double kv = kv_.dp() + 25.0, kx = kx_.dp() + 25.0, cf = fm.dy + 25.0;
        const double na = use_a_ ? n : 0.0, mb = use_b_ ? m : 0.0;
        const double nbq = double(ceil_div(fm.n_out(), block_width(fm.n_out(), std::max(n_, m_))));
        const double nbe = double(ceil_div(ne_, block_width(ne_, std::max(n_, m_))));
        RidgeCost c;
        c.y_side = (na + mb) * qo * cf + 2.0 * n * n * qo + nbq * ne * n * kv + 2.0 * ne * n * qo;
        if (use_b_) c.y_side += 2.0 * m * m * qo + nbq * n * m * kx + 2.0 * n * m * qo;
        c.v_side =
            ne * n * kv + 2.0 * n * n * ne + nbe * (na + mb) * qo * cf + 2.0 * (na + mb) * ne * qo;
        if (use_b_) c.v_side += nbe * m * n * kx + 2.0 * m * n * ne + 2.0 * m * m * ne;
        return c;
    }

    void contract_y(const Prescaled& Ve, Index ne, const FeatureMap& fm, const Prescaled& A1,
                    const Prescaled& A0, MRef out, double scale, int nt) const {
        const Index n = n_, m = m_, qo = fm.n_out();
        const Index Bq = block_width(qo, std::max(n, m));
        for (Index j0 = 0; j0 < qo; j0 += Bq) {
            const Index j1 = std::min(qo, j0 + Bq), w = j1 - j0;
            MatrixRM R(n, w);
            if (use_a_) {
                parallel_for(ceil_div(n, kRowTile), nt, [&](Index t) {
                    const Index i0 = t * kRowTile, i1 = std::min(n, i0 + kRowTile);
                    fm.fill(A1, i0, i1, j0, j1, R.data() + i0 * w, w);
                    for (Index i = i0; i < i1; ++i) R.row(i) *= a_[i];
                });
            } else {
                R.setZero();
            }
            if (use_b_) {
                MatrixRM W(m, w);
                parallel_for(ceil_div(m, kRowTile), nt, [&](Index t) {
                    const Index i0 = t * kRowTile, i1 = std::min(m, i0 + kRowTile);
                    fm.fill(A0, i0, i1, j0, j1, W.data() + i0 * w, w);
                });
                chol_solve_inplace(L_X0_, W, nt);
                parallel_for(ceil_div(n, kRowTile), nt, [&](Index t) {
                    const Index i0 = t * kRowTile, i1 = std::min(n, i0 + kRowTile);
                    MatrixRM K(i1 - i0, m);
                    kernel_block(kx_, X1_, i0, i1, X0_, 0, m, K.data(), m);
                    MatrixRM G = K * W;
                    for (Index i = i0; i < i1; ++i) R.row(i) += b_[i] * G.row(i - i0);
                });
            }
            chol_solve_inplace(L_V_, R, nt);  // H
            parallel_for(ceil_div(ne, kRowTile), nt, [&](Index t) {
                const Index e0 = t * kRowTile, e1 = std::min(ne, e0 + kRowTile);
                MatrixRM K(e1 - e0, n);
                kernel_block(kv_, Ve, e0, e1, V1_, 0, n, K.data(), n);
                out.block(e0, j0, e1 - e0, w).noalias() += scale * (K * R);
            });
        }
    }

    void contract_v(const Prescaled& Ve, Index ne, const FeatureMap& fm, const Prescaled& A1,
                    const Prescaled& A0, MRef out, double scale, int nt) const {
        const Index n = n_, m = m_, qo = fm.n_out();
        const Index Be = block_width(ne, std::max(n, m));
        MatrixRM c1, c0;
        for (Index e0 = 0; e0 < ne; e0 += Be) {
            const Index e1 = std::min(ne, e0 + Be), w = e1 - e0;
            weights_block(Ve, e0, e1, c1, c0, nt);
            parallel_for(ceil_div(qo, kRowTile), nt, [&](Index t) {
                const Index j0 = t * kRowTile, j1 = std::min(qo, j0 + kRowTile), wq = j1 - j0;
                auto o = out.block(e0, j0, w, wq);
                if (use_a_) {
                    MatrixRM F(n, wq);
                    fm.fill(A1, 0, n, j0, j1, F.data(), wq);
                    o.noalias() += scale * (c1.transpose() * F);
                }
                if (use_b_) {
                    MatrixRM F(m, wq);
                    fm.fill(A0, 0, m, j0, j1, F.data(), wq);
                    o.noalias() += scale * (c0.transpose() * F);
                }
            });
        }
    }

    FactorMap L_V_, L_X0_;
    Index n_ = 0, m_ = 0, m_out_ = 0, dy_ = 0;  // m_: used rows of L_X0 (0 without a first stage)
    bool use_a_ = false, use_b_ = false;
    Eigen::VectorXd a_, b_;
    KernelSpec kv_, kx_;
    Prescaled V1_, X0_, X1_;
    MatrixRM Y1_, Y0_;
};

}  // namespace ccme
