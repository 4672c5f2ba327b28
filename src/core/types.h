// Tensor element types, with the numeric ids GGUF files use on disk.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace kiln {

// Ids are the on-disk values of GGUF tensor infos; gaps are ids the GGML
// ecosystem retired and that no valid file contains.
enum class Type : uint32_t {
    F32 = 0,
    F16 = 1,
    Q4_0 = 2,
    Q4_1 = 3,
    Q5_0 = 6,
    Q5_1 = 7,
    Q8_0 = 8,
    Q8_1 = 9,
    Q2_K = 10,
    Q3_K = 11,
    Q4_K = 12,
    Q5_K = 13,
    Q6_K = 14,
    Q8_K = 15,
    IQ2_XXS = 16,
    IQ2_XS = 17,
    IQ3_XXS = 18,
    IQ1_S = 19,
    IQ4_NL = 20,
    IQ3_S = 21,
    IQ2_S = 22,
    IQ4_XS = 23,
    I8 = 24,
    I16 = 25,
    I32 = 26,
    I64 = 27,
    F64 = 28,
    IQ1_M = 29,
    BF16 = 30,
    TQ1_0 = 34,
    TQ2_0 = 35,
    MXFP4 = 39,
};

struct TypeTraits {
    Type type;
    std::string_view name;    // as GGUF tools print it: "q4_K", "f16", ...
    int64_t block_size;       // elements per block
    size_t type_size;         // bytes per block
    bool is_quantized;
    bool has_reference;       // kiln has a scalar quantize + dequantize for it
};

// Traits for a known type id, or nullopt for an id no GGUF file may contain.
std::optional<TypeTraits> type_traits(uint32_t id);
// Traits of a known type (never fails).
const TypeTraits& traits(Type t);
// Parses a name such as "q4_K" or "Q4_K" (case-insensitive).
std::optional<Type> type_from_name(std::string_view name);

inline std::string_view type_name(Type t) { return traits(t).name; }

// Bytes taken by a row of n elements; n must be a multiple of the block size.
size_t row_size(Type t, int64_t n);

}  // namespace kiln
