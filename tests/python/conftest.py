"""Shared fixtures: where the built library and tools are, and the test data."""
import ctypes
import os
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def build_dir() -> pathlib.Path:
    return pathlib.Path(os.environ.get("KILN_BUILD_DIR", ROOT / "build" / "release"))


def testdata_dir() -> pathlib.Path:
    return pathlib.Path(os.environ.get("KILN_TESTDATA_DIR", ROOT.parent / "shared" / "testdata"))


@pytest.fixture(scope="session")
def testdata() -> pathlib.Path:
    d = testdata_dir()
    if not d.is_dir():
        pytest.fail(f"test data folder {d} is missing (set KILN_TESTDATA_DIR)")
    return d


@pytest.fixture(scope="session")
def tool():
    def path(name: str) -> str:
        p = build_dir() / "tools" / name
        if not p.exists():
            pytest.fail(f"{p} is not built (set KILN_BUILD_DIR)")
        return str(p)
    return path


@pytest.fixture(scope="session")
def libkiln():
    candidates = sorted((build_dir() / "src").glob("libkiln.so*"))
    if not candidates:
        pytest.fail(f"libkiln.so not found under {build_dir() / 'src'}: build with BUILD_SHARED_LIBS=ON")
    lib = ctypes.CDLL(str(candidates[0]))
    lib.kiln_quantize.restype = ctypes.c_size_t
    lib.kiln_quantize.argtypes = [ctypes.c_int32, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64,
                                  ctypes.c_void_p]
    lib.kiln_dequantize.restype = ctypes.c_int
    lib.kiln_dequantize.argtypes = [ctypes.c_int32, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
    lib.kiln_row_size.restype = ctypes.c_size_t
    lib.kiln_row_size.argtypes = [ctypes.c_int32, ctypes.c_int64]
    lib.kiln_last_error.restype = ctypes.c_char_p
    return lib
