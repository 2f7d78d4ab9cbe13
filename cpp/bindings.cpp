// Python bindings of the ccme compiled core (module ccme._core).
// This is the only file that knows about pybind11; the numerics live in
// cpp/include/ccme/*.hpp.  Every function releases the GIL while computing.
#include <pybind11/eigen.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <tuple>

#include "ccme/cholesky.hpp"
#include "ccme/kernels.hpp"
#include "ccme/mmd.hpp"
#include "ccme/parallel.hpp"
#include "ccme/ridge.hpp"
#include "ccme/tuning.hpp"

namespace py = pybind11;
using namespace ccme;

PYBIND11_MODULE(_core, m) {
    m.doc() = "ccme compiled core: kernels, tiled Cholesky and ridge CCME contractions "
              "(float64, OpenMP, deterministic across thread counts). Use ccme._backend.";

    py::register_exception<CholeskyError>(m, "CholeskyError", PyExc_ArithmeticError);

    m.attr("has_openmp") = py::bool_(has_openmp());
    m.attr("CHOL_TILE") = py::int_(kCholTile);
    m.attr("BLOCK_DOUBLES") = py::int_(kBlockDoubles);
    m.def("max_threads", &max_threads, "Number of threads OpenMP uses by default.");

    m.def(
        "gram",
        [](CRef A, CRef B, const std::string& kernel, CVRef bandwidth, bool normalized,
           int n_threads) {
            py::gil_scoped_release nogil;
            DenormalGuard ftz;
            return gram(A, B, kernel, bandwidth, normalized, n_threads);
        },
        py::arg("A"), py::arg("B"), py::arg("kernel"), py::arg("bandwidth"),
        py::arg("normalized") = false, py::arg("n_threads") = 0,
        "Gram matrix k(A_i, B_j), shape (nA, nB).");

    m.def(
        "atom_features",
        [](CRef atoms, CRef points, const std::string& feature, const std::string& kernel,
           CVRef bandwidth, int n_threads) {
            py::gil_scoped_release nogil;
            DenormalGuard ftz;
            return atom_features(atoms, points, feature, kernel, bandwidth, n_threads);
        },
        py::arg("atoms"), py::arg("points"), py::arg("feature"), py::arg("kernel"),
        py::arg("bandwidth"), py::arg("n_threads") = 0,
        "Features of the atoms at the points: 'density', 'cdf' or 'moments'.");

    m.def(
        "cholesky",
        [](CRef A, double shift, int n_threads) {
            py::gil_scoped_release nogil;
            DenormalGuard ftz;
            return cholesky(A, shift, n_threads);
        },
        py::arg("A"), py::arg("shift") = 0.0, py::arg("n_threads") = 0,
        "(L, jitter): lower Cholesky factor of A + (shift + jitter) I.");

    m.def(
        "kernel_ridge_factor",
        [](CRef X, const std::string& kernel, CVRef bandwidth, double shift, int n_threads) {
            py::gil_scoped_release nogil;
            DenormalGuard ftz;
            return kernel_ridge_factor(X, kernel, bandwidth, shift, n_threads);
        },
        py::arg("X"), py::arg("kernel"), py::arg("bandwidth"), py::arg("shift"),
        py::arg("n_threads") = 0, "(L, jitter): Cholesky factor of gram(X, X) + (shift + jitter) I.");

    m.def(
        "cholesky_solve",
        [](CRef L, CRef B, int n_threads) {
            py::gil_scoped_release nogil;
            DenormalGuard ftz;
            return cholesky_solve(L, B, n_threads);
        },
        py::arg("L"), py::arg("B"), py::arg("n_threads") = 0, "X solving L L^T X = B.");

    m.def(
        "ridge_contract",
        [](CRef L_V, CRef V1, const std::string& v_kernel, CVRef v_bandwidth, CVRef a, CRef Y1,
           CVRef b, CRef X1, CRef L_X0, CRef X0, CRef Y0, const std::string& x_kernel,
           CVRef x_bandwidth, CRef V_eval, CRef points, const std::string& feature,
           const std::string& y_kernel, CVRef y_bandwidth, MRef out, double scale,
           int n_threads, const std::string& order) {
            py::gil_scoped_release nogil;
            DenormalGuard ftz;
            ridge_contract(L_V, V1, v_kernel, v_bandwidth, a, Y1, b, X1, L_X0, X0, Y0, x_kernel,
                           x_bandwidth, V_eval, points, feature, y_kernel, y_bandwidth, out, scale,
                           n_threads, order);
        },
        py::arg("L_V"), py::arg("V1"), py::arg("v_kernel"), py::arg("v_bandwidth"), py::arg("a"),
        py::arg("Y1"), py::arg("b"), py::arg("X1"), py::arg("L_X0"), py::arg("X0"), py::arg("Y0"),
        py::arg("x_kernel"), py::arg("x_bandwidth"), py::arg("V_eval"), py::arg("points"),
        py::arg("feature"), py::arg("y_kernel"), py::arg("y_bandwidth"), py::arg("out").noconvert(),
        py::arg("scale"), py::arg("n_threads") = 0, py::arg("order") = "auto",
        "out += scale * result (in place); see ccme._backend.ridge_contract.");

    m.def(
        "ridge_weights",
        [](CRef L_V, CRef V1, const std::string& v_kernel, CVRef v_bandwidth, CVRef a, CVRef b,
           CRef X1, CRef L_X0, CRef X0, const std::string& x_kernel, CVRef x_bandwidth,
           CRef V_eval, int n_threads) {
            py::gil_scoped_release nogil;
            DenormalGuard ftz;
            return ridge_weights(L_V, V1, v_kernel, v_bandwidth, a, b, X1, L_X0, X0, x_kernel,
                                 x_bandwidth, V_eval, n_threads);
        },
        py::arg("L_V"), py::arg("V1"), py::arg("v_kernel"), py::arg("v_bandwidth"), py::arg("a"),
        py::arg("b"), py::arg("X1"), py::arg("L_X0"), py::arg("X0"), py::arg("x_kernel"),
        py::arg("x_bandwidth"), py::arg("V_eval"), py::arg("n_threads") = 0,
        "(c1 (n, ne), c0 (m, ne)): embedding weights on the atoms Y1 and Y0.");

    m.def(
        "pivoted_cholesky",
        [](CRef X, const std::string& kernel, CVRef bandwidth, double tol, Index max_rank,
           int n_threads) {
            py::gil_scoped_release nogil;
            DenormalGuard ftz;
            PivotedCholesky pc = pivoted_cholesky(X, kernel, bandwidth, tol, max_rank, n_threads);
            return std::make_tuple(std::move(pc.L), std::move(pc.pivots), pc.residual);
        },
        py::arg("X"), py::arg("kernel"), py::arg("bandwidth"), py::arg("tol"),
        py::arg("max_rank"), py::arg("n_threads") = 0,
        "(L (n, r), pivots, residual): pivoted Cholesky k(X, X) ~ L L^T.");

    m.def(
        "krr_loo_path",
        [](CRef Q, CVRef s2, CRef Z, CVRef lambdas, int n_threads) {
            py::gil_scoped_release nogil;
            DenormalGuard ftz;
            LooPath path = krr_loo_path(Q, s2, Z, lambdas, n_threads);
            return std::make_tuple(std::move(path.loo), std::move(path.gcv), std::move(path.dof));
        },
        py::arg("Q"), py::arg("s2"), py::arg("Z"), py::arg("lambdas"), py::arg("n_threads") = 0,
        "(loo, gcv, dof) of ridge regression of Z on K ~ Q diag(s2) Q^T along the penalties.");

    m.def(
        "kernel_quadratic_forms",
        [](CRef Z, CRef W, const std::string& kernel, CVRef bandwidth, bool normalized,
           int n_threads) {
            py::gil_scoped_release nogil;
            DenormalGuard ftz;
            return kernel_quadratic_forms(Z, W, kernel, bandwidth, normalized, n_threads);
        },
        py::arg("Z"), py::arg("W"), py::arg("kernel"), py::arg("bandwidth"),
        py::arg("normalized") = true, py::arg("n_threads") = 0,
        "q[e] = W[:, e]^T k(Z, Z) W[:, e] without forming k(Z, Z) (MMD between embeddings).");
}
