#!/usr/bin/env python3
"""Independent float64 reference forward pass for GGUF models (numpy only).

This is the ground truth kiln's engine is tested against. It reads a GGUF file with the PyPI
`gguf` package, dequantizes every weight (the dequantized values are exact in float64) and runs
the transformer in float64, following llama.cpp's conventions for the architectures `llama`,
`qwen2` and `gemma3`. Positions are 0..n_tokens-1 (one sequence, empty cache).

Conventions (checked against llama.cpp; see the notes by each function):
  * RMSNorm: x / sqrt(mean(x^2) + eps) * w, eps = {arch}.attention.layer_norm_rms_epsilon.
  * RoPE: theta_i = pos * freq_scale * base^(-2i/n_rot) (divided by rope_freqs[i] when a llama
    model has `rope_freqs.weight`); `llama` rotates adjacent pairs (2i, 2i+1) ("normal" mode),
    `qwen2` and `gemma3` rotate (i, i + n_rot/2) ("NeoX" mode). Dimensions >= n_rot pass through.
    freq_scale = 1/rope.scaling.factor for linear scaling (1 for none); yarn/longrope unsupported.
  * llama/qwen2: pre-norm blocks, SiLU-gated FFN, attention scale 1/sqrt(head_dim), GQA head h
    reads KV head h // (n_head / n_head_kv); qwen2 adds the Q/K/V biases.
  * gemma3: embeddings * sqrt(n_embd); per-head RMSNorm of Q and K before RoPE; Q scaled by
    1/sqrt(head_dim) (27B, 62 layers: 1/sqrt(n_embd/n_head)); attention output and FFN output
    each RMS-normed (post_attention_norm / post_ffw_norm) before their residual adds; gated GELU
    (tanh approximation). Sliding-window layers: layer il is local when il % P < P - 1 with
    P = attention.sliding_window_pattern (default 6); a local query at position i sees keys j
    with i - j < sliding_window; local layers use RoPE base rope.freq_base_swa (default 10000)
    and no frequency scaling, global layers use rope.freq_base and the model's scaling. The
    GGUF norm weights already include Gemma's +1 (the converter adds it), so they are used as is.
    Final logit soft-capping only when {arch}.final_logit_softcapping is in the metadata.
  * output.weight absent -> tied to token_embd.weight.

Validated against llama.cpp itself (llama-cpp-python 0.3.36, F32 KV cache, no flash attention):
tiny random llama/qwen2 models agree to float32 rounding (KL ~1e-11); gemma3 models (sliding
window 4, 7 layers) to KL ~4e-6, the remainder being ggml's CPU GELU, which reads an fp16 table
(this module uses the exact tanh formula); Gemma 3 270M with its weights dequantized to F32 agrees
to mean KL 7e-7 over 160 tokens. With the Q4_K_M file itself llama.cpp differs from this
reference by mean KL ~6e-3..9e-3 because its quantized dot products round the activations to 8 bits.

Usage from tests:
    from reference_model import ReferenceModel
    ref = ReferenceModel(path)              # opens the file; weights are dequantized lazily, cached
    logits = ref.logits([2, 651, 6037])     # np.ndarray float64, shape [n_tokens, n_vocab]
    ids = ref.greedy([2, 651], 16)          # 16 greedily generated token ids
    text = ref.detokenize(ids)
    kl = kl_divergence(logits, engine_logits)   # per position; also top1_agreement(...)

CLI:
    python reference_model.py MODEL --tokens 2,651,6037 [--greedy 16] [--out logits.npy]
    python reference_model.py MODEL --pieces '<bos>,The,▁capital' --greedy 16
"""
from __future__ import annotations

import argparse
import ctypes
import math
import os
import sys
import time
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
from gguf import GGUFReader, quants

SUPPORTED_ARCHS = ("llama", "qwen2", "gemma3")

# llama.cpp's llama_model_rope_type(): LLM_ARCH_LLAMA -> LLAMA_ROPE_TYPE_NORM,
# LLM_ARCH_QWEN2 / LLM_ARCH_GEMMA3 -> LLAMA_ROPE_TYPE_NEOX.
ROPE_MODE = {"llama": "norm", "qwen2": "neox", "gemma3": "neox"}


@dataclass
class HParams:
    arch: str
    n_vocab: int
    n_embd: int
    n_layer: int
    n_ff: int
    n_head: int
    n_head_kv: list[int]
    head_dim_k: int
    head_dim_v: int
    n_rot: int
    eps: float
    rope_mode: str
    rope_base: float
    rope_scale: float                # freq_scale multiplying positions (1 / linear factor)
    rope_base_swa: float
    rope_scale_swa: float
    n_swa: int                       # 0: no sliding window
    swa_layers: list[bool] = field(default_factory=list)
    attn_scale: float = 1.0          # multiplies q.k
    embd_scale: float = 1.0          # multiplies token embeddings
    final_softcap: float = 0.0       # 0: none
    n_ctx_train: int = 0


def _rms_norm(x: np.ndarray, w: np.ndarray | None, eps: float) -> np.ndarray:
    """RMSNorm over the last axis (llama.cpp: ggml_rms_norm then ggml_mul by the weight)."""
    y = x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)
    return y * w if w is not None else y


def _silu(x: np.ndarray) -> np.ndarray:
    return x / (1.0 + np.exp(-x))


def _gelu_tanh(x: np.ndarray) -> np.ndarray:
    """ggml_gelu: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))."""
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x * x * x)))


def rope(x: np.ndarray, pos: np.ndarray, n_rot: int, base: float, freq_scale: float = 1.0,
         mode: str = "norm", freq_factors: np.ndarray | None = None) -> np.ndarray:
    """Rotary embedding of x [n_tokens, n_heads, head_dim] at positions pos [n_tokens].

    ggml_rope_ext without YaRN (ext_factor 0, attn_factor 1): for pair i < n_rot/2,
    theta = pos * freq_scale * base^(-2i/n_rot) / freq_factors[i]; "norm" pairs (2i, 2i+1),
    "neox" pairs (i, i + n_rot/2); dimensions >= n_rot are copied.
    """
    assert n_rot % 2 == 0 and n_rot <= x.shape[-1]
    half = n_rot // 2
    inv = base ** (-2.0 * np.arange(half, dtype=np.float64) / n_rot)
    if freq_factors is not None:
        inv = inv / np.asarray(freq_factors, dtype=np.float64)[:half]
    theta = (np.asarray(pos, dtype=np.float64) * freq_scale)[:, None] * inv[None, :]  # [T, half]
    cos = np.cos(theta)[:, None, :]
    sin = np.sin(theta)[:, None, :]
    out = np.array(x, dtype=np.float64, copy=True)
    if mode == "norm":
        x0 = x[..., 0:n_rot:2]
        x1 = x[..., 1:n_rot:2]
        out[..., 0:n_rot:2] = x0 * cos - x1 * sin
        out[..., 1:n_rot:2] = x0 * sin + x1 * cos
    elif mode == "neox":
        x0 = x[..., :half]
        x1 = x[..., half:n_rot]
        out[..., :half] = x0 * cos - x1 * sin
        out[..., half:n_rot] = x0 * sin + x1 * cos
    else:
        raise ValueError(f"unknown rope mode {mode!r}")
    return out


def attention_mask(n_tokens: int, n_swa: int = 0) -> np.ndarray:
    """Boolean [n_q, n_k], True where the key is visible: causal, and with a sliding window of
    n_swa tokens also i - j < n_swa (llama.cpp is_masked_swa, LLAMA_SWA_TYPE_STANDARD: a key is
    masked when p_query - p_key >= n_swa)."""
    i = np.arange(n_tokens)[:, None]
    j = np.arange(n_tokens)[None, :]
    m = j <= i
    if n_swa > 0:
        m &= (i - j) < n_swa
    return m


def set_blas_threads(n: int) -> bool:
    """Limit numpy's OpenBLAS to n threads (process-wide). The forward pass is a chain of small
    matrix products; on a busy machine a multi-threaded BLAS makes them 10x slower. Linux only;
    returns False when no OpenBLAS was found."""
    try:
        with open("/proc/self/maps") as f:
            libs = sorted({line.split()[-1] for line in f if "openblas" in line.lower() and "/" in line})
    except OSError:
        return False
    done = False
    for lib in libs:
        try:
            handle = ctypes.CDLL(lib)
        except OSError:
            continue
        for fn in ("openblas_set_num_threads", "openblas_set_num_threads64_",
                   "scipy_openblas_set_num_threads64_", "scipy_openblas_set_num_threads"):
            f = getattr(handle, fn, None)
            if f is not None:
                f.argtypes = [ctypes.c_int]
                f(int(n))
                done = True
                break
    return done


class ReferenceModel:
    """float64 forward pass of a GGUF llama / qwen2 / gemma3 model (see the module docstring)."""

    def __init__(self, path: str, weight_dtype: type | None = None, blas_threads: int | None = None):
        """Open the GGUF file. weight_dtype: how dequantized weights are cached; float64 by default
        (float32 is exact too, since every GGUF type dequantizes to float32 values, and halves the
        memory; the arithmetic is float64 either way). blas_threads: numpy BLAS threads for the
        whole process (default: $KILN_REF_BLAS_THREADS, else 1; 0 leaves BLAS alone)."""
        if blas_threads is None:
            blas_threads = int(os.environ.get("KILN_REF_BLAS_THREADS", "1"))
        if blas_threads > 0:
            set_blas_threads(blas_threads)
        self.path = str(path)
        self.reader = GGUFReader(self.path)
        self._tensors = {t.name: t for t in self.reader.tensors}
        self._cache: dict[str, np.ndarray] = {}
        self._tokens: list[str] | None = None
        self.weight_dtype = np.dtype(weight_dtype or np.float64)
        self.hp = self._load_hparams()

    # ---------------------------------------------------------------- metadata
    def meta(self, key: str, default=None):
        f = self.reader.fields.get(key)
        if f is None:
            return default
        v = f.contents()
        return v

    def _load_hparams(self) -> HParams:
        arch = self.meta("general.architecture")
        if arch not in SUPPORTED_ARCHS:
            raise NotImplementedError(f"architecture {arch!r} is not supported ({', '.join(SUPPORTED_ARCHS)})")
        a = arch + "."

        def req(k):
            v = self.meta(a + k)
            if v is None:
                raise ValueError(f"{self.path}: missing metadata {a + k}")
            return v

        n_embd = int(req("embedding_length"))
        n_layer = int(req("block_count"))
        n_ff = self.meta(a + "feed_forward_length")
        n_ff = int(n_ff[0] if isinstance(n_ff, list) else n_ff)
        n_head = req("attention.head_count")
        if isinstance(n_head, list):
            if len(set(n_head)) != 1:
                raise NotImplementedError("per-layer head counts are not supported")
            n_head = n_head[0]
        n_head = int(n_head)
        n_head_kv = self.meta(a + "attention.head_count_kv", n_head)
        n_head_kv = [int(v) for v in n_head_kv] if isinstance(n_head_kv, list) else [int(n_head_kv)] * n_layer
        head_dim_k = int(self.meta(a + "attention.key_length", n_embd // n_head))
        head_dim_v = int(self.meta(a + "attention.value_length", n_embd // n_head))
        n_rot = int(self.meta(a + "rope.dimension_count", head_dim_k))
        eps = float(req("attention.layer_norm_rms_epsilon"))

        rope_base = float(self.meta(a + "rope.freq_base", 10000.0))
        scaling_type = self.meta(a + "rope.scaling.type", "linear")
        factor = self.meta(a + "rope.scaling.factor")
        if factor is None:
            factor = self.meta(a + "rope.scale_linear", 0.0)
        factor = float(factor)
        rope_scale = 1.0 if factor == 0.0 else 1.0 / factor
        if scaling_type == "none":
            rope_scale = 1.0  # llama.cpp: never scale if the scaling type is none
        elif scaling_type != "linear" and rope_scale != 1.0:
            raise NotImplementedError(f"rope scaling type {scaling_type!r} is not supported")

        tok = self._tensors["token_embd.weight"]
        n_vocab = int(tok.shape[1])

        hp = HParams(arch=arch, n_vocab=n_vocab, n_embd=n_embd, n_layer=n_layer, n_ff=n_ff, n_head=n_head,
                     n_head_kv=n_head_kv, head_dim_k=head_dim_k, head_dim_v=head_dim_v, n_rot=n_rot, eps=eps,
                     rope_mode=ROPE_MODE[arch], rope_base=rope_base, rope_scale=rope_scale,
                     rope_base_swa=rope_base, rope_scale_swa=rope_scale, n_swa=0,
                     swa_layers=[False] * n_layer, attn_scale=1.0 / math.sqrt(head_dim_k),
                     n_ctx_train=int(self.meta(a + "context_length", 0)))

        if arch == "gemma3":
            hp.embd_scale = math.sqrt(n_embd)
            # llama.cpp: f_attention_scale = 27B (62 layers) ? 1/sqrt(n_embd/n_head) : 1/sqrt(head_dim)
            hp.attn_scale = 1.0 / math.sqrt(n_embd // n_head) if n_layer == 62 else 1.0 / math.sqrt(head_dim_k)
            n_swa = int(self.meta(a + "attention.sliding_window", 0) or 0)
            if n_swa > 0:
                hp.n_swa = n_swa
                pattern = self.meta(a + "attention.sliding_window_pattern", 6)
                if isinstance(pattern, list):
                    hp.swa_layers = [bool(v) for v in pattern][:n_layer]
                else:
                    p = int(pattern)
                    hp.swa_layers = [p == 0 or (il % p < p - 1) for il in range(n_layer)]
                hp.rope_base_swa = float(self.meta(a + "rope.freq_base_swa", 10000.0))
                hp.rope_scale_swa = 1.0
            hp.final_softcap = float(self.meta(a + "final_logit_softcapping", 0.0) or 0.0)

        if n_head % min(n_head_kv) != 0 or any(n_head % k for k in n_head_kv):
            raise ValueError("n_head must be a multiple of n_head_kv")
        if n_rot > head_dim_k or n_rot % 2:
            raise ValueError(f"bad rope.dimension_count {n_rot}")
        return hp

    # ---------------------------------------------------------------- weights
    def has(self, name: str) -> bool:
        return name in self._tensors

    def weight(self, name: str) -> np.ndarray:
        """Dequantized tensor, numpy shape = reversed GGUF shape (a GGUF [n_in, n_out] matrix is
        (n_out, n_in) here, so y = W @ x). Cached."""
        w = self._cache.get(name)
        if w is not None:
            return w
        t = self._tensors[name]
        shape = tuple(int(d) for d in reversed(list(t.shape)))
        data = t.data
        out = np.empty(shape, dtype=self.weight_dtype)
        if len(shape) == 1:
            out[:] = quants.dequantize(np.asarray(data), t.tensor_type).reshape(shape)
        else:
            n_rows = int(np.prod(shape[:-1]))
            flat_out = out.reshape(n_rows, shape[-1])
            rows = data.reshape(n_rows, -1) if data.ndim != 2 else data
            step = 8192
            for r0 in range(0, n_rows, step):
                chunk = quants.dequantize(np.asarray(rows[r0:r0 + step]), t.tensor_type)
                flat_out[r0:r0 + step] = chunk.reshape(-1, shape[-1])
        self._cache[name] = out
        return out

    def _opt(self, name: str) -> np.ndarray | None:
        return self.weight(name) if name in self._tensors else None

    def output_weight(self) -> np.ndarray:
        return self.weight("output.weight") if self.has("output.weight") else self.weight("token_embd.weight")

    def preload(self) -> "ReferenceModel":
        """Dequantize every tensor now (otherwise it happens on first use)."""
        for name in self._tensors:
            self.weight(name)
        return self

    def free_weights(self) -> None:
        self._cache.clear()

    # ---------------------------------------------------------------- forward
    @staticmethod
    def _mm(x: np.ndarray, w: np.ndarray) -> np.ndarray:
        """x [T, n_in] (float64) times a weight (n_out, n_in) -> [T, n_out], in float64."""
        if w.dtype != np.float64:
            w = w.astype(np.float64)
        return x @ w.T

    def _linear(self, x: np.ndarray, prefix: str) -> np.ndarray:
        y = self._mm(x, self.weight(prefix + ".weight"))
        b = self._opt(prefix + ".bias")
        return y + b if b is not None else y

    def hidden(self, tokens: Sequence[int]) -> np.ndarray:
        """Final-normed hidden states [n_tokens, n_embd] (input of the output projection)."""
        hp = self.hp
        toks = np.asarray(list(tokens), dtype=np.int64)
        if toks.ndim != 1 or len(toks) == 0:
            raise ValueError("tokens must be a non-empty list of ids")
        if toks.min() < 0 or toks.max() >= hp.n_vocab:
            raise ValueError(f"token id out of range [0, {hp.n_vocab})")
        T = len(toks)
        pos = np.arange(T)
        emb = self.weight("token_embd.weight")
        x = np.asarray(emb[toks], dtype=np.float64)
        if hp.embd_scale != 1.0:
            x = x * hp.embd_scale
        rope_freqs = self._opt("rope_freqs.weight") if hp.arch == "llama" else None
        gemma = hp.arch == "gemma3"

        for il in range(hp.n_layer):
            p = f"blk.{il}."
            if self.has(p + "ffn_gate_inp.weight"):
                raise NotImplementedError("mixture-of-experts layers are not supported")
            n_kv = hp.n_head_kv[il]
            h = _rms_norm(x, self.weight(p + "attn_norm.weight"), hp.eps)

            q = self._linear(h, p + "attn_q").reshape(T, hp.n_head, hp.head_dim_k)
            k = self._linear(h, p + "attn_k").reshape(T, n_kv, hp.head_dim_k)
            v = self._linear(h, p + "attn_v").reshape(T, n_kv, hp.head_dim_v)
            if self.has(p + "attn_q_norm.weight"):
                q = _rms_norm(q, self.weight(p + "attn_q_norm.weight"), hp.eps)
            if self.has(p + "attn_k_norm.weight"):
                k = _rms_norm(k, self.weight(p + "attn_k_norm.weight"), hp.eps)

            swa = hp.swa_layers[il] and hp.n_swa > 0
            base = hp.rope_base_swa if swa else hp.rope_base
            scale = hp.rope_scale_swa if swa else hp.rope_scale
            q = rope(q, pos, hp.n_rot, base, scale, hp.rope_mode, rope_freqs)
            k = rope(k, pos, hp.n_rot, base, scale, hp.rope_mode, rope_freqs)

            attn = self._attention(q, k, v, hp.attn_scale, hp.n_swa if swa else 0)
            o = self._linear(attn, p + "attn_output")
            if gemma:
                o = _rms_norm(o, self.weight(p + "post_attention_norm.weight"), hp.eps)
            x = x + o

            h = _rms_norm(x, self.weight(p + "ffn_norm.weight"), hp.eps)
            g = self._linear(h, p + "ffn_gate")
            u = self._linear(h, p + "ffn_up")
            act = _gelu_tanh(g) if gemma else _silu(g)
            d = self._linear(act * u, p + "ffn_down")
            if gemma:
                d = _rms_norm(d, self.weight(p + "post_ffw_norm.weight"), hp.eps)
            x = x + d

        return _rms_norm(x, self.weight("output_norm.weight"), hp.eps)

    @staticmethod
    def _attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, scale: float, n_swa: int) -> np.ndarray:
        """q [T, H, dk], k [T, Hkv, dk], v [T, Hkv, dv] -> [T, H * dv]; causal (+ window)."""
        T, H, _ = q.shape
        n_kv = k.shape[1]
        group = H // n_kv
        kh = np.repeat(k.transpose(1, 0, 2), group, axis=0)   # [H, T, dk]; head h -> kv head h // group
        vh = np.repeat(v.transpose(1, 0, 2), group, axis=0)   # [H, T, dv]
        qh = q.transpose(1, 0, 2)                             # [H, T, dk]
        s = np.einsum("hid,hjd->hij", qh, kh) * scale
        mask = attention_mask(T, n_swa)
        s = np.where(mask[None], s, -np.inf)
        s = s - s.max(axis=-1, keepdims=True)
        pr = np.exp(s)
        pr /= pr.sum(axis=-1, keepdims=True)
        out = np.einsum("hij,hjd->hid", pr, vh)               # [H, T, dv]
        return out.transpose(1, 0, 2).reshape(T, -1)

    def _project(self, h: np.ndarray) -> np.ndarray:
        logits = self._mm(h, self.output_weight())
        b = self._opt("output.bias")
        if b is not None:
            logits = logits + b
        c = self.hp.final_softcap
        if c:
            logits = np.tanh(logits / c) * c
        return logits

    def logits(self, tokens: Sequence[int], last_only: bool = False) -> np.ndarray:
        """float64 logits [n_tokens, n_vocab] (or [n_vocab] for the last position only)."""
        h = self.hidden(tokens)
        if last_only:
            return self._project(h[-1:])[0]
        return self._project(h)

    def greedy(self, tokens: Sequence[int], n: int, stop_at_eos: bool = False) -> list[int]:
        """n greedily generated token ids (argmax; full recompute per step)."""
        seq = list(tokens)
        out: list[int] = []
        eos = self.meta("tokenizer.ggml.eos_token_id")
        for _ in range(n):
            nxt = int(np.argmax(self.logits(seq, last_only=True)))
            out.append(nxt)
            seq.append(nxt)
            if stop_at_eos and eos is not None and nxt == int(eos):
                break
        return out

    # ---------------------------------------------------------------- vocabulary helpers
    def vocab(self) -> list[str]:
        if self._tokens is None:
            self._tokens = list(self.meta("tokenizer.ggml.tokens", []))
        return self._tokens

    def piece_ids(self, pieces: Sequence[str]) -> list[int]:
        """Ids of exact vocabulary pieces (e.g. ['<bos>', 'The', '\u2581capital'])."""
        index = {t: i for i, t in enumerate(self.vocab())}
        missing = [p for p in pieces if p not in index]
        if missing:
            raise KeyError(f"pieces not in the vocabulary: {missing}")
        return [index[p] for p in pieces]

    def detokenize(self, ids: Sequence[int]) -> str:
        """Rough decode for SentencePiece-style vocabularies ('\u2581' -> ' ', <0xNN> bytes);
        GPT-2 style byte-level pieces are returned as they are."""
        voc = self.vocab()
        buf = bytearray()
        for i in ids:
            t = voc[int(i)]
            if len(t) == 6 and t.startswith("<0x") and t.endswith(">"):
                try:
                    buf.append(int(t[3:5], 16))
                    continue
                except ValueError:
                    pass
            buf += t.replace("\u2581", " ").encode("utf-8")
        return buf.decode("utf-8", errors="replace")


def generate_greedy(model: ReferenceModel, tokens: Sequence[int], n: int) -> list[int]:
    return model.greedy(tokens, n)


def log_softmax(logits: np.ndarray) -> np.ndarray:
    x = np.asarray(logits, dtype=np.float64)
    x = x - x.max(axis=-1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))


def kl_divergence(ref_logits: np.ndarray, test_logits: np.ndarray) -> np.ndarray:
    """KL(P_ref || P_test) per position (natural log), for logits [..., n_vocab]."""
    lp = log_softmax(ref_logits)
    lq = log_softmax(test_logits)
    return (np.exp(lp) * (lp - lq)).sum(axis=-1)


def top1_agreement(ref_logits: np.ndarray, test_logits: np.ndarray) -> float:
    """Fraction of positions whose argmax agrees."""
    return float(np.mean(np.argmax(ref_logits, axis=-1) == np.argmax(test_logits, axis=-1)))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="float64 reference forward pass of a GGUF model")
    ap.add_argument("model")
    ap.add_argument("--tokens", help="comma-separated token ids")
    ap.add_argument("--pieces", help="comma-separated exact vocabulary pieces (alternative to --tokens)")
    ap.add_argument("--greedy", type=int, default=0, help="generate N tokens greedily")
    ap.add_argument("--out", help="write the logits [n_tokens, n_vocab] float64 to this .npy file")
    ap.add_argument("--top", type=int, default=5, help="print the top-K tokens of the last position")
    args = ap.parse_args(argv)

    t0 = time.time()
    ref = ReferenceModel(args.model)
    hp = ref.hp
    print(f"{hp.arch}: n_vocab {hp.n_vocab} n_embd {hp.n_embd} n_layer {hp.n_layer} n_head {hp.n_head}/"
          f"{hp.n_head_kv[0]} head_dim {hp.head_dim_k} n_ff {hp.n_ff} rope {hp.rope_mode} base {hp.rope_base} "
          f"n_swa {hp.n_swa} (opened in {time.time() - t0:.1f} s)", file=sys.stderr)
    if args.tokens:
        tokens = [int(t) for t in args.tokens.split(",") if t.strip()]
    elif args.pieces:
        tokens = ref.piece_ids(args.pieces.split(","))
    else:
        ap.error("give --tokens or --pieces")
    t0 = time.time()
    logits = ref.logits(tokens)
    print(f"forward of {len(tokens)} tokens: {time.time() - t0:.2f} s", file=sys.stderr)
    if args.out:
        np.save(args.out, logits)
    last = logits[-1]
    top = np.argsort(-last)[:args.top]
    voc = ref.vocab()
    for i in top:
        print(f"  {int(i):>7} {last[i]:12.5f} {voc[i]!r}" if voc else f"  {int(i):>7} {last[i]:12.5f}")
    if args.greedy:
        t0 = time.time()
        ids = ref.greedy(tokens, args.greedy)
        print(f"greedy {args.greedy}: {time.time() - t0:.2f} s", file=sys.stderr)
        print("greedy ids:", ",".join(str(i) for i in ids))
        if voc:
            print("greedy text:", repr(ref.detokenize(ids)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
