"""Conformance against the independent Python reference (PyPI `gguf`, module gguf.quants).

- dequantize: bit-identical on random blocks for every type both implement;
- quantize: byte-identical for F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0.
"""
import ctypes

import numpy as np
import pytest
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType as T, quants

# Byte ranges of the fp16 scale fields in each block: random bytes there could be
# NaN/Inf, whose arithmetic is not what the comparison is about.
FP16_FIELDS = {
    T.Q4_0: [(0, 2)], T.Q4_1: [(0, 4)], T.Q5_0: [(0, 2)], T.Q5_1: [(0, 4)], T.Q8_0: [(0, 2)],
    T.Q2_K: [(80, 84)], T.Q3_K: [(108, 110)], T.Q4_K: [(0, 4)], T.Q5_K: [(0, 4)], T.Q6_K: [(208, 210)],
    T.IQ4_NL: [(0, 2)], T.F16: None, T.BF16: [],
}
DEQUANT_TYPES = list(FP16_FIELDS)
QUANT_TYPES = [T.F16, T.BF16, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0]


def random_blocks(qtype, n_blocks, rng):
    block_size, type_size = GGML_QUANT_SIZES[qtype]
    raw = rng.integers(0, 256, size=(n_blocks, type_size), dtype=np.uint8)
    fields = FP16_FIELDS[qtype]
    if fields is None:  # plain F16: keep every value finite
        fields = [(0, type_size)]
    for lo, hi in fields:
        h = raw[:, lo:hi].copy().view(np.uint16)
        h &= np.uint16(0xBBFF)  # exponent < 0x1f: finite, and magnitudes stay moderate
        raw[:, lo:hi] = h.view(np.uint8)
    return raw, block_size


def kiln_dequant(lib, qtype, raw, n):
    out = np.empty(n, dtype=np.float32)
    buf = np.ascontiguousarray(raw)
    rc = lib.kiln_dequantize(int(qtype), buf.ctypes.data, out.ctypes.data, n)
    assert rc == 0, lib.kiln_last_error().decode()
    return out


@pytest.mark.parametrize("qtype", DEQUANT_TYPES, ids=lambda t: t.name)
def test_dequantize_bit_identical(libkiln, qtype):
    rng = np.random.default_rng(1234 + int(qtype))
    raw, block_size = random_blocks(qtype, 512, rng)
    n = raw.shape[0] * block_size
    ours = kiln_dequant(libkiln, qtype, raw, n)
    ref = quants.dequantize(raw.reshape(-1), qtype).astype(np.float32).reshape(-1)
    assert ours.shape == ref.shape
    mismatch = np.flatnonzero(ours.view(np.uint32) != ref.view(np.uint32))
    assert mismatch.size == 0, (f"{qtype.name}: {mismatch.size} of {n} values differ, first at {mismatch[0]}: "
                                f"kiln {ours[mismatch[0]]!r} vs gguf-py {ref[mismatch[0]]!r}")


def make_inputs(rng):
    """Rows that exercise rounding: normal data, ties, zeros, outliers, tiny and huge values."""
    rows = [
        rng.standard_normal(4096).astype(np.float32),
        (rng.standard_normal(4096) * 1e-3).astype(np.float32),
        rng.uniform(-100, 100, 4096).astype(np.float32),
        np.round(rng.uniform(-8, 8, 4096) * 2).astype(np.float32) / 2,  # many exact halves
        np.zeros(4096, dtype=np.float32),
        np.full(4096, 3.0, dtype=np.float32),
        (rng.standard_normal(4096) * 1e-6).astype(np.float32),  # fp16 subnormal scales
        (rng.standard_normal(4096) * 3e4).astype(np.float32),
    ]
    spiky = rng.standard_normal(4096).astype(np.float32)
    spiky[::37] *= 200
    rows.append(spiky)
    return np.stack(rows)


@pytest.mark.parametrize("qtype", QUANT_TYPES, ids=lambda t: t.name)
def test_quantize_byte_identical(libkiln, qtype):
    rng = np.random.default_rng(99)
    x = np.ascontiguousarray(make_inputs(rng))
    nrows, n = x.shape
    row_bytes = libkiln.kiln_row_size(int(qtype), n)
    out = np.zeros(nrows * row_bytes, dtype=np.uint8)
    written = libkiln.kiln_quantize(int(qtype), x.ctypes.data, out.ctypes.data, nrows, n, None)
    assert written == out.size, libkiln.kiln_last_error().decode()
    ref = np.ascontiguousarray(quants.quantize(x, qtype)).view(np.uint8).reshape(-1)  # F16/BF16 come back typed
    assert ref.size == out.size
    diff = np.flatnonzero(out != ref)
    assert diff.size == 0, f"{qtype.name}: {diff.size} bytes differ, first at byte {diff[0]} (row {diff[0] // row_bytes})"


def test_quantize_reports_bad_size(libkiln):
    x = np.zeros(100, dtype=np.float32)
    out = np.zeros(1000, dtype=np.uint8)
    assert libkiln.kiln_quantize(int(T.Q4_0), x.ctypes.data, out.ctypes.data, 1, 100, None) == 0
    assert b"block size" in libkiln.kiln_last_error()
