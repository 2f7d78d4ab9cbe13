// Tuning: pivoted Cholesky and the LOO / GCV path (ccme/tuning.hpp).
#include "common.hpp"

#include "ccme/tuning.hpp"

#include <tuple>

namespace ccme::bindings {

void register_tuning(py::module_& m) {
    m.def(
        "pivoted_cholesky",
        [](CRef X, const std::string& kernel, CVRef bandwidth, double tol, Index max_rank,
           int n_threads) {
            return compute([&] {
                PivotedCholesky pc = pivoted_cholesky(X, kernel, bandwidth, tol, max_rank, n_threads);
                return std::make_tuple(std::move(pc.L), std::move(pc.pivots), pc.residual);
            });
        },
        py::arg("X"), py::arg("kernel"), py::arg("bandwidth"), py::arg("tol"),
        py::arg("max_rank"), py::arg("n_threads") = 0,
        "(L (n, r), pivots, residual): pivoted Cholesky k(X, X) ~ L L^T.");

    m.def(
        "krr_loo_path",
        [](CRef Q, CVRef s2, CRef Z, CVRef lambdas, int n_threads) {
            return compute([&] {
                LooPath path = krr_loo_path(Q, s2, Z, lambdas, n_threads);
                return std::make_tuple(std::move(path.loo), std::move(path.gcv),
                                       std::move(path.dof));
            });
        },
        py::arg("Q"), py::arg("s2"), py::arg("Z"), py::arg("lambdas"), py::arg("n_threads") = 0,
        "(loo, gcv, dof) of ridge regression of Z on K ~ Q diag(s2) Q^T along the penalties.");
}

}  // namespace ccme::bindings
