#include "core/types.h"

#include <array>
#include <cctype>
#include <stdexcept>
#include <string>

#include "core/quant_blocks.h"

namespace kiln {
namespace {

constexpr std::array kTraits = {
    TypeTraits{Type::F32, "f32", 1, 4, false, true},
    TypeTraits{Type::F16, "f16", 1, 2, false, true},
    TypeTraits{Type::Q4_0, "q4_0", QK4_0, sizeof(block_q4_0), true, true},
    TypeTraits{Type::Q4_1, "q4_1", QK4_1, sizeof(block_q4_1), true, true},
    TypeTraits{Type::Q5_0, "q5_0", QK5_0, sizeof(block_q5_0), true, true},
    TypeTraits{Type::Q5_1, "q5_1", QK5_1, sizeof(block_q5_1), true, true},
    TypeTraits{Type::Q8_0, "q8_0", QK8_0, sizeof(block_q8_0), true, true},
    TypeTraits{Type::Q8_1, "q8_1", QK8_1, sizeof(block_q8_1), true, true},
    TypeTraits{Type::Q2_K, "q2_K", QK_K, sizeof(block_q2_K), true, true},
    TypeTraits{Type::Q3_K, "q3_K", QK_K, sizeof(block_q3_K), true, true},
    TypeTraits{Type::Q4_K, "q4_K", QK_K, sizeof(block_q4_K), true, true},
    TypeTraits{Type::Q5_K, "q5_K", QK_K, sizeof(block_q5_K), true, true},
    TypeTraits{Type::Q6_K, "q6_K", QK_K, sizeof(block_q6_K), true, true},
    TypeTraits{Type::Q8_K, "q8_K", QK_K, sizeof(block_q8_K), true, true},
    // Known to the file format so such files can be inspected; no kernels yet.
    TypeTraits{Type::IQ2_XXS, "iq2_xxs", QK_K, 66, true, false},
    TypeTraits{Type::IQ2_XS, "iq2_xs", QK_K, 74, true, false},
    TypeTraits{Type::IQ3_XXS, "iq3_xxs", QK_K, 98, true, false},
    TypeTraits{Type::IQ1_S, "iq1_s", QK_K, 50, true, false},
    TypeTraits{Type::IQ4_NL, "iq4_nl", QK4_NL, sizeof(block_iq4_nl), true, true},
    TypeTraits{Type::IQ3_S, "iq3_s", QK_K, 110, true, false},
    TypeTraits{Type::IQ2_S, "iq2_s", QK_K, 82, true, false},
    TypeTraits{Type::IQ4_XS, "iq4_xs", QK_K, 136, true, false},
    TypeTraits{Type::I8, "i8", 1, 1, false, false},
    TypeTraits{Type::I16, "i16", 1, 2, false, false},
    TypeTraits{Type::I32, "i32", 1, 4, false, false},
    TypeTraits{Type::I64, "i64", 1, 8, false, false},
    TypeTraits{Type::F64, "f64", 1, 8, false, false},
    TypeTraits{Type::IQ1_M, "iq1_m", QK_K, 56, true, false},
    TypeTraits{Type::BF16, "bf16", 1, 2, false, true},
    TypeTraits{Type::TQ1_0, "tq1_0", QK_K, 54, true, false},
    TypeTraits{Type::TQ2_0, "tq2_0", QK_K, 66, true, false},
    TypeTraits{Type::MXFP4, "mxfp4", 32, 17, true, false},
};

bool iequal(std::string_view a, std::string_view b) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i) {
        if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i])))
            return false;
    }
    return true;
}

}  // namespace

std::optional<TypeTraits> type_traits(uint32_t id) {
    for (const auto& t : kTraits) {
        if (static_cast<uint32_t>(t.type) == id) return t;
    }
    return std::nullopt;
}

const TypeTraits& traits(Type t) {
    for (const auto& tr : kTraits) {
        if (tr.type == t) return tr;
    }
    throw std::logic_error("kiln: type id " + std::to_string(static_cast<uint32_t>(t)) + " is not in the type table");
}

std::optional<Type> type_from_name(std::string_view name) {
    for (const auto& t : kTraits) {
        if (iequal(t.name, name)) return t.type;
    }
    return std::nullopt;
}

size_t row_size(Type t, int64_t n) {
    const auto& tr = traits(t);
    return static_cast<size_t>(n / tr.block_size) * tr.type_size;
}

}  // namespace kiln
