// The ridge CCME of one fitted fold-arm as a bound object (ccme/ridge.hpp).
//
// RidgeArm references its Cholesky factors instead of copying them (they are
// n x n).  The binding makes that safe: L_V and L_X0 are taken with
// noconvert(), so pybind11 maps the caller's numpy buffer (float64, rows
// contiguous) or refuses with a TypeError, never hands over a temporary
// converted copy; and keep_alive ties those arrays' lifetime to the object's.
#include "common.hpp"

#include "ccme/ridge.hpp"

#include <memory>

namespace ccme::bindings {

void register_ridge(py::module_& m) {
    py::class_<RidgeArm>(
        m, "RidgeArm",
        "A fitted ridge CCME of one fold and one arm, set up once (inputs checked, V1, X1, X0 "
        "pre-scaled); see ccme._backend.RidgeArmCore.  L_V and L_X0 must be C-ordered float64 "
        "arrays: they are referenced, not copied.")
        .def(py::init([](CRef L_V, CRef V1, const std::string& v_kernel, CVRef v_bandwidth,
                         CVRef a, CRef Y1, CVRef b, CRef X1, CRef L_X0, CRef X0, CRef Y0,
                         const std::string& x_kernel, CVRef x_bandwidth) {
                 return compute([&] {
                     return std::make_unique<RidgeArm>(L_V, V1, v_kernel, v_bandwidth, a, Y1, b,
                                                       X1, L_X0, X0, Y0, x_kernel, x_bandwidth);
                 });
             }),
             py::arg("L_V").noconvert(), py::arg("V1"), py::arg("v_kernel"),
             py::arg("v_bandwidth"), py::arg("a"), py::arg("Y1"), py::arg("b"), py::arg("X1"),
             py::arg("L_X0").noconvert(), py::arg("X0"), py::arg("Y0"), py::arg("x_kernel"),
             py::arg("x_bandwidth"),
             // self is argument 1 of a constructor; L_V is 2 and L_X0 is 10.
             py::keep_alive<1, 2>(), py::keep_alive<1, 10>())
        .def_property_readonly("n", &RidgeArm::n, "Second-stage units (rows of L_V).")
        .def_property_readonly("m", &RidgeArm::m, "First-stage units (rows of L_X0).")
        .def_property_readonly("dv", &RidgeArm::dv, "Columns of V1.")
        .def_property_readonly("dy", &RidgeArm::dy, "Columns of the outcomes.")
        .def_property_readonly("uses_a", &RidgeArm::uses_a, "Whether a is not all zero.")
        .def_property_readonly("uses_b", &RidgeArm::uses_b,
                               "Whether the first-stage term is present (b not all zero, m > 0).")
        .def(
            "contract",
            [](const RidgeArm& self, CRef V_eval, CRef points, const std::string& feature,
               const std::string& y_kernel, CVRef y_bandwidth, MRef out, double scale,
               int n_threads, const std::string& order) {
                compute([&] {
                    self.contract(V_eval, points, feature, y_kernel, y_bandwidth, out, scale,
                                  n_threads, order);
                });
            },
            py::arg("V_eval"), py::arg("points"), py::arg("feature"), py::arg("y_kernel"),
            py::arg("y_bandwidth"), py::arg("out").noconvert(), py::arg("scale"),
            py::arg("n_threads") = 0, py::arg("order") = "auto",
            "out += scale * result (in place); see ccme._backend.RidgeArmCore.contract.")
        .def(
            "weights",
            [](const RidgeArm& self, CRef V_eval, int n_threads) {
                return compute([&] { return self.weights(V_eval, n_threads); });
            },
            py::arg("V_eval"), py::arg("n_threads") = 0,
            "(c1 (n, ne), c0 (m, ne)): embedding weights on the atoms Y1 and Y0.")
        .def(
            "beta",
            [](const RidgeArm& self, CRef V_eval, int n_threads) {
                return compute([&] { return self.beta(V_eval, n_threads); });
            },
            py::arg("V_eval"), py::arg("n_threads") = 0,
            "beta (n, ne) = (L_V L_V^T)^{-1} k_V(V1, V_eval).");
}

}  // namespace ccme::bindings
