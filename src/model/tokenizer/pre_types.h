// The BPE pre-tokenizer configurations llama.cpp knows, keyed by the value of
// tokenizer.ggml.pre: the regex chain that splits text into words, plus the
// tokenizer flags each value implies.
#pragma once

#include <span>
#include <string_view>

namespace kiln::tok {

struct PreTypeSpec {
    std::string_view name;                      // canonical value of tokenizer.ggml.pre
    std::span<const std::string_view> regexes;  // applied in order, each inside the previous one's pieces
    bool clean_spaces = true;                   // clean_up_tokenization_spaces when detokenizing
    bool ignore_merges = false;                 // a word that is itself a token is not merged
    bool add_bos = false;                       // default for add_bos_token (the key overrides it)
    bool add_sep = false;                       // default for add_sep_token
    bool no_bos_token = false;                  // the model has no BOS token (chatglm)
    bool byte_encode = true;                    // GPT-2 byte-to-unicode mapping; false: raw UTF-8 + <0xXX>
    bool escape_whitespace = false;             // ' ' -> U+2581 before splitting (SPM-style BPE)
    bool newline_runs_whole = false;            // gemma4: a run of '\n' that is a token stays whole
};

// The spec for a tokenizer.ggml.pre value, or null if llama.cpp does not know it.
// An empty value selects "default", as llama.cpp does.
const PreTypeSpec* find_pre_type(std::string_view pre);

}  // namespace kiln::tok
