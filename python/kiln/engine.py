"""Thin Python wrappers over the C API: models, contexts, decoding."""
from __future__ import annotations

import ctypes
from typing import Sequence

import numpy as np

from ._lib import KilnError, last_error, load_library

PRECISION = {"auto": 0, "fast": 1, "precise": 2}
CACHE_TYPES = {"f32": 0, "f16": 1, "q8_0": 8, "bf16": 30}


class ContextFullError(KilnError):
    pass


class Model:
    def __init__(self, path: str, use_mmap: bool = True, use_repack: bool = True):
        self._lib = load_library()
        p = self._lib.kiln_model_default_params()
        p.use_mmap = use_mmap
        p.use_repack = use_repack
        self._h = self._lib.kiln_model_load(str(path).encode(), p)
        if not self._h:
            raise KilnError(last_error())
        self.n_vocab = self._lib.kiln_model_n_vocab(self._h)
        self.repacked_bytes = self._lib.kiln_model_repacked_size(self._h)

    def meta(self, key: str) -> str | None:
        n = self._lib.kiln_model_meta_val_str(self._h, key.encode(), None, 0)
        if n < 0:
            return None
        buf = ctypes.create_string_buffer(n + 1)
        self._lib.kiln_model_meta_val_str(self._h, key.encode(), buf, n + 1)
        return buf.value.decode("utf-8", "replace")

    def tokenize(self, text: str, add_special: bool = True, parse_special: bool = False) -> list[int]:
        data = text.encode("utf-8")
        n = self._lib.kiln_tokenize(self._h, data, len(data), None, 0, add_special, parse_special)
        if n == -(2 ** 31):
            raise KilnError(last_error())
        n = abs(n)
        buf = (ctypes.c_int32 * max(n, 1))()
        got = self._lib.kiln_tokenize(self._h, data, len(data), buf, n, add_special, parse_special)
        if got < 0:
            raise KilnError(last_error())
        return list(buf[:got])

    def detokenize(self, tokens: Sequence[int], remove_special: bool = False, unparse_special: bool = False) -> str:
        arr = (ctypes.c_int32 * max(len(tokens), 1))(*tokens)
        n = self._lib.kiln_detokenize(self._h, arr, len(tokens), None, 0, remove_special, unparse_special)
        if n < 0:
            raise KilnError(last_error())
        buf = ctypes.create_string_buffer(n + 1)
        self._lib.kiln_detokenize(self._h, arr, len(tokens), buf, n + 1, remove_special, unparse_special)
        return buf.raw[:n].decode("utf-8", "replace")

    def token_eos(self) -> int:
        return self._lib.kiln_token_eos(self._h)

    def is_eog(self, token: int) -> bool:
        return bool(self._lib.kiln_token_is_eog(self._h, token))

    def apply_chat_template(self, messages: list[dict], add_generation_prompt: bool = True, template: str | None = None,
                            extra: dict | None = None) -> str:
        import json
        args = (self._h, template.encode() if template else None, json.dumps(messages).encode(),
                json.dumps(extra).encode() if extra else None, add_generation_prompt)
        n = self._lib.kiln_chat_apply_template_json(*args, None, 0)
        if n < 0:
            raise KilnError(last_error())
        buf = ctypes.create_string_buffer(n + 1)
        self._lib.kiln_chat_apply_template_json(*args, buf, n + 1)
        return buf.raw[:n].decode("utf-8")

    def close(self):
        if self._h:
            self._lib.kiln_model_free(self._h)
            self._h = None

    def __del__(self):
        self.close()


class Context:
    def __init__(self, model: Model, n_ctx: int = 512, n_batch: int = 512, n_ubatch: int = 512, n_threads: int = 0,
                 type_k: str = "f16", type_v: str = "f16", n_seq_max: int = 1, precision: str = "auto",
                 cpu_mask: str | None = None, cpu_strict: bool = False, poll: int = 50, n_threads_batch: int = 0):
        """n_threads: threads for one-token batches (generation; 0: the physical cores); n_threads_batch:
        for larger batches (prompts; 0: n_threads). cpu_mask: CPUs the compute threads run on, as llama.cpp's -C hex mask ("0x3": CPUs 0 and 1;
        None: wherever the OS puts them); cpu_strict: each thread alone on one of them; poll: 0..100,
        how long idle threads spin before they sleep (40 us per level)."""
        self._lib = load_library()
        self.model = model
        p = self._lib.kiln_context_default_params()
        p.n_ctx, p.n_batch, p.n_ubatch, p.n_threads = n_ctx, n_batch, n_ubatch, n_threads
        p.type_k, p.type_v, p.n_seq_max = CACHE_TYPES[type_k], CACHE_TYPES[type_v], n_seq_max
        p.matmul_precision = PRECISION[precision]
        mask = cpu_mask.encode() if cpu_mask is not None else None  # kept alive until kiln_context_new copies it
        p.cpu_mask, p.cpu_strict, p.poll = mask, bool(cpu_strict), int(poll)
        p.n_threads_batch = n_threads_batch
        self._h = self._lib.kiln_context_new(model._h, p)
        if not self._h:
            raise KilnError(last_error())

    def decode(self, tokens: Sequence[int], pos: Sequence[int] | None = None,
               seq_ids: Sequence[Sequence[int]] | None = None, logits: Sequence[bool] | None = None) -> None:
        n = len(tokens)
        max_seqs = max((len(s) for s in seq_ids), default=1) if seq_ids else 1
        b = self._lib.kiln_batch_init(n, max_seqs)
        try:
            b.n_tokens = n
            start = self.pos_max(0) + 1
            for i, t in enumerate(tokens):
                b.token[i] = int(t)
                b.pos[i] = int(pos[i]) if pos is not None else start + i
                seqs = seq_ids[i] if seq_ids is not None else [0]
                b.n_seq_id[i] = len(seqs)
                for j, s in enumerate(seqs):
                    b.seq_id[i][j] = int(s)
                b.logits[i] = 1 if (logits[i] if logits is not None else i == n - 1) else 0
            rc = self._lib.kiln_decode(self._h, b)
        finally:
            self._lib.kiln_batch_free(b)
        if rc == 1:
            raise ContextFullError(last_error())
        if rc != 0:
            raise KilnError(last_error())

    def logits(self, i: int = -1) -> np.ndarray:
        p = self._lib.kiln_get_logits_ith(self._h, i)
        if not p:
            raise KilnError(last_error())
        return np.ctypeslib.as_array(p, (self.model.n_vocab,)).copy()

    @property
    def n_threads(self) -> int:
        return self._lib.kiln_n_threads(self._h)

    @property
    def n_threads_batch(self) -> int:
        return self._lib.kiln_n_threads_batch(self._h)

    def pos_max(self, seq: int = 0) -> int:
        return self._lib.kiln_kv_seq_pos_max(self._h, seq)

    def seq_rm(self, seq: int, p0: int = 0, p1: int = -1) -> None:
        self._lib.kiln_kv_seq_rm(self._h, seq, p0, p1)

    def seq_cp(self, src: int, dst: int, p0: int = 0, p1: int = -1) -> None:
        self._lib.kiln_kv_seq_cp(self._h, src, dst, p0, p1)

    def seq_add(self, seq: int, p0: int, p1: int, delta: int) -> None:
        self._lib.kiln_kv_seq_add(self._h, seq, p0, p1, delta)

    def kv_clear(self) -> None:
        self._lib.kiln_kv_clear(self._h)

    def close(self):
        if self._h:
            self._lib.kiln_context_free(self._h)
            self._h = None

    def __del__(self):
        self.close()
