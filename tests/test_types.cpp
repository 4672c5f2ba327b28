// The type table must agree with the GGUF format's block sizes and byte sizes.
#include <gtest/gtest.h>

#include "core/types.h"
#include "kiln.h"

namespace {

struct Expected {
    uint32_t id;
    const char* name;
    int64_t block;
    size_t bytes;
};

// Values from the GGUF specification (gguf-py GGML_QUANT_SIZES; Q8_1 as the GGML C library defines it).
constexpr Expected kExpected[] = {
    {0, "f32", 1, 4},         {1, "f16", 1, 2},         {2, "q4_0", 32, 18},     {3, "q4_1", 32, 20},
    {6, "q5_0", 32, 22},      {7, "q5_1", 32, 24},      {8, "q8_0", 32, 34},     {9, "q8_1", 32, 36},
    {10, "q2_K", 256, 84},    {11, "q3_K", 256, 110},   {12, "q4_K", 256, 144},  {13, "q5_K", 256, 176},
    {14, "q6_K", 256, 210},   {15, "q8_K", 256, 292},   {20, "iq4_nl", 32, 18},  {30, "bf16", 1, 2},
    {16, "iq2_xxs", 256, 66}, {23, "iq4_xs", 256, 136}, {28, "f64", 1, 8},       {39, "mxfp4", 32, 17},
};

TEST(Types, TableMatchesGguf) {
    for (const auto& e : kExpected) {
        const auto tr = kiln::type_traits(e.id);
        ASSERT_TRUE(tr.has_value()) << e.name;
        EXPECT_EQ(tr->name, e.name);
        EXPECT_EQ(tr->block_size, e.block) << e.name;
        EXPECT_EQ(tr->type_size, e.bytes) << e.name;
        EXPECT_EQ(kiln::type_from_name(e.name), tr->type);
    }
}

TEST(Types, UnknownIdsAreRejected) {
    for (uint32_t id : {4u, 5u, 31u, 32u, 33u, 36u, 37u, 38u, 40u, 1000u, 0xffffffffu}) {
        EXPECT_FALSE(kiln::type_traits(id).has_value()) << id;
        EXPECT_EQ(kiln_type_name(static_cast<int32_t>(id)), nullptr) << id;
        EXPECT_EQ(kiln_type_size(static_cast<int32_t>(id)), 0u) << id;
    }
    EXPECT_FALSE(kiln::type_from_name("q4_2").has_value());
}

TEST(Types, EveryFoundationTypeHasAReference) {
    for (const char* name : {"f32", "f16", "bf16", "q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q8_1", "q2_K", "q3_K", "q4_K",
                             "q5_K", "q6_K", "q8_K", "iq4_nl"}) {
        EXPECT_EQ(kiln_type_has_reference(kiln_type_from_name(name)), 1) << name;
    }
}

TEST(Types, RowSize) {
    EXPECT_EQ(kiln_row_size(12, 4096), 16u * 144u);
    EXPECT_EQ(kiln_row_size(12, 100), 0u);  // not a multiple of 256
    EXPECT_EQ(kiln_row_size(2, 64), 36u);
}

}  // namespace
