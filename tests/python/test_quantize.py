"""kiln-quantize, kiln-imatrix and kiln-perplexity --kl-divergence.

Independent checks:
- tensor types: an independent Python statement of llama.cpp's mix rules (llama-quant.cpp)
  predicts every tensor's type; files are read back with gguf-py (the reference reader), sizes
  follow from gguf-py's block table. The Gemma 3 270M file on disk was written by llama.cpp's
  Q4_K_M: re-planning it as Q4_K_M must keep every tensor's type (golden check of the rules).
- imatrix: the GGUF file is read with gguf-py; q/k/v of a layer share one input so their
  entries must agree; a legacy .dat written here with struct and a GGUF imatrix written with
  gguf-py holding the same means must quantize to identical bytes.
- KL-divergence of a model against itself is ~0 with 100% top-1 agreement.
"""
import functools
import re
import signal
import struct
import subprocess
import time

import gguf
import numpy as np
import pytest

GPL3 = "/usr/share/common-licenses/GPL-3"
GFDL = "/usr/share/common-licenses/GFDL-1.3"


@functools.lru_cache(maxsize=8)
def reader(path):
    """gguf-py readers are slow on 32000-token vocabularies (seconds): read each file once."""
    return gguf.GGUFReader(str(path))


def run(*args, timeout=300, **kw):
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=timeout, **kw)


@pytest.fixture(scope="module")
def f32_llama(tool, testdata, tmp_path_factory):
    """8-layer llama in F32, 4 heads sharing 1 KV head (GQA 4), rows of 256 (K-quant friendly)."""
    d = tmp_path_factory.mktemp("quant")
    path = d / "llama-f32.gguf"
    r = run(tool("kiln-synth"), "--arch", "llama", "--type", "f32", "--n-layer", "8", "--n-head", "4", "--n-head-kv", "1",
            "--vocab", testdata / "vocab" / "ggml-vocab-llama-spm.gguf", "-o", path, "--seed", "5")
    assert r.returncode == 0, r.stderr
    return str(path)


@pytest.fixture(scope="module")
def f32_gemma(tool, testdata, tmp_path_factory):
    """Gemma 3 (tied embeddings) with rows of 96: K-quant blocks do not fit, fallbacks apply."""
    d = tmp_path_factory.mktemp("quantg")
    path = d / "gemma-f32.gguf"
    r = run(tool("kiln-synth"), "--arch", "gemma3", "--type", "f32", "--n-layer", "4", "--n-embd", "96", "--n-ff", "192",
            "--n-head", "2", "--n-head-kv", "1", "--head-dim", "32",
            "--vocab", testdata / "vocab" / "ggml-vocab-llama-spm.gguf", "-o", path, "--seed", "6")
    assert r.returncode == 0, r.stderr
    return str(path)


# ---- an independent statement of llama.cpp's mix rules (non-MoE, non-Falcon models) ----

BASE = {"F32": "F32", "F16": "F16", "BF16": "BF16", "Q8_0": "Q8_0", "Q5_1": "Q5_1", "Q5_0": "Q5_0", "Q4_1": "Q4_1",
        "Q4_0": "Q4_0", "IQ4_NL": "IQ4_NL", "Q6_K": "Q6_K", "Q5_K_M": "Q5_K", "Q5_K_S": "Q5_K", "Q4_K_M": "Q4_K",
        "Q4_K_S": "Q4_K", "Q3_K_L": "Q3_K", "Q3_K_M": "Q3_K", "Q3_K_S": "Q3_K", "Q2_K": "Q2_K"}
FTYPE_ID = {"F32": 0, "F16": 1, "Q4_0": 2, "Q4_1": 3, "Q8_0": 7, "Q5_0": 8, "Q5_1": 9, "Q2_K": 10, "Q3_K_S": 11,
            "Q3_K_M": 12, "Q3_K_L": 13, "Q4_K_S": 14, "Q4_K_M": 15, "Q5_K_S": 16, "Q5_K_M": 17, "Q6_K": 18, "IQ4_NL": 25,
            "BF16": 32}
FALLBACK = {"Q2_K": "Q4_0", "Q3_K": "Q4_0", "Q4_K": "Q5_0", "Q5_K": "Q5_1", "Q6_K": "Q8_0"}


def block(t):
    return gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType[t]][0]


def more_bits(i, n):
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def expected_types(reader, mix, imatrix=False):
    """name -> expected type name, by llama.cpp's rules, visiting tensors in its order."""
    arch = reader.fields["general.architecture"].contents()
    n_layer = reader.fields[f"{arch}.block_count"].contents()
    n_head = reader.fields[f"{arch}.attention.head_count"].contents()
    kv = reader.fields.get(f"{arch}.attention.head_count_kv")
    gqa = n_head // (kv.contents() if kv else n_head)
    names = [t.name for t in reader.tensors]
    tied = "output.weight" not in names
    n_v = sum("attn_v.weight" in n for n in names)

    def key(t):
        m = re.match(r"blk\.(\d+)\.", t.name)
        return (int(m.group(1)) if m else -1, t.name)

    base = BASE[mix]
    quantized = base not in ("F32", "F16", "BF16")
    out, iv, idown = {}, 0, 0
    for t in sorted(reader.tensors, key=key):
        name, cols = t.name, int(t.shape[0])
        cur = t.tensor_type.name
        dims = [int(x) for x in t.shape]
        while len(dims) > 1 and dims[-1] == 1:
            dims.pop()
        if len(dims) < 2 or not name.endswith("weight") or "_norm.weight" in name:
            out[name] = cur
            continue
        typ = base
        if quantized:
            if name == "output.weight" or (tied and name == "token_embd.weight"):
                typ = "Q8_0" if cols % block(base) else (base if base == "Q8_0" else "Q6_K")
            elif "attn_v.weight" in name:
                if mix == "Q2_K": typ = "Q4_K" if gqa >= 4 else "Q3_K"
                elif mix == "Q3_K_M": typ = "Q5_K" if iv < 2 else "Q4_K"
                elif mix == "Q3_K_L": typ = "Q5_K"
                elif mix == "IQ4_NL" and gqa >= 4: typ = "Q5_K"
                elif mix in ("Q4_K_M", "Q5_K_M") and more_bits(iv, n_v): typ = "Q6_K"
                elif mix == "Q4_K_S" and iv < 4: typ = "Q5_K"
                iv += 1
            elif "ffn_down" in name:
                i = idown
                idown += 1
                if mix == "Q2_K": typ = "Q3_K"
                elif mix == "Q3_K_M": typ = "Q5_K" if i < n_layer // 16 else "Q4_K"
                elif mix == "Q3_K_L": typ = "Q5_K"
                elif mix == "Q4_K_M": typ = "Q6_K" if more_bits(i, n_layer) else base
                elif i < n_layer // 8 and mix == "IQ4_NL" and not imatrix: typ = "Q5_K"
                elif mix == "Q5_K_M" and more_bits(i, n_layer): typ = "Q6_K"
                elif mix == "Q4_K_S" and i < n_layer // 8: typ = "Q5_K"
                elif mix in ("Q4_0", "Q5_0") and imatrix and i < n_layer // 8:
                    typ = "Q4_1" if mix == "Q4_0" else "Q5_1"
            elif "attn_output.weight" in name:
                typ = {"Q2_K": "Q3_K", "Q3_K_M": "Q4_K", "Q3_K_L": "Q5_K"}.get(mix, base)
            if cols % block(typ):
                typ = FALLBACK.get(typ, "F16")
        out[name] = typ
    return out


def check_file(path, src, mix, imatrix=False, overrides=None):
    r = reader(path)
    s = reader(src)
    want = expected_types(s, mix, imatrix)
    want.update(overrides or {})
    got = {t.name: t.tensor_type.name for t in r.tensors}
    assert got == want
    # Metadata: copied, with the file type and quantization version set.
    assert r.fields["general.file_type"].contents() == FTYPE_ID[mix]
    assert r.fields["general.quantization_version"].contents() == 2
    for k, f in s.fields.items():
        if k.startswith("GGUF.") or k in ("general.file_type", "general.quantization_version"):
            continue
        assert k in r.fields, k
        # Byte-identical encoding (key, type, value); contents() is slow on 32000-entry vocabularies.
        raw = lambda fld: b"".join(np.asarray(x).tobytes() for x in fld.parts)  # noqa: E731
        assert raw(r.fields[k]) == raw(f), k
    # Sizes follow the block table; shapes are unchanged.
    shapes = {t.name: [int(x) for x in t.shape] for t in s.tensors}
    total = 0
    for t in r.tensors:
        assert [int(x) for x in t.shape] == shapes[t.name]
        bs, ts = gguf.GGML_QUANT_SIZES[t.tensor_type]
        assert int(t.n_bytes) == int(np.prod(t.shape)) // bs * ts
        total += int(t.n_bytes)
    return total


def quantize(tool, *args):
    return run(tool("kiln-quantize"), *args)


LINE_RE = re.compile(r"\]\s+(\S+)\s+- \[[^\]]*\], type =\s*(\S+), (?:converting to (\S+?)[ .(])?")


def planned_types(stdout):
    """name -> type from kiln-quantize's per-tensor lines."""
    out = {}
    for m in LINE_RE.finditer(stdout):
        out[m.group(1)] = (m.group(3) or m.group(2).rstrip(",")).upper()
    return out


def test_mix_types_written(tool, f32_llama, f32_gemma, tmp_path):
    """Written files (read back with gguf-py): types, metadata, sizes; they load and generate."""
    # The 32000-row embedding and output matrices get Q8_0 to keep the test fast (the mixes'
    # own choice for them is checked by test_mix_types_all_mixes).
    cheap = ["--token-embedding-type", "q8_0", "--output-tensor-type", "q8_0"]
    for src, mix, extra in ((f32_llama, "Q4_K_M", cheap), (f32_gemma, "Q3_K_M", [])):
        out = tmp_path / f"{mix}.gguf"
        r = quantize(tool, *extra, src, out, mix, 2)
        assert r.returncode == 0, r.stderr
        overrides = {"token_embd.weight": "Q8_0", "output.weight": "Q8_0"} if extra else None
        total = check_file(str(out), src, mix, overrides=overrides)
        m = re.search(r"quant size\s*=\s*([0-9.]+) MiB", r.stdout)
        assert abs(float(m.group(1)) - total / 2**20) < 0.01
        assert not (tmp_path / f"{mix}.gguf.tmp").exists()
        assert planned_types(r.stdout) == {t.name: t.tensor_type.name for t in reader(str(out)).tensors}
        if src == f32_gemma:
            assert "fallback" in r.stdout
        g = run(tool("kiln-cli"), "-m", out, "-p", "Hello", "-n", "4", "--temp", "0", "-t", "2", "-c", "64", "--ignore-eos")
        assert g.returncode == 0, g.stderr
        assert g.stdout.startswith("Hello") and len(g.stdout) > len("Hello")


@pytest.mark.parametrize("model", ["llama", "gemma"])
def test_mix_types_all_mixes(tool, f32_llama, f32_gemma, tmp_path, model):
    """Every mix's plan (--dry-run) against the independent rules, with and without an imatrix."""
    src = f32_llama if model == "llama" else f32_gemma
    rd = reader(src)
    im = tmp_path / "im.dat"
    write_legacy(im, {"blk.0.attn_q.weight": np.ones(int(rd.tensors[0].shape[0]), dtype=np.float32)})
    for mix in BASE:
        for imatrix in (False, True):
            if imatrix and mix not in ("Q4_0", "Q5_0", "IQ4_NL", "Q4_K_M"):
                continue
            args = ["--imatrix", im] if imatrix else []
            r = quantize(tool, "--dry-run", *args, src, tmp_path / "x.gguf", mix)
            assert r.returncode == 0, r.stderr
            assert planned_types(r.stdout) == expected_types(rd, mix, imatrix), (mix, imatrix)
    assert not (tmp_path / "x.gguf").exists()


def test_gemma_q4_k_m_plan_matches_llama_cpp(tool, gemma_path):
    """The default model was written by llama.cpp as Q4_K_M: our Q4_K_M plan keeps every type."""
    r = quantize(tool, "--dry-run", "--allow-requantize", gemma_path, "/nonexistent/out.gguf", "Q4_K_M")
    assert r.returncode == 0, r.stderr
    assert re.search(r"planned 236 tensors \(0 converted\)", r.stdout), r.stdout[-2000:]


def test_options(tool, f32_llama, tmp_path):
    out = tmp_path / "o.gguf"
    r = quantize(tool, "--pure", "--output-tensor-type", "q8_0", "--token-embedding-type", "f16", f32_llama, out, "Q4_K_M", 2)
    assert r.returncode == 0, r.stderr
    types = planned_types(r.stdout)  # equal to the written file's (test_mix_types_written)
    assert types["output.weight"] == "Q8_0" and types["token_embd.weight"] == "F16"
    assert {v for k, v in types.items() if k.startswith("blk.") and k.endswith("attn_v.weight")} == {"Q4_K"}
    assert {v for k, v in types.items() if "norm" in k} == {"F32"}
    r = quantize(tool, "--leave-output-tensor", "--token-embedding-type", "f16", f32_llama, out, "Q4_0", 2)
    assert r.returncode == 0, r.stderr
    assert planned_types(r.stdout)["output.weight"] == "F32"
    # Requantizing needs the flag, and the failed run leaves nothing.
    out2 = tmp_path / "re.gguf"
    r = quantize(tool, out, out2, "Q8_0")
    assert r.returncode == 1 and "requantiz" in r.stderr
    assert not out2.exists() and not (tmp_path / "re.gguf.tmp").exists()
    assert quantize(tool, "--allow-requantize", "--dry-run", out, out2, "Q8_0").returncode == 0


def test_dry_run_writes_nothing(tool, f32_gemma, tmp_path):
    out = tmp_path / "dry.gguf"
    r = quantize(tool, "--dry-run", f32_gemma, out, "Q4_K_M")
    assert r.returncode == 0, r.stderr
    assert not out.exists() and not list(tmp_path.iterdir())
    # The dry run reports what a real run writes (whose report test_mix_types_written checks).
    real = tmp_path / "real.gguf"
    w = quantize(tool, f32_gemma, real, "Q4_K_M", 2)
    assert w.returncode == 0 and real.exists()
    size = re.compile(r"quant size\s*=\s*([0-9.]+) MiB")
    assert size.search(r.stdout).group(1) == size.search(w.stdout).group(1)
    assert planned_types(r.stdout) == planned_types(w.stdout)


def test_interrupted_run_leaves_nothing(tool, f32_llama, tmp_path):
    out = tmp_path / "int.gguf"
    p = subprocess.Popen([tool("kiln-quantize"), f32_llama, str(out), "Q2_K", "1"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    tmp = tmp_path / "int.gguf.tmp"
    deadline = time.time() + 60
    while not tmp.exists() and p.poll() is None and time.time() < deadline:
        time.sleep(0.005)
    if p.poll() is not None:
        pytest.skip("quantization finished before it could be interrupted")
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=120)
    assert p.returncode == 1, err
    assert "interrupted" in err
    assert not out.exists() and not tmp.exists()


# ---- imatrix ----

@pytest.fixture(scope="module")
def imatrix_file(tool, f32_llama, tmp_path_factory):
    d = tmp_path_factory.mktemp("imat")
    path = d / "im.gguf"
    r = run(tool("kiln-imatrix"), "-m", f32_llama, "-f", GFDL, "-o", path, "-c", "64", "--chunks", "3", "-t", "2")
    assert r.returncode == 0, r.stderr
    assert re.search(r"\[3\][0-9.]+,", r.stdout) and "Final estimate: PPL" in r.stdout
    return str(path)


def read_imatrix(path):
    r = gguf.GGUFReader(path)
    t = {x.name: np.asarray(x.data, dtype=np.float64).reshape(-1) for x in r.tensors}
    return r, t


def test_imatrix_gguf_format(imatrix_file):
    r, t = read_imatrix(imatrix_file)
    assert r.fields["general.type"].contents() == "imatrix"
    assert r.fields["imatrix.chunk_count"].contents() == 3
    assert r.fields["imatrix.chunk_size"].contents() == 64
    assert r.fields["imatrix.datasets"].contents() == [GFDL]
    names = {n[: -len(".in_sum2")] for n in t if n.endswith(".in_sum2")}
    assert len(names) == 8 * 7  # q, k, v, output, gate, up, down per layer
    for n in names:
        assert t[n + ".counts"].tolist() == [3 * 64]
        mean = t[n + ".in_sum2"] / t[n + ".counts"][0]
        assert np.all(mean > 0) and np.all(np.isfinite(mean))
        # E[x^2] >= E[x]^2 per column
        m1 = t[n + ".in_sum"] / t[n + ".counts"][0]
        assert np.all(mean >= m1 * m1 * (1 - 1e-5))
    for il in range(8):
        q, k, v = (t[f"blk.{il}.attn_{x}.weight.in_sum2"] for x in "qkv")
        assert np.array_equal(q, k) and np.array_equal(q, v)  # one input, three matrices
        assert np.array_equal(t[f"blk.{il}.ffn_gate.weight.in_sum2"], t[f"blk.{il}.ffn_up.weight.in_sum2"])


def write_legacy(path, means, ncall=7):
    with open(path, "wb") as f:
        f.write(struct.pack("<i", len(means)))
        for name, v in means.items():
            f.write(struct.pack("<i", len(name)) + name.encode())
            f.write(struct.pack("<ii", ncall, len(v)))
            f.write((np.asarray(v, dtype=np.float32) * ncall).astype("<f4").tobytes())
        f.write(struct.pack("<i", ncall) + struct.pack("<i", 4) + b"text")


def write_gguf_imatrix(path, means):
    w = gguf.GGUFWriter(str(path), arch="imatrix")
    w.add_string("general.type", "imatrix")
    w.add_array("imatrix.datasets", ["text"])
    w.add_uint32("imatrix.chunk_count", 1)
    w.add_uint32("imatrix.chunk_size", 64)
    for name, v in means.items():
        w.add_tensor(name + ".in_sum2", (np.asarray(v, dtype=np.float32) * 10).reshape(1, -1))
        w.add_tensor(name + ".counts", np.array([[10.0]], dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def test_imatrix_readers_agree_and_matter(tool, f32_llama, imatrix_file, tmp_path):
    _, t = read_imatrix(imatrix_file)
    means = {n[: -len(".in_sum2")]: (t[n] / t[n[: -len(".in_sum2")] + ".counts"][0]).astype(np.float32)
             for n in t if n.endswith(".in_sum2")}
    # Means exactly representable after *10 and *7 scaling and division: powers of two.
    means = {k: np.exp2(np.round(np.log2(v))).astype(np.float32) for k, v in means.items()}
    dat, gg = tmp_path / "im.dat", tmp_path / "im2.gguf"
    write_legacy(dat, means)
    write_gguf_imatrix(gg, means)
    outs = {}
    for name, im in (("dat", dat), ("gguf", gg), ("none", None)):
        out = tmp_path / f"{name}.gguf"
        args = ["--imatrix", im] if im else []
        # The big embedding/output matrices are not what this checks: keep them cheap.
        r = quantize(tool, *args, "--token-embedding-type", "f16", "--output-tensor-type", "f16", f32_llama, out, "Q3_K_S", 2)
        assert r.returncode == 0, r.stderr
        outs[name] = out.read_bytes()
    assert outs["dat"] == outs["gguf"]
    assert outs["dat"] != outs["none"]
    # Our own legacy writer reads back to the same means.
    d2 = tmp_path / "kiln.dat"
    r = run(tool("kiln-imatrix"), "-m", f32_llama, "-f", GFDL, "-o", d2, "-c", "64", "--chunks", "3", "-t", "2",
            "--output-format", "dat")
    assert r.returncode == 0, r.stderr
    raw = d2.read_bytes()
    n = struct.unpack_from("<i", raw)[0]
    off, seen = 4, 0
    for _ in range(n):
        ln = struct.unpack_from("<i", raw, off)[0]
        name = raw[off + 4: off + 4 + ln].decode()
        ncall, nval = struct.unpack_from("<ii", raw, off + 4 + ln)
        vals = np.frombuffer(raw, dtype="<f4", count=nval, offset=off + 12 + ln)
        off += 12 + ln + 4 * nval
        want = t[name + ".in_sum2"] / t[name + ".counts"][0]
        np.testing.assert_allclose(vals / ncall, want, rtol=1e-5)
        seen += 1
    assert seen == len(means)


# ---- KL-divergence ----

def test_kl_divergence(tool, f32_llama, tmp_path):
    base = tmp_path / "base.kld"
    r = run(tool("kiln-perplexity"), "-m", f32_llama, "-f", GPL3, "-c", "64", "--chunks", "3", "-t", "2",
            "--kl-divergence-base", base)
    assert r.returncode == 0, r.stderr
    ppl = float(re.search(r"Final estimate: PPL = ([0-9.]+)", r.stdout).group(1))
    assert base.exists() and not (tmp_path / "base.kld.tmp").exists()
    same = run(tool("kiln-perplexity"), "-m", f32_llama, "-c", "64", "-t", "2", "--kl-divergence-base", base,
               "--kl-divergence")
    assert same.returncode == 0, same.stderr
    kld = float(re.search(r"Mean +KLD: +([0-9.eE+-]+)", same.stdout).group(1))
    top = float(re.search(r"Same top p: +([0-9.]+)", same.stdout).group(1))
    assert kld < 1e-5 and top == 100.0
    pb = float(re.search(r"Mean PPL\(base\) +: +([0-9.]+)", same.stdout).group(1))
    assert abs(pb - ppl) / ppl < 1e-3
    q = tmp_path / "q.gguf"
    assert quantize(tool, "--token-embedding-type", "f16", f32_llama, q, "Q2_K", 2).returncode == 0
    other = run(tool("kiln-perplexity"), "-m", q, "-c", "64", "-t", "2", "--kl-divergence-base", base, "--kl-divergence")
    assert other.returncode == 0, other.stderr
    kq = float(re.search(r"Mean +KLD: +([0-9.eE+-]+)", other.stdout).group(1))
    tq = float(re.search(r"Same top p: +([0-9.]+)", other.stdout).group(1))
    assert kq > 1e-4 and tq < 100.0
    # Without -f and without the base file flag it is an error.
    bad = run(tool("kiln-perplexity"), "-m", q, "-c", "64", "--kl-divergence")
    assert bad.returncode == 1
