// Tests of the ccme headers on their own, without Python: each fast, blocked,
// parallel routine against naive loops that are obviously right, on small
// random problems whose sizes cross the tile boundaries (kGramRowTile,
// kCholTile, kRowTile, kSolveChunk).  Tolerances are relative to the largest
// reference value and were set from the measured errors (printed with every
// check) with a margin of about 100x.
//
// Build with CMake (-DCCME_BUILD_TESTS=ON) and run ccme_test_core, or ctest;
// tests/test_cpp_headers.py does both from the Python test suite.  Exit
// status 0 when every check passes.
#include "ccme/cholesky.hpp"
#include "ccme/kernels.hpp"
#include "ccme/mmd.hpp"
#include "ccme/parallel.hpp"
#include "ccme/ridge.hpp"
#include "ccme/tuning.hpp"

#include <cmath>
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <vector>

using namespace ccme;
using Vec = Eigen::VectorXd;

// ---------------------------------------------------------------------------
// a minimal harness
// ---------------------------------------------------------------------------
static int g_failures = 0, g_checks = 0;

static void check(bool ok, const std::string& what, const std::string& detail = "") {
    ++g_checks;
    if (!ok) ++g_failures;
    std::printf("%s %s%s%s\n", ok ? "ok  " : "FAIL", what.c_str(), detail.empty() ? "" : "  ",
                detail.c_str());
}

// max |got - want| / max(max |want|, tiny)
static double rel_err(const MatrixRM& got, const MatrixRM& want) {
    if (got.rows() != want.rows() || got.cols() != want.cols()) return INFINITY;
    if (want.size() == 0) return 0.0;
    const double scale = std::max(want.cwiseAbs().maxCoeff(), 1e-300);
    return (got - want).cwiseAbs().maxCoeff() / scale;
}

static void check_close(const MatrixRM& got, const MatrixRM& want, double tol,
                        const std::string& what) {
    const double err = rel_err(got, want);
    char buf[96];
    std::snprintf(buf, sizeof buf, "(rel err %.2e, tol %.0e)", err, tol);
    check(err <= tol, what, buf);
}

static void check_equal(const MatrixRM& a, const MatrixRM& b, const std::string& what) {
    const bool same = a.rows() == b.rows() && a.cols() == b.cols() &&
                      (a.size() == 0 || std::memcmp(a.data(), b.data(), sizeof(double) * a.size()) == 0);
    check(same, what, "(bit for bit)");
}

template <class E>
static void check_throws(const std::function<void()>& f, const std::string& what) {
    bool thrown = false;
    std::string msg;
    try {
        f();
    } catch (const E& e) {
        thrown = true;
        msg = e.what();
    } catch (const std::exception& e) {
        msg = std::string("wrong exception type: ") + e.what();
    }
    check(thrown, what, msg);
}

static std::mt19937_64 g_rng(20240611);

static MatrixRM normal(Index r, Index c, double sd = 1.0) {
    std::normal_distribution<double> N(0.0, sd);
    MatrixRM M(r, c);
    for (Index i = 0; i < r; ++i)
        for (Index j = 0; j < c; ++j) M(i, j) = N(g_rng);
    return M;
}

static Vec uniform(Index n, double lo, double hi) {
    std::uniform_real_distribution<double> U(lo, hi);
    Vec v(n);
    for (Index i = 0; i < n; ++i) v[i] = U(g_rng);
    return v;
}

// ---------------------------------------------------------------------------
// naive references
// ---------------------------------------------------------------------------
static double naive_kernel(const std::string& kernel, const double* x, const double* y,
                           const Vec& bw, bool normalized) {
    const Index d = bw.size();
    double r2 = 0.0, prod = 1.0;
    for (Index k = 0; k < d; ++k) {
        if (std::isinf(bw[k])) continue;
        const double t = (x[k] - y[k]) / bw[k];
        r2 += t * t;
        prod *= bw[k];
    }
    const double r = std::sqrt(r2), pi = 3.14159265358979323846, dd = double(d);
    if (kernel == "gaussian")
        return std::exp(-r2 / 2) / (normalized ? std::pow(2 * pi, dd / 2) * prod : 1.0);
    if (kernel == "laplace")
        return std::exp(-r) *
               (normalized ? std::tgamma(dd / 2) / (2 * std::pow(pi, dd / 2) * std::tgamma(dd) * prod)
                           : 1.0);
    if (kernel == "matern32") return (1 + std::sqrt(3.0) * r) * std::exp(-std::sqrt(3.0) * r);
    return (1 + std::sqrt(5.0) * r + 5 * r2 / 3) * std::exp(-std::sqrt(5.0) * r);
}

static MatrixRM naive_gram(const MatrixRM& A, const MatrixRM& B, const std::string& kernel,
                           const Vec& bw, bool normalized = false) {
    MatrixRM K(A.rows(), B.rows());
    for (Index i = 0; i < A.rows(); ++i)
        for (Index j = 0; j < B.rows(); ++j)
            K(i, j) = naive_kernel(kernel, &A(i, 0), &B(j, 0), bw, normalized);
    return K;
}

static MatrixRM naive_features(const MatrixRM& Y, const MatrixRM& P, const std::string& feature,
                               const std::string& kernel, const Vec& bw) {
    const Index dy = Y.cols();
    if (feature == "moments") {
        MatrixRM F(Y.rows(), 1 + 2 * dy);
        for (Index i = 0; i < Y.rows(); ++i) {
            F(i, 0) = 1.0;
            for (Index k = 0; k < dy; ++k) F(i, 1 + k) = Y(i, k), F(i, 1 + dy + k) = Y(i, k) * Y(i, k);
        }
        return F;
    }
    if (feature == "density") return naive_gram(Y, P, kernel, bw, true);
    MatrixRM F(Y.rows(), P.rows());
    for (Index i = 0; i < Y.rows(); ++i)
        for (Index j = 0; j < P.rows(); ++j) {
            double v = 1.0;
            for (Index k = 0; k < dy; ++k) {
                const double u = (P(j, k) - Y(i, k)) / bw[k];
                v *= kernel == "gaussian" ? 0.5 * std::erfc(-u / std::sqrt(2.0))
                                          : (u < 0 ? 0.5 * std::exp(u) : 1 - 0.5 * std::exp(-u));
            }
            F(i, j) = v;
        }
    return F;
}

static MatrixRM naive_product(const MatrixRM& A, const MatrixRM& B) {
    MatrixRM C = MatrixRM::Zero(A.rows(), B.cols());
    for (Index i = 0; i < A.rows(); ++i)
        for (Index j = 0; j < B.cols(); ++j)
            for (Index k = 0; k < A.cols(); ++k) C(i, j) += A(i, k) * B(k, j);
    return C;
}

static MatrixRM transpose(const MatrixRM& A) { return A.transpose(); }

// Cholesky-Banachiewicz, row by row; returns false at a non-positive pivot.
static bool naive_cholesky(const MatrixRM& A, MatrixRM& L) {
    const Index n = A.rows();
    L = MatrixRM::Zero(n, n);
    for (Index i = 0; i < n; ++i)
        for (Index j = 0; j <= i; ++j) {
            double s = A(i, j);
            for (Index k = 0; k < j; ++k) s -= L(i, k) * L(j, k);
            if (i == j) {
                if (!(s > 0)) return false;
                L(i, i) = std::sqrt(s);
            } else {
                L(i, j) = s / L(j, j);
            }
        }
    return true;
}

// X solving L L^T X = B by forward then backward substitution.
static MatrixRM naive_solve(const MatrixRM& L, const MatrixRM& B) {
    const Index n = L.rows();
    MatrixRM X = B;
    for (Index c = 0; c < B.cols(); ++c) {
        for (Index i = 0; i < n; ++i) {
            double s = X(i, c);
            for (Index k = 0; k < i; ++k) s -= L(i, k) * X(k, c);
            X(i, c) = s / L(i, i);
        }
        for (Index i = n - 1; i >= 0; --i) {
            double s = X(i, c);
            for (Index k = i + 1; k < n; ++k) s -= L(k, i) * X(k, c);
            X(i, c) = s / L(i, i);
        }
    }
    return X;
}

static MatrixRM spd(Index n) {
    MatrixRM G = normal(n, n);
    MatrixRM A = naive_product(G, transpose(G)) / double(n);
    for (Index i = 0; i < n; ++i) A(i, i) += 1.0;
    return A;
}

static const std::vector<int> kThreads = {1, 2, 3};

// ---------------------------------------------------------------------------
// tests
// ---------------------------------------------------------------------------
static void test_gram() {
    const MatrixRM A = normal(70, 3), B = normal(1030, 3);  // crosses row and column tiles
    const std::vector<Vec> bws = {(Vec(3) << 0.7, 1.3, 2.0).finished(),
                                  (Vec(3) << 0.5, INFINITY, 1.0).finished(),
                                  (Vec(3) << INFINITY, INFINITY, INFINITY).finished()};
    for (const char* kernel : {"gaussian", "laplace", "matern32", "matern52"})
        for (size_t b = 0; b < bws.size(); ++b)
            check_close(gram(A, B, kernel, bws[b], false, 2), naive_gram(A, B, kernel, bws[b]),
                        1e-13, std::string("gram ") + kernel + " bandwidths #" + std::to_string(b));
    for (const char* kernel : {"gaussian", "laplace"})
        for (Index d : {1, 2, 5}) {
            const MatrixRM X = normal(20, d), Y = normal(30, d);
            const Vec bw = uniform(d, 0.3, 2.0);
            check_close(gram(X, Y, kernel, bw, true, 1), naive_gram(X, Y, kernel, bw, true), 1e-13,
                        std::string("gram normalised ") + kernel + " d=" + std::to_string(d));
        }
    const Vec bw = bws[0];
    check_equal(gram(A, B, "matern52", bw, false, 1), gram(A, B, "matern52", bw, false, 3),
                "gram 1 vs 3 threads");
    check_throws<ShapeError>([&] { gram(A, normal(4, 2), "gaussian", bw, false, 1); },
                             "gram column mismatch is a ShapeError");
    check_throws<std::invalid_argument>([&] { gram(A, B, "cubic", bw, false, 1); },
                                        "gram unknown kernel is invalid_argument");
    bool not_shape = false;
    try {
        gram(A, B, "cubic", bw, false, 1);
    } catch (const ShapeError&) {
    } catch (const std::invalid_argument&) {
        not_shape = true;
    }
    check(not_shape, "an unknown kernel is not a ShapeError (ParameterError, not DataError)");
    check_throws<std::invalid_argument>([&] { gram(A, B, "gaussian", (Vec(3) << 1, 0, 1).finished(), false, 1); },
                                        "gram zero bandwidth is invalid_argument");
}

static void test_atom_features() {
    struct Case { const char* feature; const char* kernel; Index dy; };
    for (Case c : {Case{"density", "gaussian", 2}, Case{"density", "laplace", 3},
                   Case{"cdf", "gaussian", 2}, Case{"cdf", "laplace", 1},
                   Case{"moments", "gaussian", 2}}) {
        const MatrixRM Y = normal(70, c.dy), P = normal(1030, c.dy);
        const Vec bw = uniform(c.dy, 0.2, 1.5);
        check_close(atom_features(Y, P, c.feature, c.kernel, bw, 2),
                    naive_features(Y, P, c.feature, c.kernel, bw), 1e-13,
                    std::string("atom_features ") + c.feature + " " + c.kernel + " dy=" +
                        std::to_string(c.dy));
    }
}

static void test_cholesky() {
    for (Index n : {1, 5, 256, 300}) {  // 300: two tiles
        const MatrixRM A = spd(n);
        auto [L, jitter] = cholesky(A, 0.5, 2);
        MatrixRM As = A;
        for (Index i = 0; i < n; ++i) As(i, i) += 0.5;
        MatrixRM Ln;
        naive_cholesky(As, Ln);
        check(jitter == 0.0, "cholesky n=" + std::to_string(n) + " needs no jitter");
        check_close(L, Ln, 1e-12, "cholesky n=" + std::to_string(n) + " vs naive factor");
        check(L.triangularView<Eigen::StrictlyUpper>().toDenseMatrix().isZero(0.0),
              "cholesky n=" + std::to_string(n) + " upper triangle exactly zero");
        if (n == 300) {
            for (int t : kThreads)
                check_equal(cholesky(A, 0.5, t).first, L, "cholesky 2 vs " + std::to_string(t) + " threads");
            const MatrixRM B = normal(n, 300);  // several solve chunks
            const MatrixRM X = cholesky_solve(L, B, 2);
            check_close(X, naive_solve(L, B), 1e-12, "cholesky_solve vs substitution loops");
            check_close(naive_product(As, X), B, 1e-12, "cholesky_solve residual");
            for (int t : kThreads)
                check_equal(cholesky_solve(L, B, t), X, "cholesky_solve 2 vs " + std::to_string(t) + " threads");
            for (Index q : {Index(1), Index(3), Index(8)}) {  // few columns (one chunk): the bootstrap's weights
                const MatrixRM b = normal(n, q);
                const MatrixRM x = cholesky_solve(L, b, 2);
                check_close(x, naive_solve(L, b), 1e-12, "cholesky_solve, " + std::to_string(q) + " columns, vs loops");
                for (int t : kThreads)
                    check_equal(cholesky_solve(L, b, t), x,
                                "cholesky_solve, " + std::to_string(q) + " columns, 2 vs " + std::to_string(t) +
                                    " threads");
            }
        }
    }
    // The jitter rule on a singular matrix: duplicated points.
    MatrixRM X(80, 1);
    for (Index i = 0; i < 40; ++i) X(2 * i, 0) = X(2 * i + 1, 0) = i / 39.0;
    const Vec bw = Vec::Constant(1, 0.5);
    const MatrixRM K = naive_gram(X, X, "gaussian", bw);
    auto [L, jitter] = cholesky(K, 0.0, 2);
    double want = -1.0, mean = K.diagonal().mean();
    MatrixRM Ln;
    for (double f : kJitterFactors) {  // the first jitter with which the naive factor succeeds
        MatrixRM Kj = K;
        for (Index i = 0; i < Kj.rows(); ++i) Kj(i, i) += f * mean;
        if (naive_cholesky(Kj, Ln)) { want = f * mean; break; }
    }
    char buf[96];
    std::snprintf(buf, sizeof buf, "(jitter %.3g, naive %.3g)", jitter, want);
    check(jitter > 0 && std::abs(jitter - want) <= 1e-15 * want, "cholesky jitter retry on a singular matrix", buf);
    MatrixRM Kj = K;
    for (Index i = 0; i < Kj.rows(); ++i) Kj(i, i) += jitter;
    check_close(naive_product(L, transpose(L)), Kj, 1e-12, "jittered factor reproduces K + jitter I");
    auto [Lk, jk] = kernel_ridge_factor(X, "gaussian", bw, 0.0, 3);
    check(jk == jitter, "kernel_ridge_factor takes the same jitter");
    // Not Lk against L: K + 1e-10 I has condition number ~1e10, so the last-ulp
    // differences between the core's exp and std::exp move the factors by ~1e-7.
    check_close(naive_product(Lk, transpose(Lk)), Kj, 1e-12,
                "kernel_ridge_factor's jittered factor reproduces K + jitter I");
    const MatrixRM Z = normal(300, 3);
    const Vec bz = (Vec(3) << 1.0, INFINITY, 0.5).finished();
    auto [Lz, jz] = kernel_ridge_factor(Z, "matern32", bz, 0.3, 2);
    MatrixRM Kz = naive_gram(Z, Z, "matern32", bz), Lzn;
    for (Index i = 0; i < 300; ++i) Kz(i, i) += 0.3;
    naive_cholesky(Kz, Lzn);
    check(jz == 0.0, "kernel_ridge_factor with a shift needs no jitter");
    check_close(Lz, Lzn, 1e-12, "kernel_ridge_factor vs naive Gram and factor (two tiles)");
    check_throws<CholeskyError>([] { cholesky(-MatrixRM::Identity(4, 4), 0.0, 1); },
                                "negative definite: CholeskyError without jitter");
    MatrixRM D = MatrixRM::Identity(3, 3);
    D(2, 2) = -0.5;  // mean diagonal 0.5 > 0: every jitter is tried, none is enough
    bool after_jitter = false;
    try {
        cholesky(D, 0.0, 1);
    } catch (const CholeskyError& e) {
        after_jitter = std::string(e.what()).find("even with jitter") != std::string::npos;
    }
    check(after_jitter, "indefinite: CholeskyError after every jitter");
    check_throws<ShapeError>([] { cholesky(MatrixRM::Zero(3, 4), 0.0, 1); }, "non-square: ShapeError");
    check_throws<ShapeError>([&] { cholesky_solve(L, MatrixRM::Zero(3, 2), 1); },
                             "solve with wrong rows: ShapeError");
}

struct RidgeData {
    MatrixRM L_V, V1, X1, L_X0, X0, Y1, Y0, Ve, P;
    Vec a, b, bv, bx, by;
};

static RidgeData ridge_data(Index n, Index m, Index ne, Index q, Index dy, bool a_zero, bool b_zero) {
    RidgeData d;
    const Index dv = 2, dx = 3;
    d.V1 = normal(n, dv);
    d.X1.resize(n, dx);
    d.X1 << d.V1, normal(n, 1);
    d.X0 = normal(m, dx);
    d.bv = uniform(dv, 0.5, 2.0);
    d.bx = uniform(dx, 0.5, 2.0);
    d.by = uniform(dy, 0.2, 1.0);
    d.L_V = kernel_ridge_factor(d.V1, "gaussian", d.bv, 0.1 * n, 1).first;
    d.L_X0 = m > 0 ? kernel_ridge_factor(d.X0, "matern32", d.bx, 0.05 * m, 1).first : MatrixRM(0, 0);
    d.a = a_zero ? Vec::Zero(n) : uniform(n, 0.0, 3.0);
    d.b = b_zero ? Vec::Zero(n) : Vec(Vec::Ones(n) - d.a);
    d.Y1 = normal(n, dy);
    d.Y0 = normal(m, dy);
    d.Ve = normal(ne, dv);
    d.P = normal(q, dy);
    return d;
}

static void test_ridge() {
    struct Case { Index n, m, ne, q, dy; bool a_zero, b_zero; const char* name; };
    const std::vector<Case> cases = {
        {40, 30, 9, 11, 1, false, false, "dr"},
        {40, 0, 9, 11, 1, false, false, "no first stage (m = 0)"},
        {40, 30, 9, 11, 1, true, false, "a = 0 (pi)"},
        {40, 30, 9, 11, 1, false, true, "b = 0 (ipw)"},
        {40, 30, 9, 11, 2, false, false, "dy = 2"},
        {300, 280, 270, 260, 1, false, false, "several tiles and chunks"},
    };
    for (const Case& c : cases) {
        const RidgeData d = ridge_data(c.n, c.m, c.ne, c.q, c.dy, c.a_zero, c.b_zero);
        const RidgeArm arm(d.L_V, d.V1, "gaussian", d.bv, d.a, d.Y1, d.b, d.X1, d.L_X0, d.X0, d.Y0,
                           "matern32", d.bx);
        // naive weights and contraction
        const MatrixRM beta = naive_solve(d.L_V, naive_gram(d.V1, d.Ve, "gaussian", d.bv));
        const MatrixRM c1 = d.a.asDiagonal() * beta;
        MatrixRM c0 = MatrixRM::Zero(c.m, c.ne);
        const bool first_stage = c.m > 0 && !c.b_zero;
        if (first_stage) {
            const MatrixRM bb = d.b.asDiagonal() * beta;
            c0 = naive_solve(d.L_X0, naive_product(naive_gram(d.X0, d.X1, "matern32", d.bx), bb));
        }
        const std::string tag = std::string("ridge [") + c.name + "] ";
        check(arm.uses_a() == !c.a_zero && arm.uses_b() == first_stage, tag + "terms detected");
        auto [w1, w0] = arm.weights(d.Ve, 2);
        check_close(w1, c1, 1e-11, tag + "weights c1");
        check_close(w0, c0, 1e-11, tag + "weights c0");
        check_close(arm.beta(d.Ve, 2), beta, 1e-11, tag + "beta");
        for (const char* feature : {"density", "cdf", "moments"}) {
            const MatrixRM F1 = naive_features(d.Y1, d.P, feature, "gaussian", d.by);
            const MatrixRM F0 = naive_features(d.Y0, d.P, feature, "gaussian", d.by);
            MatrixRM want = naive_product(transpose(c1), F1) + naive_product(transpose(c0), F0);
            want *= 0.7;
            MatrixRM ref;
            for (const char* order : {"y", "v", "auto"}) {
                MatrixRM out = MatrixRM::Constant(c.ne, want.cols(), 1.0);  // accumulates
                arm.contract(d.Ve, d.P, feature, "gaussian", d.by, out, 0.7, 2, order);
                out.array() -= 1.0;
                check_close(out, want, 1e-11, tag + feature + " order " + order);
                if (std::string(order) == "y") ref = out;
            }
            if (std::string(feature) == "density" && c.n >= 300) {
                for (const char* order : {"y", "v"}) {
                    MatrixRM base = MatrixRM::Zero(c.ne, want.cols());
                    arm.contract(d.Ve, d.P, feature, "gaussian", d.by, base, 0.7, 1, order);
                    for (int t : kThreads) {
                        MatrixRM out = MatrixRM::Zero(c.ne, want.cols());
                        arm.contract(d.Ve, d.P, feature, "gaussian", d.by, out, 0.7, t, order);
                        check_equal(out, base, tag + "order " + order + ": 1 vs " + std::to_string(t) + " threads");
                    }
                }
                for (int t : kThreads) {
                    auto [t1, t0] = arm.weights(d.Ve, t);
                    check_equal(t1, w1, tag + "weights c1: 2 vs " + std::to_string(t) + " threads");
                    check_equal(t0, w0, tag + "weights c0: 2 vs " + std::to_string(t) + " threads");
                }
            }
        }
    }
    // Shape errors are ShapeError; a bad order or kernel is invalid_argument.
    const RidgeData d = ridge_data(20, 15, 4, 5, 1, false, false);
    const RidgeArm arm(d.L_V, d.V1, "gaussian", d.bv, d.a, d.Y1, d.b, d.X1, d.L_X0, d.X0, d.Y0,
                       "matern32", d.bx);
    MatrixRM out = MatrixRM::Zero(4, 5);
    check_throws<ShapeError>([&] { arm.contract(normal(4, 3), d.P, "density", "gaussian", d.by, out, 1.0, 1, "auto"); },
                             "ridge V_eval with wrong columns: ShapeError");
    check_throws<ShapeError>([&] { MatrixRM o(3, 5); arm.contract(d.Ve, d.P, "density", "gaussian", d.by, o, 1.0, 1, "auto"); },
                             "ridge out with wrong shape: ShapeError");
    check_throws<ShapeError>([&] { RidgeArm(d.L_V, d.V1, "gaussian", d.bv, d.a, d.Y1, d.b, d.X1, d.L_X0,
                                            MatrixRM(d.X0.topRows(14)), d.Y0, "matern32", d.bx); },
                             "ridge X0 rows vs L_X0: ShapeError");
    check_throws<std::invalid_argument>([&] { arm.contract(d.Ve, d.P, "density", "gaussian", d.by, out, 1.0, 1, "x"); },
                                        "ridge bad order: invalid_argument");
}

static void test_mmd_and_tuning() {
    const MatrixRM Z = normal(300, 2), W = normal(300, 5);  // two tiles of kMmdTile
    const Vec bw = (Vec(2) << 0.8, 1.4).finished();
    const MatrixRM K = naive_gram(Z, Z, "gaussian", bw, true);
    const MatrixRM KW = naive_product(K, W);
    MatrixRM want(5, 1);
    for (Index e = 0; e < 5; ++e) {
        double s = 0.0;
        for (Index i = 0; i < 300; ++i) s += W(i, e) * KW(i, e);
        want(e, 0) = s;
    }
    const Vec q = kernel_quadratic_forms(Z, W, "gaussian", bw, true, 2);
    check_close(MatrixRM(q), want, 1e-12, "kernel_quadratic_forms vs W^T K W");
    check_equal(MatrixRM(kernel_quadratic_forms(Z, W, "gaussian", bw, true, 3)), MatrixRM(q),
                "kernel_quadratic_forms 2 vs 3 threads");
    // A pivoted Cholesky run to full rank reproduces the Gram matrix.
    const MatrixRM X = normal(150, 2);
    PivotedCholesky pc = pivoted_cholesky(X, "matern52", bw, 0.0, 150, 2);
    const MatrixRM Kx = naive_gram(X, X, "matern52", bw);
    check_close(naive_product(pc.L, transpose(pc.L)), Kx, 1e-8,
                "pivoted_cholesky to round-off reproduces k(X, X) (rank " + std::to_string(pc.L.cols()) + ")");
}

int main() {
    std::printf("ccme header tests (OpenMP %s, %d threads available)\n", has_openmp() ? "on" : "off",
                max_threads());
    DenormalGuard ftz;  // as the bindings run
    test_gram();
    test_atom_features();
    test_cholesky();
    test_ridge();
    test_mmd_and_tuning();
    std::printf("%d of %d checks failed\n", g_failures, g_checks);
    return g_failures == 0 ? 0 : 1;
}
