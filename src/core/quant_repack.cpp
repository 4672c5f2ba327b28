#include "core/quant_repack.h"

#include <cstring>
#include <stdexcept>
#include <string>

#include "core/quant_blocks.h"

namespace kiln {
namespace {

// q4_0: chunk c of the packed qs holds bytes 4c..4c+3 of each row's qs (see block_q4_0x16).
void pack_group_q4_0(const uint8_t* src, size_t stride, block_q4_0x16* dst, int64_t nb) {
    for (int64_t b = 0; b < nb; ++b) {
        for (int r = 0; r < kPackRows; ++r) {
            const auto& in = reinterpret_cast<const block_q4_0*>(src + r * stride)[b];
            dst[b].d[r] = in.d;
            for (int c = 0; c < 4; ++c) std::memcpy(&dst[b].qs[64 * c + 4 * r], &in.qs[4 * c], 4);
        }
    }
}

void unpack_q4_0(const block_q4_0x16* g, int r, block_q4_0* out, int64_t nb) {
    for (int64_t b = 0; b < nb; ++b) {
        out[b].d = g[b].d[r];
        for (int c = 0; c < 4; ++c) std::memcpy(&out[b].qs[4 * c], &g[b].qs[64 * c + 4 * r], 4);
    }
}

// q8_0: chunk c holds elements 4c..4c+3 of each row, stored as q + 128.
void pack_group_q8_0(const uint8_t* src, size_t stride, block_q8_0x16* dst, int64_t nb) {
    for (int64_t b = 0; b < nb; ++b) {
        for (int r = 0; r < kPackRows; ++r) {
            const auto& in = reinterpret_cast<const block_q8_0*>(src + r * stride)[b];
            dst[b].d[r] = in.d;
            for (int c = 0; c < 8; ++c) {
                for (int j = 0; j < 4; ++j) dst[b].qs[64 * c + 4 * r + j] = static_cast<uint8_t>(in.qs[4 * c + j] + 128);
            }
        }
    }
}

void unpack_q8_0(const block_q8_0x16* g, int r, block_q8_0* out, int64_t nb) {
    for (int64_t b = 0; b < nb; ++b) {
        out[b].d = g[b].d[r];
        for (int c = 0; c < 8; ++c) {
            for (int j = 0; j < 4; ++j) out[b].qs[4 * c + j] = static_cast<int8_t>(g[b].qs[64 * c + 4 * r + j] - 128);
        }
    }
}

// F16 / BF16: 16-bit values, chunk c of a 32-column block holds elements 2c, 2c+1 of each
// row (see block_f16x16). nb = K / 32.
void pack_group_16(const uint8_t* src, size_t stride, block_f16x16* dst, int64_t nb) {
    for (int64_t b = 0; b < nb; ++b) {
        for (int r = 0; r < kPackRows; ++r) {
            const auto* in = reinterpret_cast<const uint16_t*>(src + r * stride) + b * kPackCols16;
            for (int c = 0; c < kPackCols16 / 2; ++c) std::memcpy(&dst[b].v[32 * c + 2 * r], in + 2 * c, 2 * sizeof(uint16_t));
        }
    }
}

void unpack_16(const block_f16x16* g, int r, uint16_t* out, int64_t nb) {
    for (int64_t b = 0; b < nb; ++b) {
        for (int c = 0; c < kPackCols16 / 2; ++c) std::memcpy(out + b * kPackCols16 + 2 * c, &g[b].v[32 * c + 2 * r], 2 * sizeof(uint16_t));
    }
}

// K-quants: every per-row byte array (n bytes per row) interleaved by dwords
// (interleaved_offset); d / dmin copied per row.
void scatter(uint8_t* packed, const void* row, int n, int r) {
    for (int j = 0; j < n; ++j) packed[interleaved_offset(j, r)] = static_cast<const uint8_t*>(row)[j];
}
void gather(const uint8_t* packed, void* row, int n, int r) {
    for (int j = 0; j < n; ++j) static_cast<uint8_t*>(row)[j] = packed[interleaved_offset(j, r)];
}

void pack_group_q4_K(const uint8_t* src, size_t stride, block_q4_Kx16* dst, int64_t nb) {
    for (int64_t b = 0; b < nb; ++b) {
        for (int r = 0; r < kPackRows; ++r) {
            const auto& in = reinterpret_cast<const block_q4_K*>(src + r * stride)[b];
            dst[b].d[r] = in.d;
            dst[b].dmin[r] = in.dmin;
            scatter(dst[b].scales, in.scales, K_SCALE_SIZE, r);
            scatter(dst[b].qs, in.qs, QK_K / 2, r);
        }
    }
}

void unpack_q4_K(const block_q4_Kx16* g, int r, block_q4_K* out, int64_t nb) {
    for (int64_t b = 0; b < nb; ++b) {
        out[b].d = g[b].d[r];
        out[b].dmin = g[b].dmin[r];
        gather(g[b].scales, out[b].scales, K_SCALE_SIZE, r);
        gather(g[b].qs, out[b].qs, QK_K / 2, r);
    }
}

void pack_group_q6_K(const uint8_t* src, size_t stride, block_q6_Kx16* dst, int64_t nb) {
    for (int64_t b = 0; b < nb; ++b) {
        for (int r = 0; r < kPackRows; ++r) {
            const auto& in = reinterpret_cast<const block_q6_K*>(src + r * stride)[b];
            dst[b].d[r] = in.d;
            scatter(dst[b].ql, in.ql, QK_K / 2, r);
            scatter(dst[b].qh, in.qh, QK_K / 4, r);
            scatter(reinterpret_cast<uint8_t*>(dst[b].scales), in.scales, QK_K / 16, r);
        }
    }
}

void unpack_q6_K(const block_q6_Kx16* g, int r, block_q6_K* out, int64_t nb) {
    for (int64_t b = 0; b < nb; ++b) {
        out[b].d = g[b].d[r];
        gather(g[b].ql, out[b].ql, QK_K / 2, r);
        gather(g[b].qh, out[b].qh, QK_K / 4, r);
        gather(reinterpret_cast<const uint8_t*>(g[b].scales), out[b].scales, QK_K / 16, r);
    }
}

}  // namespace

bool can_pack(Type type, int64_t K, int64_t nrows) {
    switch (type) {
        case Type::Q4_0:
        case Type::Q8_0:
        case Type::Q4_K:
        case Type::Q6_K:
            return K > 0 && nrows > 0 && nrows % kPackRows == 0 && K % traits(type).block_size == 0;
        case Type::F16:
        case Type::BF16:
            return K > 0 && nrows > 0 && nrows % kPackRows == 0 && K % kPackCols16 == 0;
        default:
            return false;
    }
}

size_t packed_size(Type type, int64_t K, int64_t nrows) { return row_size(type, K) * static_cast<size_t>(nrows); }

void pack_rows(Type type, const void* src, size_t src_row_bytes, void* dst, int64_t K, int64_t nrows) {
    if (!can_pack(type, K, nrows)) {
        throw std::invalid_argument("pack_rows: " + std::string(type_name(type)) + " [" + std::to_string(K) + ", " +
                                    std::to_string(nrows) + "] has no packed layout");
    }
    const int64_t nb = K / traits(type).block_size;
    const size_t group_bytes = row_size(type, K) * kPackRows;
    for (int64_t g = 0; g < nrows / kPackRows; ++g) {
        const auto* s = static_cast<const uint8_t*>(src) + static_cast<size_t>(g) * kPackRows * src_row_bytes;
        uint8_t* d = static_cast<uint8_t*>(dst) + static_cast<size_t>(g) * group_bytes;
        switch (type) {
            case Type::Q4_0: pack_group_q4_0(s, src_row_bytes, reinterpret_cast<block_q4_0x16*>(d), nb); break;
            case Type::Q8_0: pack_group_q8_0(s, src_row_bytes, reinterpret_cast<block_q8_0x16*>(d), nb); break;
            case Type::Q4_K: pack_group_q4_K(s, src_row_bytes, reinterpret_cast<block_q4_Kx16*>(d), nb); break;
            case Type::Q6_K: pack_group_q6_K(s, src_row_bytes, reinterpret_cast<block_q6_Kx16*>(d), nb); break;
            case Type::F16:
            case Type::BF16: pack_group_16(s, src_row_bytes, reinterpret_cast<block_f16x16*>(d), K / kPackCols16); break;
            default: break;
        }
    }
}

void unpack_row(Type type, const void* packed, int64_t K, int64_t row, void* dst_row) {
    const int64_t nb = K / traits(type).block_size;
    const size_t group_bytes = row_size(type, K) * kPackRows;
    const auto* g = static_cast<const uint8_t*>(packed) + static_cast<size_t>(row / kPackRows) * group_bytes;
    const int r = static_cast<int>(row % kPackRows);
    switch (type) {
        case Type::Q4_0: unpack_q4_0(reinterpret_cast<const block_q4_0x16*>(g), r, static_cast<block_q4_0*>(dst_row), nb); break;
        case Type::Q8_0: unpack_q8_0(reinterpret_cast<const block_q8_0x16*>(g), r, static_cast<block_q8_0*>(dst_row), nb); break;
        case Type::Q4_K: unpack_q4_K(reinterpret_cast<const block_q4_Kx16*>(g), r, static_cast<block_q4_K*>(dst_row), nb); break;
        case Type::Q6_K: unpack_q6_K(reinterpret_cast<const block_q6_Kx16*>(g), r, static_cast<block_q6_K*>(dst_row), nb); break;
        case Type::F16:
        case Type::BF16:
            unpack_16(reinterpret_cast<const block_f16x16*>(g), r, static_cast<uint16_t*>(dst_row), K / kPackCols16);
            break;
        default: throw std::invalid_argument("unpack_row: " + std::string(type_name(type)) + " has no packed layout");
    }
}

}  // namespace kiln
