"""Type stubs of the compiled core ``ccme._core`` (use :mod:`ccme._backend` instead)."""

import numpy as np
import numpy.typing as npt

_F = npt.NDArray[np.float64]
_ArrayLike = npt.ArrayLike

has_openmp: bool
CHOL_TILE: int
BLOCK_DOUBLES: int

class CholeskyError(ArithmeticError): ...
class ShapeError(ValueError): ...

def max_threads() -> int: ...
def gram(
    A: _ArrayLike, B: _ArrayLike, kernel: str, bandwidth: _ArrayLike, normalized: bool = False, n_threads: int = 0
) -> _F: ...
def atom_features(
    atoms: _ArrayLike, points: _ArrayLike, feature: str, kernel: str, bandwidth: _ArrayLike, n_threads: int = 0
) -> _F: ...
def cholesky(A: _ArrayLike, shift: float = 0.0, n_threads: int = 0) -> tuple[_F, float]: ...
def kernel_ridge_factor(
    X: _ArrayLike, kernel: str, bandwidth: _ArrayLike, shift: float, n_threads: int = 0
) -> tuple[_F, float]: ...
def cholesky_solve(L: _ArrayLike, B: _ArrayLike, n_threads: int = 0) -> _F: ...
class RidgeArm:
    """A fitted ridge CCME fold-arm set up once; L_V and L_X0 are referenced (C-ordered float64 only)."""

    def __init__(
        self,
        L_V: _F,
        V1: _ArrayLike,
        v_kernel: str,
        v_bandwidth: _ArrayLike,
        a: _ArrayLike,
        Y1: _ArrayLike,
        b: _ArrayLike,
        X1: _ArrayLike,
        L_X0: _F,
        X0: _ArrayLike,
        Y0: _ArrayLike,
        x_kernel: str,
        x_bandwidth: _ArrayLike,
    ) -> None: ...
    @property
    def n(self) -> int: ...
    @property
    def m(self) -> int: ...
    @property
    def dv(self) -> int: ...
    @property
    def dy(self) -> int: ...
    @property
    def uses_a(self) -> bool: ...
    @property
    def uses_b(self) -> bool: ...
    def contract(
        self,
        V_eval: _ArrayLike,
        points: _ArrayLike,
        feature: str,
        y_kernel: str,
        y_bandwidth: _ArrayLike,
        out: _F,
        scale: float,
        n_threads: int = 0,
        order: str = "auto",
    ) -> None: ...
    def weights(self, V_eval: _ArrayLike, n_threads: int = 0) -> tuple[_F, _F]: ...
    def beta(self, V_eval: _ArrayLike, n_threads: int = 0) -> _F: ...

def pivoted_cholesky(
    X: _ArrayLike, kernel: str, bandwidth: _ArrayLike, tol: float, max_rank: int, n_threads: int = 0
) -> tuple[_F, list[int], float]: ...
def krr_loo_path(
    Q: _ArrayLike, s2: _ArrayLike, Z: _ArrayLike, lambdas: _ArrayLike, n_threads: int = 0
) -> tuple[_F, _F, _F]: ...
def kernel_quadratic_forms(
    Z: _ArrayLike, W: _ArrayLike, kernel: str, bandwidth: _ArrayLike, normalized: bool = True, n_threads: int = 0
) -> _F: ...
