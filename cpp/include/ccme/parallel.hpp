// ccme/parallel.hpp -- deterministic OpenMP helpers (no Python, no pybind11).
//
// Every parallel loop in ccme runs over a list of work items whose number and
// shapes depend only on the problem sizes, never on the number of threads, and
// every item writes to its own part of the output.  Floating-point results are
// therefore bit-identical whatever the thread count.  Eigen is compiled with
// EIGEN_DONT_PARALLELIZE so that the products inside an item are serial.
#pragma once

#ifndef EIGEN_DONT_PARALLELIZE
#define EIGEN_DONT_PARALLELIZE
#endif

#include <Eigen/Dense>

#include "ccme/errors.hpp"

#include <algorithm>
#include <cstdint>
#include <exception>
#include <mutex>
#include <stdexcept>
#include <string>

#ifdef _OPENMP
#include <omp.h>
#endif

#if defined(__SSE__) || defined(_M_X64) || (defined(_M_IX86_FP) && _M_IX86_FP >= 1)
#include <xmmintrin.h>
#define CCME_HAVE_MXCSR 1
#endif

namespace ccme {

using Index = Eigen::Index;
using MatrixRM = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using CRef = Eigen::Ref<const MatrixRM>;
using MRef = Eigen::Ref<MatrixRM>;
using CVRef = Eigen::Ref<const Eigen::VectorXd>;

// Fixed block sizes (they define the arithmetic, so they must not depend on the
// number of threads).
constexpr Index kCholTile = 256;       // tile of the blocked Cholesky / Gram fill
constexpr Index kSolveChunk = 128;     // column chunk of triangular solves
constexpr Index kRowTile = 256;        // row tile for kernel blocks in contractions
constexpr Index kGramRowTile = 64;     // tiles of gram()/atom_features()
constexpr Index kGramColTile = 1024;
constexpr Index kBlockDoubles = Index(1) << 23;  // 64 MiB: largest block held at once

inline bool has_openmp() {
#ifdef _OPENMP
    return true;
#else
    return false;
#endif
}

inline int max_threads() {
#ifdef _OPENMP
    return omp_get_max_threads();
#else
    return 1;
#endif
}

// n_threads = 0 means OpenMP's default.
inline int resolve_threads(int n_threads) {
    if (n_threads < 0)
        throw std::invalid_argument("n_threads must be >= 0 (0 means OpenMP's default), got " +
                                    std::to_string(n_threads));
    if (!has_openmp()) return 1;
    return n_threads == 0 ? max_threads() : n_threads;
}

inline Index ceil_div(Index a, Index b) { return (a + b - 1) / b; }

// Flush denormals to zero (FTZ + DAZ) on the current thread while alive, and
// restore the caller's floating-point mode afterwards.  Gaussian kernel values
// underflow to subnormal numbers far from the data, and subnormal arithmetic
// is 10-100x slower; values below 2.2e-308 do not matter to any result.
class DenormalGuard {
   public:
#ifdef CCME_HAVE_MXCSR
    DenormalGuard() : saved_(_mm_getcsr()) { _mm_setcsr(saved_ | 0x8040u); }
    ~DenormalGuard() { _mm_setcsr(saved_); }

   private:
    unsigned int saved_;
#else
    DenormalGuard() {}
#endif
    DenormalGuard(const DenormalGuard&) = delete;
    DenormalGuard& operator=(const DenormalGuard&) = delete;
};

// Run f(0), ..., f(n_items-1) with a static schedule.  Items must be
// independent.  Exceptions thrown by an item are re-thrown after the loop.
template <class F>
void parallel_for(Index n_items, int n_threads, F&& f) {
    if (n_items <= 0) return;
    int nt = static_cast<int>(std::min<Index>(std::max(n_threads, 1), n_items));
#ifdef _OPENMP
    if (nt > 1 && !omp_in_parallel()) {
        std::exception_ptr err = nullptr;
        std::mutex mu;
#pragma omp parallel num_threads(nt)
        {
            DenormalGuard ftz;
#pragma omp for schedule(static)
            for (Index i = 0; i < n_items; ++i) {
                try {
                    f(i);
                } catch (...) {
                    std::lock_guard<std::mutex> lock(mu);
                    if (!err) err = std::current_exception();
                }
            }
        }
        if (err) std::rethrow_exception(err);
        return;
    }
#endif
    (void)nt;
    DenormalGuard ftz;
    for (Index i = 0; i < n_items; ++i) f(i);
}

}  // namespace ccme
