// Pre-tokenizer steps that llama.cpp implements by hand instead of with a
// regex; its regex lists name them with pseudo-patterns, which we keep:
//   "\p{Han}+"          Kimi-K2's whole pattern set (Han runs, cased words
//                       with contractions, 1-3 digits, punctuation, spaces);
//   "\p{AFMoE_digits}"  AFMoE's digit grouping (counted from the right).
// Both reproduce llama.cpp's code paths exactly, quirks included.
#pragma once

#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

namespace kiln::tok {

enum class CustomSplit {
    None,
    KimiK2,
    AfmoeDigits,
};

CustomSplit custom_split_for(std::string_view pattern);

// Splits each code point range of `pieces` and appends the resulting ranges to `out`.
void custom_split(CustomSplit kind, const std::vector<uint32_t>& cps, const std::vector<std::pair<uint32_t, uint32_t>>& pieces,
                  std::vector<std::pair<uint32_t, uint32_t>>& out);

}  // namespace kiln::tok
