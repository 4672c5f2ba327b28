// Repacking weights into the interleaved layouts of quant_blocks.h ("x16" blocks) and
// reading rows back. Repacking is lossless: the packed tensor holds the same values,
// only arranged so the CPU GEMM kernels load 16 rows' quants with one vector load.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/types.h"

namespace kiln {

// True if `type` has a packed layout and a [K, nrows] weight of it can be packed
// (nrows a multiple of kPackRows, K a multiple of the block size).
bool can_pack(Type type, int64_t K, int64_t nrows);

// Bytes of the packed form of nrows rows of K elements (the same as the row-major size
// for every layout so far).
size_t packed_size(Type type, int64_t K, int64_t nrows);

// Repacks nrows rows (row-major, src_row_bytes apart) into dst (packed_size bytes).
// Throws std::invalid_argument if !can_pack.
void pack_rows(Type type, const void* src, size_t src_row_bytes, void* dst, int64_t K, int64_t nrows);

// Row `row` of a packed tensor back in its row-major block form (row_size(type, K) bytes),
// e.g. to dequantize it or compare it with the original.
void unpack_row(Type type, const void* packed, int64_t K, int64_t row, void* dst_row);

}  // namespace kiln
