#include "core/kv_layout.h"

#include <cstring>
#include <vector>

#include "core/quant.h"

namespace kiln {

void KPanels::read_cell(const void* data, int64_t c, float* row) const {
    std::vector<uint8_t> elems(static_cast<size_t>(head_dim) * elem_bytes());
    for (int64_t h = 0; h < n_head; ++h) {
        gather(data, c, h, 0, elems.data(), head_dim);
        dequantize_row(type, elems.data(), row + h * head_dim, head_dim);
    }
}

void KPanels::write_cell(void* data, int64_t c, const float* row) const {
    const int64_t n = n_head * head_dim;
    std::vector<uint8_t> elems(static_cast<size_t>(n) * elem_bytes());
    quantize(type, row, elems.data(), 1, n);
    for (int64_t h = 0; h < n_head; ++h) {
        scatter(data, c, h, 0, elems.data() + static_cast<size_t>(h * head_dim) * elem_bytes(), head_dim);
    }
}

void KPanels::scatter(void* data, int64_t c, int64_t h, int64_t d0, const void* elems, int64_t n) const {
    const size_t eb = elem_bytes(), step = tile_row_bytes();
    uint8_t* dst = tile(data, c, h) + static_cast<size_t>(c % kKPanelCells) * eb + static_cast<size_t>(d0) * step;
    const auto* src = static_cast<const uint8_t*>(elems);
    if (eb == 2) {
        for (int64_t d = 0; d < n; ++d) std::memcpy(dst + static_cast<size_t>(d) * step, src + 2 * d, 2);
    } else {
        for (int64_t d = 0; d < n; ++d) std::memcpy(dst + static_cast<size_t>(d) * step, src + 4 * d, 4);
    }
}

void KPanels::gather(const void* data, int64_t c, int64_t h, int64_t d0, void* elems, int64_t n) const {
    const size_t eb = elem_bytes(), step = tile_row_bytes();
    const uint8_t* src = tile(data, c, h) + static_cast<size_t>(c % kKPanelCells) * eb + static_cast<size_t>(d0) * step;
    auto* dst = static_cast<uint8_t*>(elems);
    // Fixed-size copies (one 2- or 4-byte move each): with the size a run-time value GCC copied
    // byte by byte, and batched decoding gathers every visible key this way (3% of a 32-sequence
    // step, perf).
    if (eb == 2) {
        for (int64_t d = 0; d < n; ++d) std::memcpy(dst + 2 * d, src + static_cast<size_t>(d) * step, 2);
    } else {
        for (int64_t d = 0; d < n; ++d) std::memcpy(dst + 4 * d, src + static_cast<size_t>(d) * step, 4);
    }
}

}  // namespace kiln
