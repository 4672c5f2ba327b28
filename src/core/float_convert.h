// Scalar conversions between float32 and the 16-bit float formats, bit-exact
// with the GGML C library and with numpy (round to nearest even, subnormals,
// infinities and NaN handled).
#pragma once

#include <bit>
#include <cstdint>

#include "core/quant_blocks.h"

namespace kiln {

inline float fp16_to_fp32(fp16_t h) {
    const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
    const uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;
    uint32_t bits;
    if (exp == 0x1f) {
        bits = sign | 0x7f800000u | (mant << 13);  // inf / NaN (payload kept)
    } else if (exp != 0) {
        bits = sign | ((exp + 112) << 23) | (mant << 13);
    } else if (mant == 0) {
        bits = sign;  // signed zero
    } else {
        // Subnormal half: normalise into a float32.
        int e = -1;
        do {
            ++e;
            mant <<= 1;
        } while ((mant & 0x400u) == 0);
        bits = sign | static_cast<uint32_t>(112 - e) << 23 | ((mant & 0x3ffu) << 13);
    }
    return std::bit_cast<float>(bits);
}

inline fp16_t fp32_to_fp16(float f) {
    const uint32_t x = std::bit_cast<uint32_t>(f);
    const uint32_t sign = (x >> 16) & 0x8000u;
    const uint32_t absx = x & 0x7fffffffu;
    if (absx > 0x7f800000u) {  // NaN: keep it a quiet NaN, keep top payload bits
        return static_cast<fp16_t>(sign | 0x7e00u | ((absx >> 13) & 0x3ffu));
    }
    if (absx >= 0x477ff000u) {  // rounds to >= 65520: overflow to infinity
        return static_cast<fp16_t>(sign | 0x7c00u);
    }
    if (absx < 0x38800000u) {  // below the smallest normal half (2^-14)
        if (absx < 0x33000000u) return static_cast<fp16_t>(sign);  // < 2^-25 rounds to 0
        const uint32_t e = absx >> 23;                               // 102 .. 112
        const uint32_t mant = (absx & 0x7fffffu) | 0x800000u;
        const uint32_t shift = 126 - e;  // 14 .. 24
        uint32_t h = mant >> shift;
        const uint32_t rem = mant & ((1u << shift) - 1);
        const uint32_t half = 1u << (shift - 1);
        if (rem > half || (rem == half && (h & 1u))) ++h;
        return static_cast<fp16_t>(sign | h);
    }
    // Normal: rebias the exponent and round the 13 dropped bits to nearest even.
    uint32_t h = ((absx - 0x38000000u) >> 13);
    const uint32_t rem = absx & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;  // carry may roll into the exponent: correct
    return static_cast<fp16_t>(sign | h);
}

inline float bf16_to_fp32(bf16_t h) { return std::bit_cast<float>(static_cast<uint32_t>(h) << 16); }

inline bf16_t fp32_to_bf16(float f) {
    uint32_t x = std::bit_cast<uint32_t>(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) {  // NaN: force quiet
        return static_cast<bf16_t>((x >> 16) | 64u);
    }
    x += 0x7fffu + ((x >> 16) & 1u);  // round to nearest even
    return static_cast<bf16_t>(x >> 16);
}

}  // namespace kiln
