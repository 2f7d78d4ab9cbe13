// Cholesky factorisations with jitter and solves (ccme/cholesky.hpp).
#include "common.hpp"

#include "ccme/cholesky.hpp"

namespace ccme::bindings {

void register_cholesky(py::module_& m) {
    m.def(
        "cholesky",
        [](CRef A, double shift, int n_threads) {
            return compute([&] { return cholesky(A, shift, n_threads); });
        },
        py::arg("A"), py::arg("shift") = 0.0, py::arg("n_threads") = 0,
        "(L, jitter): lower Cholesky factor of A + (shift + jitter) I.");

    m.def(
        "kernel_ridge_factor",
        [](CRef X, const std::string& kernel, CVRef bandwidth, double shift, int n_threads) {
            return compute(
                [&] { return kernel_ridge_factor(X, kernel, bandwidth, shift, n_threads); });
        },
        py::arg("X"), py::arg("kernel"), py::arg("bandwidth"), py::arg("shift"),
        py::arg("n_threads") = 0,
        "(L, jitter): Cholesky factor of gram(X, X) + (shift + jitter) I.");

    m.def(
        "cholesky_solve",
        [](CRef L, CRef B, int n_threads) {
            return compute([&] { return cholesky_solve(L, B, n_threads); });
        },
        py::arg("L"), py::arg("B"), py::arg("n_threads") = 0, "X solving L L^T X = B.");
}

}  // namespace ccme::bindings
