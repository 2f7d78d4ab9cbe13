// MMD between embeddings: kernel quadratic forms (ccme/mmd.hpp).
#include "common.hpp"

#include "ccme/mmd.hpp"

namespace ccme::bindings {

void register_mmd(py::module_& m) {
    m.def(
        "kernel_quadratic_forms",
        [](CRef Z, CRef W, const std::string& kernel, CVRef bandwidth, bool normalized,
           int n_threads) {
            return compute([&] {
                return kernel_quadratic_forms(Z, W, kernel, bandwidth, normalized, n_threads);
            });
        },
        py::arg("Z"), py::arg("W"), py::arg("kernel"), py::arg("bandwidth"),
        py::arg("normalized") = true, py::arg("n_threads") = 0,
        "q[e] = W[:, e]^T k(Z, Z) W[:, e] without forming k(Z, Z) (MMD between embeddings).");
}

}  // namespace ccme::bindings
