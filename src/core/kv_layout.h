// How K and V rows are laid out in a KV cache tensor, shared by the code that
// writes the cache (store_rows, the K-shift) and the attention that reads it.
//
// Rows (any cache type): cell c holds its row [n_head * head_dim]
// contiguously, row c of a [n_head * head_dim, n_cells] tensor. A Q8_0 K cache
// is kept so (its blocks run along the head dimension, and the K-shift's rows
// path reads it by cell).
//
// Panels (F32, F16, BF16): each KV head has its own region of the tensor, in
// which cells are grouped in panels of kKPanelCells consecutive cells, each
// stored as the tile K^T [head_dim][kKPanelCells]:
//
//   element (cell c, head h, dim d) at
//     h * cells * head_dim * elem_bytes + (c / 64) * tile_bytes + (d * 64 + c % 64) * elem_bytes
//
// (cells: the tensor's cell count, a multiple of 64). Attention multiplies the
// queries by K^T; with rows it had to transpose every key block for every
// token it generated (a quarter of the attention time at depth 4096). With
// panels a tile is already the B operand of Q K^T. (Head-major regions made
// the keys one head reads one contiguous run; that alone measured no faster.)
// Writing a cell scatters its row over head_dim places per head, once per token.
//
// Head-major rows (V, any cache type): each KV head has its own region of the
// tensor, in which its rows of head_dim elements follow cell after cell:
//
//   head row (cell c, head h) at  h * cells * head_row_bytes + c * head_row_bytes
//
// so one head's values over a run of cells are one contiguous run, which is
// what attention reads (one head per work item). With whole cells as rows a
// head's V row was 128 bytes of every 512 (llama 1.1B, F16) and the memory
// system fetched the rest of the lines' neighbourhood for nothing.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/types.h"

namespace kiln {

inline constexpr int64_t kKPanelCells = 64;

struct HeadMajorRows {
    Type type = Type::F16;
    int64_t head_dim = 0;  // a whole number of the type's blocks
    int64_t cells = 0;     // of the whole tensor

    size_t head_row_bytes() const { return row_size(type, head_dim); }
    size_t head_bytes() const { return static_cast<size_t>(cells) * head_row_bytes(); }
    uint8_t* row(void* data, int64_t c, int64_t h) const {
        return static_cast<uint8_t*>(data) + static_cast<size_t>(h) * head_bytes() + static_cast<size_t>(c) * head_row_bytes();
    }
};

// Cache types that can be stored in panels (element-wise types the attention kernels read directly).
inline bool k_panels_supported(Type t) { return t == Type::F32 || t == Type::F16 || t == Type::BF16; }

struct KPanels {
    Type type = Type::F16;
    int64_t head_dim = 0;
    int64_t n_head = 0;  // KV heads
    int64_t cells = 0;   // of the whole tensor, a multiple of kKPanelCells

    size_t elem_bytes() const { return type == Type::F32 ? 4 : 2; }
    // One head's K^T tile [head_dim][kKPanelCells] of a panel.
    size_t tile_bytes() const { return static_cast<size_t>(head_dim * kKPanelCells) * elem_bytes(); }
    // Bytes between the rows d and d + 1 of a tile.
    size_t tile_row_bytes() const { return static_cast<size_t>(kKPanelCells) * elem_bytes(); }
    size_t head_bytes() const { return static_cast<size_t>(cells / kKPanelCells) * tile_bytes(); }
    // Cells a cache of n cells allocates (whole panels).
    static int64_t padded_cells(int64_t n) { return (n + kKPanelCells - 1) / kKPanelCells * kKPanelCells; }

    // The tile of head h in the panel holding cell c; column c % kKPanelCells is that cell.
    const uint8_t* tile(const void* data, int64_t c, int64_t h) const {
        return static_cast<const uint8_t*>(data) + static_cast<size_t>(h) * head_bytes() +
               static_cast<size_t>(c / kKPanelCells) * tile_bytes();
    }
    uint8_t* tile(void* data, int64_t c, int64_t h) const {
        return const_cast<uint8_t*>(tile(static_cast<const void*>(data), c, h));
    }

    // Cell c's K row [n_head * head_dim] as floats.
    void read_cell(const void* data, int64_t c, float* row) const;
    // Stores row [n_head * head_dim] at cell c, rounded as quantize() rounds to the type.
    void write_cell(void* data, int64_t c, const float* row) const;
    // Stores n elements already of the cache type (converted by the caller) as dims d0 .. d0 + n of head h.
    void scatter(void* data, int64_t c, int64_t h, int64_t d0, const void* elems, int64_t n) const;
    // The inverse: copies dims d0 .. d0 + n of head h (of the cache type) to elems.
    void gather(const void* data, int64_t c, int64_t h, int64_t d0, void* elems, int64_t n) const;
};

}  // namespace kiln
