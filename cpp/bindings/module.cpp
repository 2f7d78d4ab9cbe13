// ccme._core: the module, its constants and the exception mapping; the
// functions come from one register_*.cpp per area.
#include "common.hpp"

#include "ccme/errors.hpp"
#include "ccme/parallel.hpp"

namespace py = pybind11;
using namespace ccme;
using namespace ccme::bindings;

PYBIND11_MODULE(_core, m) {
    m.doc() = "ccme compiled core: kernels, tiled Cholesky and ridge CCME contractions "
              "(float64, OpenMP, deterministic across thread counts). Use ccme._backend.";

    // Exception mapping (ccme._backend turns these into ccme's errors):
    // ShapeError -> ShapeError(ValueError) -> DataError; other
    // std::invalid_argument -> ValueError (pybind11's default) -> ParameterError;
    // CholeskyError -> CholeskyError(ArithmeticError) -> NumericalError.
    // A translator registered here applies to every function of the module.
    py::register_exception<CholeskyError>(m, "CholeskyError", PyExc_ArithmeticError);
    py::register_exception<ShapeError>(m, "ShapeError", PyExc_ValueError);

    m.attr("has_openmp") = py::bool_(has_openmp());
    m.attr("CHOL_TILE") = py::int_(kCholTile);
    m.attr("BLOCK_DOUBLES") = py::int_(kBlockDoubles);
    m.def("max_threads", &max_threads, "Number of threads OpenMP uses by default.");

    register_kernels(m);
    register_cholesky(m);
    register_ridge(m);
    register_tuning(m);
    register_mmd(m);
}
