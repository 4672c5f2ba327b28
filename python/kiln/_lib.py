"""ctypes declarations of include/kiln.h. Keep in sync with the header (field order matters)."""
from __future__ import annotations

import ctypes
import os
import pathlib

c_float_p = ctypes.POINTER(ctypes.c_float)


class KilnError(RuntimeError):
    pass


class ModelParams(ctypes.Structure):
    _fields_ = [("n_gpu_layers", ctypes.c_int32), ("use_mmap", ctypes.c_bool), ("use_mlock", ctypes.c_bool),
                ("progress_callback", ctypes.c_void_p), ("progress_callback_user_data", ctypes.c_void_p),
                ("use_repack", ctypes.c_bool)]


class ContextParams(ctypes.Structure):
    _fields_ = [("n_ctx", ctypes.c_uint32), ("n_batch", ctypes.c_uint32), ("n_ubatch", ctypes.c_uint32),
                ("n_threads", ctypes.c_int32), ("type_k", ctypes.c_int32), ("type_v", ctypes.c_int32),
                ("n_seq_max", ctypes.c_uint32), ("matmul_precision", ctypes.c_int32),
                ("cpu_mask", ctypes.c_char_p), ("cpu_strict", ctypes.c_bool), ("poll", ctypes.c_int32),
                ("n_threads_batch", ctypes.c_int32)]


class Batch(ctypes.Structure):
    _fields_ = [("n_tokens", ctypes.c_int32), ("token", ctypes.POINTER(ctypes.c_int32)),
                ("pos", ctypes.POINTER(ctypes.c_int32)), ("n_seq_id", ctypes.POINTER(ctypes.c_int32)),
                ("seq_id", ctypes.POINTER(ctypes.POINTER(ctypes.c_int32))), ("logits", ctypes.POINTER(ctypes.c_int8))]


class PerfData(ctypes.Structure):
    _fields_ = [("t_load_ms", ctypes.c_double), ("t_p_eval_ms", ctypes.c_double), ("t_eval_ms", ctypes.c_double),
                ("t_sample_ms", ctypes.c_double), ("n_p_eval", ctypes.c_int32), ("n_eval", ctypes.c_int32),
                ("n_sample", ctypes.c_int32)]


_SIGNATURES = {
    "kiln_last_error": (ctypes.c_char_p, []),
    "kiln_build_commit": (ctypes.c_char_p, []),
    "kiln_build_number": (ctypes.c_int32, []),
    "kiln_system_info": (ctypes.c_char_p, []),
    "kiln_model_default_params": (ModelParams, []),
    "kiln_model_load": (ctypes.c_void_p, [ctypes.c_char_p, ModelParams]),
    "kiln_model_free": (None, [ctypes.c_void_p]),
    "kiln_model_n_vocab": (ctypes.c_int32, [ctypes.c_void_p]),
    "kiln_model_n_ctx_train": (ctypes.c_int32, [ctypes.c_void_p]),
    "kiln_model_n_embd": (ctypes.c_int32, [ctypes.c_void_p]),
    "kiln_model_repacked_size": (ctypes.c_uint64, [ctypes.c_void_p]),
    "kiln_model_meta_val_str": (ctypes.c_int32, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t]),
    "kiln_context_default_params": (ContextParams, []),
    "kiln_context_new": (ctypes.c_void_p, [ctypes.c_void_p, ContextParams]),
    "kiln_context_free": (None, [ctypes.c_void_p]),
    "kiln_n_ctx": (ctypes.c_uint32, [ctypes.c_void_p]),
    "kiln_n_threads": (ctypes.c_int32, [ctypes.c_void_p]),
    "kiln_n_threads_batch": (ctypes.c_int32, [ctypes.c_void_p]),
    "kiln_batch_init": (Batch, [ctypes.c_int32, ctypes.c_int32]),
    "kiln_batch_free": (None, [Batch]),
    "kiln_decode": (ctypes.c_int32, [ctypes.c_void_p, Batch]),
    "kiln_get_logits_ith": (c_float_p, [ctypes.c_void_p, ctypes.c_int32]),
    "kiln_kv_clear": (None, [ctypes.c_void_p]),
    "kiln_kv_seq_rm": (ctypes.c_bool, [ctypes.c_void_p, ctypes.c_int32, ctypes.c_int32, ctypes.c_int32]),
    "kiln_kv_seq_cp": (None, [ctypes.c_void_p, ctypes.c_int32, ctypes.c_int32, ctypes.c_int32, ctypes.c_int32]),
    "kiln_kv_seq_keep": (None, [ctypes.c_void_p, ctypes.c_int32]),
    "kiln_kv_seq_add": (None, [ctypes.c_void_p, ctypes.c_int32, ctypes.c_int32, ctypes.c_int32, ctypes.c_int32]),
    "kiln_kv_seq_pos_max": (ctypes.c_int32, [ctypes.c_void_p, ctypes.c_int32]),
    "kiln_kv_used_cells": (ctypes.c_int32, [ctypes.c_void_p]),
    "kiln_perf_context": (PerfData, [ctypes.c_void_p]),
    "kiln_tokenize": (ctypes.c_int32, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int32, ctypes.POINTER(ctypes.c_int32),
                                       ctypes.c_int32, ctypes.c_bool, ctypes.c_bool]),
    "kiln_detokenize": (ctypes.c_int32, [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int32), ctypes.c_int32, ctypes.c_char_p,
                                         ctypes.c_int32, ctypes.c_bool, ctypes.c_bool]),
    "kiln_token_to_piece": (ctypes.c_int32, [ctypes.c_void_p, ctypes.c_int32, ctypes.c_char_p, ctypes.c_int32, ctypes.c_bool]),
    "kiln_token_bos": (ctypes.c_int32, [ctypes.c_void_p]),
    "kiln_token_eos": (ctypes.c_int32, [ctypes.c_void_p]),
    "kiln_token_is_eog": (ctypes.c_bool, [ctypes.c_void_p, ctypes.c_int32]),
    "kiln_chat_apply_template_json": (ctypes.c_int32, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p,
                                                       ctypes.c_bool, ctypes.c_char_p, ctypes.c_int32]),
}


def _candidates() -> list[pathlib.Path]:
    env = os.environ.get("KILN_LIBRARY")
    if env:
        return [pathlib.Path(env)]
    here = pathlib.Path(__file__).resolve().parent
    root = here.parents[1]
    build = pathlib.Path(os.environ.get("KILN_BUILD_DIR", root / "build" / "release"))
    return [here / "libkiln.so", *sorted((build / "src").glob("libkiln.so*"))]


_lib = None


def load_library() -> ctypes.CDLL:
    """Loads libkiln once (KILN_LIBRARY, the package folder, or $KILN_BUILD_DIR/src)."""
    global _lib  # noqa: PLW0603 - the process-wide handle of a shared library
    if _lib is None:
        for path in _candidates():
            if path.exists():
                lib = ctypes.CDLL(str(path))
                break
        else:
            raise KilnError("libkiln not found: build kiln or set KILN_LIBRARY")
        for name, (res, args) in _SIGNATURES.items():
            fn = getattr(lib, name)
            fn.restype = res
            fn.argtypes = args
        _lib = lib
    return _lib


def last_error() -> str:
    return load_library().kiln_last_error().decode("utf-8", "replace")


def build_commit() -> str:
    """The library's source commit (git short hash; "unknown" outside a checkout)."""
    return load_library().kiln_build_commit().decode()


def build_number() -> int:
    """The build's number: the commits in its source's history (as llama.cpp numbers builds); 0 outside git."""
    return int(load_library().kiln_build_number())


def system_info() -> str:
    """One line on the machine: CPU, kernel set, instruction-set features (llama.cpp's system_info)."""
    return load_library().kiln_system_info().decode("utf-8", "replace")
