"""kiln-synth writes loadable, deterministic models (read back with the PyPI `gguf` package)."""
import subprocess

import numpy as np
import pytest
from gguf import GGUFReader, quants


def synth(tool, testdata, out, *args):
    vocab = testdata / "vocab" / "ggml-vocab-llama-spm.gguf"
    res = subprocess.run([tool("kiln-synth"), "--vocab", str(vocab), "-o", str(out), *args],
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    return GGUFReader(str(out))


@pytest.mark.parametrize("arch", ["llama", "qwen2", "gemma3"])
def test_architectures(tool, testdata, tmp_path, arch):
    r = synth(tool, testdata, tmp_path / "m.gguf", "--arch", arch, "--type", "q8_0")
    f = {k: v.contents() for k, v in r.fields.items()}
    assert f["general.architecture"] == arch
    assert f[f"{arch}.block_count"] == 2 and f[f"{arch}.embedding_length"] == 256
    names = {t.name: t for t in r.tensors}
    assert len(f["tokenizer.ggml.tokens"]) == 32000
    assert names["token_embd.weight"].tensor_type.name == "Q8_0"
    assert names["blk.1.attn_norm.weight"].tensor_type.name == "F32"
    assert ("blk.0.attn_q.bias" in names) == (arch == "qwen2")
    assert ("blk.0.attn_q_norm.weight" in names) == (arch == "gemma3")
    assert ("output.weight" in names) == (arch != "gemma3")
    w = quants.dequantize(names["blk.0.ffn_up.weight"].data, names["blk.0.ffn_up.weight"].tensor_type)
    assert w.shape == (512, 256) and np.isfinite(w).all() and 0.05 < w.std() < 0.15  # uniform, sqrt(3/256) bound


def test_deterministic_and_seeded(tool, testdata, tmp_path):
    a = tmp_path / "a.gguf"; b = tmp_path / "b.gguf"; c = tmp_path / "c.gguf"
    synth(tool, testdata, a, "--seed", "7"); synth(tool, testdata, b, "--seed", "7"); synth(tool, testdata, c, "--seed", "8")
    assert a.read_bytes() == b.read_bytes()
    assert a.read_bytes() != c.read_bytes()


def test_quantized_types(tool, testdata, tmp_path):
    for t in ["q4_0", "q4_K", "q6_K", "bf16", "iq4_nl"]:
        r = synth(tool, testdata, tmp_path / f"{t}.gguf", "--type", t)
        up = next(x for x in r.tensors if x.name == "blk.0.ffn_up.weight")
        assert up.tensor_type.name.lower() == t.lower()


def test_bad_arguments(tool, testdata, tmp_path):
    vocab = testdata / "vocab" / "ggml-vocab-llama-spm.gguf"
    res = subprocess.run([tool("kiln-synth"), "--vocab", str(vocab), "-o", str(tmp_path / "x.gguf"), "--arch", "mamba"],
                         capture_output=True, text=True)
    assert res.returncode != 0 and "mamba" in res.stderr
