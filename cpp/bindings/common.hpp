// Shared by the binding files of ccme._core (and only by them).
//
// The bindings only convert, check what the headers cannot (buffer
// lifetimes), release the GIL and set the floating-point mode; the numerics
// live in cpp/include/ccme/*.hpp.  Every compiled call goes through
// compute(): no binding repeats that preamble, so none can forget it.
#pragma once

#include <pybind11/eigen.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <utility>

#include "ccme/parallel.hpp"

namespace ccme::bindings {

namespace py = pybind11;

// Run f() with the GIL released (other Python threads run meanwhile; the
// headers hold no global state) and denormals flushed to zero on this thread
// (parallel_for sets the same mode on the OpenMP workers).  f must not touch
// Python objects.  Its result is built before the GIL is taken back and
// converted to Python afterwards, by pybind11.
template <class F>
decltype(auto) compute(F&& f) {
    py::gil_scoped_release nogil;
    DenormalGuard ftz;
    return std::forward<F>(f)();
}

void register_kernels(py::module_& m);
void register_cholesky(py::module_& m);
void register_ridge(py::module_& m);
void register_tuning(py::module_& m);
void register_mmd(py::module_& m);

}  // namespace ccme::bindings
