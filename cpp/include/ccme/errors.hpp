// ccme/errors.hpp -- the exceptions the core throws (no Python, no pybind11).
//
// The bindings map them to Python exceptions, and ccme._backend maps those to
// ccme's documented errors:
//   ShapeError              -> _core.ShapeError (a ValueError)  -> DataError
//   std::invalid_argument   -> ValueError                       -> ParameterError
//   CholeskyError           -> _core.CholeskyError (ArithmeticError) -> NumericalError
// A shape or size mismatch between arrays is a problem of the data; a bad
// name, bandwidth, penalty or thread count is a problem of a parameter, so the
// two need distinct types for the mapping to follow the documented table.
#pragma once

#include <stdexcept>
#include <string>

namespace ccme {

// Arrays whose shapes do not fit together (rows, columns, lengths).
struct ShapeError : std::invalid_argument {
    using std::invalid_argument::invalid_argument;
};

// A matrix that is not positive definite even after the jitter rule.
struct CholeskyError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

}  // namespace ccme
