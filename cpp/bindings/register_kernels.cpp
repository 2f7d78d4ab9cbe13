// Kernels: Gram matrices and atom features (ccme/kernels.hpp).
#include "common.hpp"

#include "ccme/kernels.hpp"

namespace ccme::bindings {

void register_kernels(py::module_& m) {
    m.def(
        "gram",
        [](CRef A, CRef B, const std::string& kernel, CVRef bandwidth, bool normalized,
           int n_threads) {
            return compute([&] { return gram(A, B, kernel, bandwidth, normalized, n_threads); });
        },
        py::arg("A"), py::arg("B"), py::arg("kernel"), py::arg("bandwidth"),
        py::arg("normalized") = false, py::arg("n_threads") = 0,
        "Gram matrix k(A_i, B_j), shape (nA, nB).");

    m.def(
        "atom_features",
        [](CRef atoms, CRef points, const std::string& feature, const std::string& kernel,
           CVRef bandwidth, int n_threads) {
            return compute([&] {
                return atom_features(atoms, points, feature, kernel, bandwidth, n_threads);
            });
        },
        py::arg("atoms"), py::arg("points"), py::arg("feature"), py::arg("kernel"),
        py::arg("bandwidth"), py::arg("n_threads") = 0,
        "Features of the atoms at the points: 'density', 'cdf' or 'moments'.");
}

}  // namespace ccme::bindings
