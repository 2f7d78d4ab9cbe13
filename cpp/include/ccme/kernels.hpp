// ccme/kernels.hpp -- ARD kernels, Gram matrices and atom features.
//
// All bandwidths are per column (length d).  A bandwidth of +inf means "ignore
// this column".  With r = sqrt(sum_d ((a_d - b_d) / sigma_d)^2):
//   gaussian  exp(-r^2/2)
//   laplace   exp(-r)                       (exponential, Matern-1/2)
//   matern32  (1 + sqrt3 r) exp(-sqrt3 r)
//   matern52  (1 + sqrt5 r + 5 r^2/3) exp(-sqrt5 r)
// Normalised (density) kernels integrate to one over R^d; they exist for
// gaussian ((2 pi)^{-d/2} / prod sigma) and laplace
// (Gamma(d/2) / (2 pi^{d/2} Gamma(d) prod sigma)) with finite bandwidths.
//
// Distances are computed directly as sums of squared differences of inputs
// pre-scaled by 1/sigma (never by the |a|^2 + |b|^2 - 2ab expansion).
#pragma once

#include "ccme/parallel.hpp"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

namespace ccme {

// exp(x) for x <= 0, written so that the compiler vectorises the loops that
// call it (glibc's exp is scalar).  Cody-Waite reduction x = k ln2 + r,
// |r| <= ln2/2, degree-13 Taylor polynomial (truncation < 1e-17 relative),
// scaling by 2^k through the exponent bits.  Relative error a few ulp.
// Results below ~1e-307 are returned as 0 (they never matter).
inline double exp_neg(double x) {
    const double log2e = 1.4426950408889634074;
    const double ln2_hi = 6.93147180369123816490e-01;  // low bits zero: k * ln2_hi exact
    const double ln2_lo = 1.90821492927058770002e-10;
    const bool tiny = x < -708.0;
    x = tiny ? -708.0 : (x > 0.0 ? 0.0 : x);
    const double kf = std::floor(x * log2e + 0.5);
    const double r = (x - kf * ln2_hi) - kf * ln2_lo;
    double p = 1.0 / 6227020800.0;             // 1/13!
    p = p * r + 1.0 / 479001600.0;             // 1/12!
    p = p * r + 1.0 / 39916800.0;
    p = p * r + 1.0 / 3628800.0;
    p = p * r + 1.0 / 362880.0;
    p = p * r + 1.0 / 40320.0;
    p = p * r + 1.0 / 5040.0;
    p = p * r + 1.0 / 720.0;
    p = p * r + 1.0 / 120.0;
    p = p * r + 1.0 / 24.0;
    p = p * r + 1.0 / 6.0;
    p = p * r + 0.5;
    p = p * r + 1.0;
    p = p * r + 1.0;
    const std::int64_t bits = (static_cast<std::int64_t>(kf) + 1023) << 52;
    double scale;
    std::memcpy(&scale, &bits, sizeof scale);
    return tiny ? 0.0 : p * scale;
}

enum class KernelKind { Gaussian, Laplace, Matern32, Matern52 };

inline const char* kAllowedKernels = "'gaussian', 'laplace', 'matern32', 'matern52'";

inline KernelKind parse_kernel(const std::string& name, const std::string& ctx) {
    if (name == "gaussian") return KernelKind::Gaussian;
    if (name == "laplace") return KernelKind::Laplace;
    if (name == "matern32") return KernelKind::Matern32;
    if (name == "matern52") return KernelKind::Matern52;
    throw std::invalid_argument(ctx + ": unknown kernel '" + name + "'; allowed kernels are " +
                                kAllowedKernels);
}

inline std::string shape_str(Index r, Index c) {
    return "(" + std::to_string(r) + ", " + std::to_string(c) + ")";
}

// A kernel with its bandwidths resolved: the finite columns and their scales.
struct KernelSpec {
    KernelKind kind = KernelKind::Gaussian;
    Index d = 0;                   // number of input columns
    std::vector<Index> active;     // columns with finite bandwidth
    std::vector<double> inv;       // 1/sigma for the active columns
    double norm = 1.0;             // multiplicative constant (normalised kernels)

    Index dp() const { return static_cast<Index>(active.size()); }

    // Turn a sum of squared scaled differences into kernel values, in place.
    void transform(double* o, Index len) const {
        switch (kind) {
            case KernelKind::Gaussian: {
                const double c = norm;
                for (Index j = 0; j < len; ++j) o[j] = c * exp_neg(-0.5 * o[j]);
                break;
            }
            case KernelKind::Laplace: {
                const double c = norm;
                for (Index j = 0; j < len; ++j) o[j] = c * exp_neg(-std::sqrt(o[j]));
                break;
            }
            case KernelKind::Matern32: {
                const double s3 = std::sqrt(3.0);
                for (Index j = 0; j < len; ++j) {
                    const double r = s3 * std::sqrt(o[j]);
                    o[j] = (1.0 + r) * exp_neg(-r);
                }
                break;
            }
            case KernelKind::Matern52: {
                const double s5 = std::sqrt(5.0);
                for (Index j = 0; j < len; ++j) {
                    const double r = s5 * std::sqrt(o[j]);
                    o[j] = (1.0 + r + r * r / 3.0) * exp_neg(-r);
                }
                break;
            }
        }
    }
};

inline KernelSpec make_kernel(const std::string& name, const CVRef& bandwidth, Index d,
                              bool normalized, const std::string& ctx,
                              const std::string& bw_name = "bandwidth") {
    KernelSpec ks;
    ks.kind = parse_kernel(name, ctx);
    ks.d = d;
    if (bandwidth.size() != d)
        throw std::invalid_argument(ctx + ": " + bw_name + " has length " +
                                    std::to_string(bandwidth.size()) + " but the data have " +
                                    std::to_string(d) + " columns");
    double log_prod = 0.0;
    for (Index k = 0; k < d; ++k) {
        const double s = bandwidth[k];
        if (!(s > 0.0))
            throw std::invalid_argument(ctx + ": " + bw_name + "[" + std::to_string(k) +
                                        "] = " + std::to_string(s) +
                                        " must be > 0 (or +inf to ignore the column)");
        if (std::isinf(s)) {
            if (normalized)
                throw std::invalid_argument(ctx + ": normalised (density) kernels need finite " +
                                            bw_name + "s, but " + bw_name + "[" +
                                            std::to_string(k) + "] is inf");
            continue;
        }
        ks.active.push_back(k);
        ks.inv.push_back(1.0 / s);
        log_prod += std::log(s);
    }
    if (normalized) {
        const double dd = static_cast<double>(d);
        const double pi = 3.14159265358979323846;
        if (ks.kind == KernelKind::Gaussian) {
            ks.norm = std::exp(-0.5 * dd * std::log(2.0 * pi) - log_prod);
        } else if (ks.kind == KernelKind::Laplace) {
            ks.norm = std::exp(std::lgamma(0.5 * dd) - std::log(2.0) - 0.5 * dd * std::log(pi) -
                               std::lgamma(dd) - log_prod);
        } else {
            throw std::invalid_argument(ctx + ": normalised (density) kernels exist only for "
                                              "'gaussian' and 'laplace', not '" + name + "'");
        }
    }
    return ks;
}

// Inputs scaled by 1/sigma on the active columns, stored row-wise (n x dp)
// and column-wise (dp x n) so that kernel blocks vectorise along the
// contiguous index.
struct Prescaled {
    MatrixRM rows;  // n x dp
    MatrixRM cols;  // dp x n
    Index n = 0;
};

inline Prescaled prescale(const CRef& X, const KernelSpec& ks, bool need_rows = true,
                          bool need_cols = true) {
    Prescaled p;
    p.n = X.rows();
    const Index dp = ks.dp();
    if (need_rows) {
        p.rows.resize(p.n, dp);
        for (Index i = 0; i < p.n; ++i)
            for (Index k = 0; k < dp; ++k) p.rows(i, k) = X(i, ks.active[k]) * ks.inv[k];
    }
    if (need_cols) {
        p.cols.resize(dp, p.n);
        for (Index k = 0; k < dp; ++k)
            for (Index i = 0; i < p.n; ++i) p.cols(k, i) = X(i, ks.active[k]) * ks.inv[k];
    }
    return p;
}

// out[(i - i0) * ldo + (j - j0)] = k(A_i, B_j) for i in [i0, i1), j in [j0, j1).
inline void kernel_block(const KernelSpec& ks, const Prescaled& A, Index i0, Index i1,
                         const Prescaled& B, Index j0, Index j1, double* out, Index ldo) {
    const Index dp = ks.dp();
    const Index len = j1 - j0;
    for (Index i = i0; i < i1; ++i) {
        double* o = out + (i - i0) * ldo;
        for (Index j = 0; j < len; ++j) o[j] = 0.0;
        for (Index k = 0; k < dp; ++k) {
            const double a = A.rows(i, k);
            const double* b = B.cols.data() + k * B.cols.cols() + j0;
            for (Index j = 0; j < len; ++j) {
                const double t = a - b[j];
                o[j] += t * t;
            }
        }
        ks.transform(o, len);
    }
}

// Gram matrix k(A_i, B_j), (nA x nB).
inline MatrixRM gram(const CRef& A, const CRef& B, const std::string& kernel,
                     const CVRef& bandwidth, bool normalized, int n_threads) {
    const std::string ctx = "gram";
    if (A.cols() != B.cols())
        throw ShapeError(ctx + ": A has " + std::to_string(A.cols()) +
                                    " columns but B has " + std::to_string(B.cols()));
    const int nt = resolve_threads(n_threads);
    KernelSpec ks = make_kernel(kernel, bandwidth, A.cols(), normalized, ctx);
    Prescaled pa = prescale(A, ks, true, false);
    Prescaled pb = prescale(B, ks, false, true);
    MatrixRM out(A.rows(), B.rows());
    const Index nr = ceil_div(A.rows(), kGramRowTile), nc = ceil_div(B.rows(), kGramColTile);
    parallel_for(nr * nc, nt, [&](Index t) {
        const Index i0 = (t / nc) * kGramRowTile, i1 = std::min(A.rows(), i0 + kGramRowTile);
        const Index j0 = (t % nc) * kGramColTile, j1 = std::min(B.rows(), j0 + kGramColTile);
        kernel_block(ks, pa, i0, i1, pb, j0, j1, out.data() + i0 * out.cols() + j0, out.cols());
    });
    return out;
}

// ---------------------------------------------------------------------------
// Atom features: F[k, j] for atoms y_k and evaluation points p_j.
//   density  normalised kernel k(p_j, y_k)                       (q' = q)
//   cdf      P(y_k + sigma * noise <= p_j componentwise)          (q' = q)
//            gaussian: prod_d Phi((p_jd - y_kd) / sigma_d); laplace: dy = 1 only
//   moments  [1, y_k1..y_kdy, y_k1^2..y_kdy^2]  (points ignored, q' = 1 + 2 dy)
// ---------------------------------------------------------------------------
enum class FeatureKind { Density, Cdf, Moments };

inline FeatureKind parse_feature(const std::string& name, const std::string& ctx) {
    if (name == "density") return FeatureKind::Density;
    if (name == "cdf") return FeatureKind::Cdf;
    if (name == "moments") return FeatureKind::Moments;
    throw std::invalid_argument(ctx + ": unknown feature '" + name +
                                "'; allowed features are 'density', 'cdf', 'moments'");
}

struct FeatureMap {
    FeatureKind kind = FeatureKind::Moments;
    KernelSpec ks;
    Index dy = 0;
    Index q = 0;  // number of points
    Prescaled P;  // points (column form) for density / cdf

    Index n_out() const { return kind == FeatureKind::Moments ? 1 + 2 * dy : q; }

    // Atoms in the form fill() wants (scaled rows, or raw values for moments).
    Prescaled prepare_atoms(const CRef& atoms) const {
        if (kind == FeatureKind::Moments) {
            Prescaled p;
            p.n = atoms.rows();
            p.rows = atoms;
            return p;
        }
        return prescale(atoms, ks, true, false);
    }

    // out[(i - i0) * ldo + (j - j0)] = F[i, j], i in [i0, i1), j in [j0, j1).
    void fill(const Prescaled& A, Index i0, Index i1, Index j0, Index j1, double* out,
              Index ldo) const {
        const Index len = j1 - j0;
        switch (kind) {
            case FeatureKind::Density:
                kernel_block(ks, A, i0, i1, P, j0, j1, out, ldo);
                return;
            case FeatureKind::Moments:
                for (Index i = i0; i < i1; ++i) {
                    double* o = out + (i - i0) * ldo;
                    for (Index j = j0; j < j1; ++j) {
                        double v;
                        if (j == 0) v = 1.0;
                        else if (j <= dy) v = A.rows(i, j - 1);
                        else { const double y = A.rows(i, j - 1 - dy); v = y * y; }
                        o[j - j0] = v;
                    }
                }
                return;
            case FeatureKind::Cdf:
                if (ks.kind == KernelKind::Gaussian) {
                    const double c = -std::sqrt(0.5);
                    for (Index i = i0; i < i1; ++i) {
                        double* o = out + (i - i0) * ldo;
                        for (Index j = 0; j < len; ++j) o[j] = 1.0;
                        for (Index k = 0; k < dy; ++k) {
                            const double a = A.rows(i, k);
                            const double* p = P.cols.data() + k * P.cols.cols() + j0;
                            for (Index j = 0; j < len; ++j)
                                o[j] *= 0.5 * std::erfc(c * (p[j] - a));
                        }
                    }
                } else {  // laplace, dy == 1
                    for (Index i = i0; i < i1; ++i) {
                        double* o = out + (i - i0) * ldo;
                        const double a = A.rows(i, 0);
                        const double* p = P.cols.data() + j0;
                        for (Index j = 0; j < len; ++j) {
                            const double u = p[j] - a;
                            o[j] = u < 0.0 ? 0.5 * std::exp(u) : 1.0 - 0.5 * std::exp(-u);
                        }
                    }
                }
                return;
        }
    }
};

// dy is the number of columns of the atoms; points must have dy columns
// (for "moments" they are ignored and may have no rows).
inline FeatureMap make_feature_map(const std::string& feature, const std::string& kernel,
                                   const CVRef& bandwidth, const CRef& points, Index dy,
                                   const std::string& ctx,
                                   const std::string& bw_name = "bandwidth") {
    FeatureMap fm;
    fm.kind = parse_feature(feature, ctx);
    fm.dy = dy;
    if (fm.kind == FeatureKind::Moments) {
        if (points.rows() > 0 && points.cols() != dy)
            throw ShapeError(ctx + ": points have " + std::to_string(points.cols()) +
                                        " columns but the atoms have " + std::to_string(dy));
        fm.q = 0;
        return fm;
    }
    if (points.cols() != dy)
        throw ShapeError(ctx + ": points have " + std::to_string(points.cols()) +
                                    " columns but the atoms have " + std::to_string(dy));
    KernelKind kk = parse_kernel(kernel, ctx);
    if (kk != KernelKind::Gaussian && kk != KernelKind::Laplace)
        throw std::invalid_argument(ctx + ": feature '" + feature +
                                    "' needs kernel 'gaussian' or 'laplace', not '" + kernel + "'");
    if (fm.kind == FeatureKind::Cdf && kk == KernelKind::Laplace && dy != 1)
        throw std::invalid_argument(ctx + ": the laplace cdf is only available for 1-dimensional "
                                          "outcomes, but dy = " + std::to_string(dy) +
                                    "; use kernel 'gaussian'");
    // density: normalised kernel; cdf: plain scaling, bandwidths must be finite.
    fm.ks = make_kernel(kernel, bandwidth, dy, /*normalized=*/true, ctx, bw_name);
    if (fm.kind == FeatureKind::Cdf) fm.ks.norm = 1.0;
    fm.q = points.rows();
    fm.P = prescale(points, fm.ks, false, true);
    return fm;
}

inline MatrixRM atom_features(const CRef& atoms, const CRef& points, const std::string& feature,
                              const std::string& kernel, const CVRef& bandwidth, int n_threads) {
    const std::string ctx = "atom_features";
    const int nt = resolve_threads(n_threads);
    FeatureMap fm = make_feature_map(feature, kernel, bandwidth, points, atoms.cols(), ctx);
    Prescaled pa = fm.prepare_atoms(atoms);
    const Index K = atoms.rows(), qo = fm.n_out();
    MatrixRM out(K, qo);
    const Index nr = ceil_div(K, kGramRowTile), nc = ceil_div(qo, kGramColTile);
    parallel_for(nr * nc, nt, [&](Index t) {
        const Index i0 = (t / nc) * kGramRowTile, i1 = std::min(K, i0 + kGramRowTile);
        const Index j0 = (t % nc) * kGramColTile, j1 = std::min(qo, j0 + kGramColTile);
        fm.fill(pa, i0, i1, j0, j1, out.data() + i0 * qo + j0, qo);
    });
    return out;
}

}  // namespace ccme
