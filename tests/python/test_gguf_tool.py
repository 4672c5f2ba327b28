"""kiln-gguf against the independent reader of the PyPI `gguf` package."""
import re
import subprocess

import numpy as np
import pytest
from gguf import GGUFReader, quants


def gguf_files(testdata):
    return sorted(testdata.glob("*/*.gguf"))


def run(*args):
    return subprocess.run(args, capture_output=True, text=True, timeout=300)


def test_info_lists_every_tensor_and_key(tool, testdata):
    files = gguf_files(testdata)
    assert files, "no GGUF files in the test data"
    for path in files:
        res = run(tool("kiln-gguf"), "info", str(path))
        assert res.returncode == 0, f"{path}: {res.stderr}"
        ref = GGUFReader(str(path))
        for key in ref.fields:
            if key.startswith("GGUF."):
                continue
            assert key in res.stdout, f"{path.name}: key {key} missing from kiln-gguf info"
        for t in ref.tensors:
            m = re.search(rf"^\s*\d+\s+{re.escape(t.name)}\s+(\S+)\s", res.stdout, re.M)
            assert m, f"{path.name}: tensor {t.name} missing from the tensor table"
            assert m.group(1).lower() == t.tensor_type.name.lower(), f"{t.name}: type {m.group(1)}"


def test_dequant_matches_gguf_py(tool, testdata, tmp_path):
    path = testdata / "quant" / "quant-reference.gguf"
    ref = GGUFReader(str(path))
    for t in ref.tensors:
        out = tmp_path / (t.name + ".f32")
        res = run(tool("kiln-gguf"), "dequant", str(path), t.name, str(out))
        assert res.returncode == 0, f"{t.name}: {res.stderr}"
        ours = np.fromfile(out, dtype="<f4")
        theirs = quants.dequantize(t.data, t.tensor_type).astype(np.float32).reshape(-1)
        assert ours.shape == theirs.shape, t.name
        assert np.array_equal(ours.view(np.uint32), theirs.view(np.uint32)), f"{t.name}: values differ"


def test_errors_are_clear(tool, tmp_path):
    bad = tmp_path / "not-a-model.gguf"
    bad.write_bytes(b"GGML" + b"\0" * 60)
    res = run(tool("kiln-gguf"), "info", str(bad))
    assert res.returncode != 0
    assert "not-a-model.gguf" in res.stderr and "magic" in res.stderr.lower()
    res = run(tool("kiln-gguf"), "info", str(tmp_path / "missing.gguf"))
    assert res.returncode != 0 and "missing.gguf" in res.stderr
