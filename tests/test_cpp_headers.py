"""The C++ headers on their own: build and run cpp/tests/test_core.cpp.

The executable checks the Gram matrices (every kernel, ARD and infinite
bandwidths), Cholesky with the jitter retry, the solves and the ridge
contraction and weights against naive loops, and bit-identity across thread
counts (see the file's header).  It is built with CMake from the project's
CMakeLists.txt with ``CCME_BUILD_MODULE=OFF`` and ``CCME_BUILD_TESTS=ON``, at
``-O1`` with assertions on (Eigen then checks every block's bounds), into a
temporary folder; set ``CCME_CPP_BUILD_DIR`` to a folder to keep the build
between runs (then only changed headers recompile).

Skipped, saying why, only when the tools are missing: no ``cmake``, no C++
compiler, or no Eigen 3.4 (the PyPI package ``cmeel-eigen``, or a system one).
"""

from __future__ import annotations

import os
import shutil
import site
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "cpp" / "tests" / "test_core.cpp"


def _cmake() -> str | None:
    found = shutil.which("cmake")
    if found:
        return found
    try:  # the PyPI package puts its binary beside its module
        import cmake

        candidate = Path(cmake.CMAKE_BIN_DIR) / "cmake"
        return str(candidate) if candidate.exists() else None
    except (ImportError, AttributeError):
        return None


def _ninja() -> str | None:
    found = shutil.which("ninja")
    if found:
        return found
    try:
        import ninja

        candidate = Path(ninja.BIN_DIR) / "ninja"
        return str(candidate) if candidate.exists() else None
    except (ImportError, AttributeError):
        return None


def _compiler() -> str | None:
    names = [os.environ["CXX"]] if os.environ.get("CXX") else ["c++", "g++", "clang++"]
    return next((shutil.which(name) for name in names if shutil.which(name)), None)


def _has_eigen() -> bool:
    """cmeel-eigen in a site-packages folder (what CMakeLists.txt looks for), or a system Eigen."""
    folders = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"], *site.getsitepackages(), *sys.path}
    if any((Path(p) / "cmeel.prefix" / "include" / "eigen3" / "Eigen").is_dir() for p in folders if p):
        return True
    return any(Path(p).is_dir() for p in ("/usr/include/eigen3/Eigen", "/usr/local/include/eigen3/Eigen",
                                          "/opt/homebrew/include/eigen3/Eigen"))


def _run(cmd, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kwargs)


@pytest.fixture(scope="module")
def test_executable(tmp_path_factory) -> Path:
    if not SOURCE.exists():
        pytest.skip(f"the C++ sources are not here ({SOURCE} is missing: an installed copy of the tests?)")
    cmake = _cmake()
    if cmake is None:
        pytest.skip("cmake is not installed (pip install cmake)")
    if _compiler() is None:
        pytest.skip("no C++ compiler found (c++, g++, clang++ or $CXX)")
    if not _has_eigen():
        pytest.skip("Eigen 3.4 is not installed (pip install cmeel-eigen)")
    build = Path(os.environ["CCME_CPP_BUILD_DIR"]) if os.environ.get("CCME_CPP_BUILD_DIR") \
        else tmp_path_factory.mktemp("cpp-build")
    configure = [
        cmake, "-S", str(ROOT), "-B", str(build),
        "-DCCME_BUILD_MODULE=OFF", "-DCCME_BUILD_TESTS=ON",
        # A check of the arithmetic, not of speed: -O1 compiles fast, and without NDEBUG
        # Eigen's assertions check every block's bounds.
        "-DCMAKE_BUILD_TYPE=Release", "-DCMAKE_CXX_FLAGS_RELEASE=-O1",
        f"-DPython_EXECUTABLE={sys.executable}",
    ]
    ninja = _ninja()
    if ninja is not None and not (build / "CMakeCache.txt").exists():
        configure += ["-G", "Ninja", f"-DCMAKE_MAKE_PROGRAM={ninja}"]
    start = time.perf_counter()
    done = _run(configure, timeout=300)
    assert done.returncode == 0, f"cmake configure failed:\n{done.stdout}"
    done = _run([cmake, "--build", str(build), "--target", "ccme_test_core"], timeout=600)
    assert done.returncode == 0, f"building ccme_test_core failed:\n{done.stdout}"
    print(f"ccme_test_core configured and built in {time.perf_counter() - start:.1f} s")
    exe = build / ("ccme_test_core.exe" if os.name == "nt" else "ccme_test_core")
    assert exe.exists(), f"{exe} was not built"
    return exe


def test_headers_against_naive_loops(test_executable):
    """Every check of cpp/tests/test_core.cpp passes (its output is shown on failure)."""
    env = dict(os.environ, OMP_NUM_THREADS="2")
    done = _run([str(test_executable)], timeout=300, env=env)
    assert done.returncode == 0, f"ccme_test_core failed (exit {done.returncode}):\n{done.stdout}"
    assert "0 of " in done.stdout.splitlines()[-1]
