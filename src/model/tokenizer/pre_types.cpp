// Regex chains per tokenizer.ggml.pre value, as llama.cpp applies them.
//
// The patterns are written in the dialect llama.cpp feeds to std::regex
// (ECMAScript) with \p{..} category classes; pretokenizer.cpp rewrites them
// for PCRE2 the same way llama.cpp rewrites them for std::regex. Non-ASCII
// characters are spelled as \x{..} escapes so that no editor or tool can
// silently normalise them (several are Unicode singletons such as U+212A
// KELVIN SIGN, which NFC would turn into 'K').
#include "model/tokenizer/pre_types.h"

#include <array>

namespace kiln::tok {
namespace {

using R = std::string_view;

// Shared building blocks.
#define KILN_CONTRACTIONS R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD]))"
constexpr R kGpt2 = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))";
constexpr R kLlama3 = KILN_CONTRACTIONS
    R"(|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr R kQwen2 = KILN_CONTRACTIONS
    R"(|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr R kCjkKana = R"([\x{4E00}-\x{9FA5}\x{3040}-\x{309F}\x{30A0}-\x{30FF}]+)";
constexpr R kBloom = R"( ?[^(\s|.,!?\x{2026}\x{3002}\x{FF0C}\x{3001}\x{0964}\x{06D4}\x{060C})]+)";
constexpr R kSplitNewlines = R"([^\n]+|[\n]+)";

constexpr R kDefault[] = {R"([\p{P}\$\+<=>\^~\|]+)", kGpt2, R"(\p{N}+)", R"([0-9][0-9][0-9])"};
constexpr R kGpt2Set[] = {kGpt2};
constexpr R kLlama3Set[] = {kLlama3};
constexpr R kJais2[] = {KILN_CONTRACTIONS
    R"(|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s{512}(?!\S)|\s{256}(?!\S))"
    R"(|\s{128}(?!\S)|\s{64}(?!\S)|\s{32}(?!\S)|\s{16}(?!\S)|\s{8}(?!\S)|\s{4}(?!\S)|\s{1,2}(?!\S)|\s{1})"};
// The cased letters of deepseek's tokenizer.json.
constexpr R kDeepseekLlm[] = {
    R"([\r\n])",
    R"(\s?[A-Za-z\x{B5}\x{C0}-\x{D6}\x{D8}-\x{F6}\x{F8}-\x{1BA}\x{1BC}-\x{1BF}\x{1C4}-\x{293}\x{295}-\x{2AF})"
    R"(\x{370}-\x{373}\x{376}\x{377}\x{37B}-\x{37D}\x{37F}\x{386}\x{388}-\x{38A}\x{38C}\x{38E}-\x{3A1})"
    R"(\x{3A3}-\x{3F5}\x{3F7}-\x{481}\x{48A}-\x{52F}\x{531}-\x{556}\x{10A0}-\x{10C5}\x{13A0}-\x{13F5})"
    R"(\x{13F8}-\x{13FD}\x{1C90}-\x{1CBA}\x{1CBD}-\x{1CBF}\x{1D00}-\x{1D2B}\x{1D6B}-\x{1D77}\x{1D79}-\x{1D9A})"
    R"(\x{1E00}-\x{1F15}\x{1F18}-\x{1F1D}\x{1F20}-\x{1F45}\x{1F48}-\x{1F4D}\x{1F50}-\x{1F57}\x{1F59}\x{1F5B})"
    R"(\x{1F5D}\x{1F5F}-\x{1F7D}\x{1F80}-\x{1FB4}\x{1FB6}-\x{1FBC}\x{1FBE}\x{1FC2}-\x{1FC4}\x{1FC6}-\x{1FCC})"
    R"(\x{1FD0}-\x{1FD3}\x{1FD6}-\x{1FDB}\x{1FE0}-\x{1FEC}\x{1FF2}-\x{1FF4}\x{1FF6}-\x{1FFC}\x{2102}\x{2107})"
    R"(\x{210A}-\x{2113}\x{2115}\x{2119}-\x{211D}\x{2124}\x{2126}\x{2128}\x{212A}-\x{212D}\x{212F}-\x{2134})"
    R"(\x{2139}\x{213C}-\x{213F}\x{2145}-\x{2149}\x{214E}\x{2183}\x{2184}\x{2C00}-\x{2C7B}\x{2C7E}-\x{2CE4})"
    R"(\x{2CEB}-\x{2CEE}\x{2CF2}\x{2CF3}\x{A640}-\x{A66D}\x{A680}-\x{A69B}\x{A722}-\x{A76F}\x{A771}-\x{A787})"
    R"(\x{A78B}-\x{A78E}\x{AB70}-\x{ABBF}\x{FB00}-\x{FB06}\x{FB13}-\x{FB17}\x{FF21}-\x{FF3A}\x{FF41}-\x{FF5A})"
    R"(\x{10400}-\x{1044F}\x{104B0}-\x{104D3}\x{104D8}-\x{104FB}\x{10C80}-\x{10CB2}\x{10CC0}-\x{10CF2})"
    R"(\x{118A0}-\x{118DF}\x{1E900}-\x{1E943}]+)",
    R"(\s?[!-/:-~\x{FF01}-\x{FF0F}\x{FF1A}-\x{FF5E}\x{2018}-\x{201F}\x{3000}-\x{3002}]+)",
    R"(\s+$)",
    R"([\x{4E00}-\x{9FA5}\x{0800}-\x{4E00}\x{AC00}-\x{D7FF}]+)",
    R"(\p{N}+)",
};
constexpr R kDeepseek3Main = R"([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+)"
                              R"(| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr R kDeepseek3[] = {R"(\p{N}{1,3})", kCjkKana, kDeepseek3Main};
// "\p{Han}+" and "\p{AFMoE_digits}" are llama.cpp's names for hand-written
// splitters (custom_split.cpp), not regexes.
constexpr R kKimiK2[] = {R"(\p{Han}+)"};
constexpr R kAfmoe[] = {
    R"(\p{AFMoE_digits})",
    R"([\x{4E00}-\x{9FFF}\x{3400}-\x{4DBF}\x{F900}-\x{FAFF}\x{3040}-\x{309F}\x{30A0}-\x{30FF}\x{FF65}-\x{FF9F})"
    R"(\x{2F00}-\x{2FDF}\x{0E40}-\x{0E7F}\x{0E80}-\x{0EFF}\x{1780}-\x{17FF}\x{1000}-\x{109F}\x{AA60}-\x{AA7F})"
    R"(\x{A9E0}-\x{A9FF}\x{AC00}-\x{D7AF}\x{1100}-\x{11FF}]+)",
    kDeepseek3Main,
};
constexpr R kSpark25[] = {
    R"(\p{N}{1,3})",
    kCjkKana,
    R"([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+)"
    R"(| ?[\p{P}\p{S}]+|[\r\n]|\s+(?!\S)|\s+)",
    R"(\p{N})",
};
constexpr R kYoutu[] = {
    R"([\x{AC00}-\x{D7A3}\x{3131}-\x{318E}]+)"
    R"(|[\x{FF01}\x{2026}\x{201C}\x{201D}\x{2018}\x{2019}\x{2014}\x{FF1A}\x{FF1B}\x{FF0C}\x{3001}-\x{303F}\x{FE30}-\x{FE4F}]+)"
    R"(|[\x{3105}-\x{312F}]+|[\x{4E00}-\x{9FA5}\x{3040}-\x{309F}\x{30A0}-\x{30FF}]+)",
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+)" KILN_CONTRACTIONS
    R"(?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*)" KILN_CONTRACTIONS
    R"(?|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
};
constexpr R kDeepseekCoder[] = {
    R"([\r\n])",
    R"(\s?\p{L}+)",
    R"(\s?\p{P}+)",
    R"([\x{4E00}-\x{9FA5}\x{0800}-\x{4E00}\x{AC00}-\x{D7FF}]+)",
    R"(\p{N})",
};
constexpr R kFalcon[] = {R"([\p{P}\$\+<=>\^~\|`]+)", kGpt2, R"([0-9][0-9][0-9])"};
constexpr R kStarcoder[] = {R"(\p{N})", kGpt2};
constexpr R kQwen2Set[] = {kQwen2};
constexpr R kQwen35[] = {KILN_CONTRACTIONS
    R"(|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"};
constexpr R kBloomSet[] = {kBloom};
constexpr R kViking[] = {kBloom, R"(\p{N})"};
constexpr R kTekken[] = {
    R"([^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+)"
    R"(|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*)"
    R"(|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
};
constexpr R kChameleon[] = {
    R"(<sentinel:[0-9]+>)",
    R"((IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z)",
    R"(([\t\n]|    |  ))",
    R"(\p{N})",
    R"([\p{P}!-/:-@\[-`{-~])",
    kGpt2,
};
constexpr R kGpt4o[] = {
    R"([^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+)" KILN_CONTRACTIONS
    R"(?|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*)" KILN_CONTRACTIONS
    R"(?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
};
constexpr R kGraniteEmbMulti[] = {
    R"([^\r\n\p{L}\p{N}]?((?=[\p{L}\p{M}])([^a-z]))*((?=[\p{L}\p{M}])([^A-Z]))+)" KILN_CONTRACTIONS
    R"(?|[^\r\n\p{L}\p{N}]?((?=[\p{L}\p{M}])([^a-z]))+((?=[\p{L}\p{M}])([^A-Z]))*)" KILN_CONTRACTIONS
    R"(?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
};
constexpr R kTinyAya[] = {
    R"(\d{1,3}(?=(?:\d{3})*\b))",
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+)" KILN_CONTRACTIONS
    R"(?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*)" KILN_CONTRACTIONS
    R"(?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
};
constexpr R kSuperBpe[] = {R"(\p{N}+)", R"((?=(\d{3})+(?!\d)))"};
constexpr R kBailingMoe[] = {
    R"('(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*)"
    R"(|\s*[\r\n]|\s+(?!\S)|\s+)",
};
constexpr R kSeedCoder[] = {KILN_CONTRACTIONS
    R"(|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+|\s*[\r\n]+|\s+(?!\S)|\s+)"};
constexpr R kUfakzeka[] = {R"([^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"};
constexpr R kLaguna[] = {kSplitNewlines, kQwen2};
constexpr R kExaoneMoe[] = {KILN_CONTRACTIONS
    R"(|[^\r\n\p{L}\p{N}]?(?:\p{L}\p{M}*(?: \p{L}\p{M}*)*)+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]?|\s*[\r\n]|\s+(?!\S)|\s+)"};
constexpr R kNewlines[] = {kSplitNewlines};
constexpr R kMiniCpm5[] = {R"(\p{N}{1,3})", KILN_CONTRACTIONS
    R"(|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}+| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"};
constexpr R kWhitespace[] = {R"(\S+)"};
#undef KILN_CONTRACTIONS

// Flag sets, named after what they change from a plain byte-level BPE model.
struct Flags {
    bool clean_spaces = true, ignore_merges = false, add_bos = false, add_sep = false, no_bos = false;
    bool byte_encode = true, escape_ws = false, newline_runs = false;
};
constexpr Flags kPlain{};
constexpr Flags kNoClean{.clean_spaces = false};
constexpr Flags kLlama3Flags{.ignore_merges = true, .add_bos = true};
constexpr Flags kMerges{.ignore_merges = true};
constexpr Flags kNoCleanMerges{.clean_spaces = false, .ignore_merges = true};
constexpr Flags kTekkenFlags{.clean_spaces = false, .ignore_merges = true, .add_bos = true};
constexpr Flags kChameleonFlags{.clean_spaces = false, .add_bos = true};
constexpr Flags kSep{.add_sep = true};
constexpr Flags kNoBos{.no_bos = true};
constexpr Flags kGemma4{.byte_encode = false, .escape_ws = true, .newline_runs = true};
constexpr Flags kSarvam{.clean_spaces = false, .byte_encode = false, .escape_ws = true};
constexpr Flags kRawUtf8{.byte_encode = false};

struct Entry {
    R name;
    std::span<const R> regexes;
    Flags flags;
};

// One row per value llama.cpp accepts (aliases included), in its order.
constexpr Entry kEntries[] = {
    {"default", kDefault, kPlain},
    {"minicpm5", kMiniCpm5, kMerges},
    {"llama3", kLlama3Set, kLlama3Flags},
    {"llama-v3", kLlama3Set, kLlama3Flags},
    {"llama-bpe", kLlama3Set, kLlama3Flags},
    {"falcon3", kLlama3Set, kLlama3Flags},
    {"falcon-h1", kLlama3Set, kLlama3Flags},
    {"pixtral", kLlama3Set, kLlama3Flags},
    {"midm-2.0", kLlama3Set, kLlama3Flags},
    {"lfm2", kLlama3Set, kLlama3Flags},
    {"jina-v5-nano", kLlama3Set, kLlama3Flags},
    {"deepseek-llm", kDeepseekLlm, kNoClean},
    {"deepseek-coder", kDeepseekCoder, kNoClean},
    {"deepseek-v3", kDeepseek3, kNoClean},
    {"spark2_5", kSpark25, kNoClean},
    {"youtu", kYoutu, kNoCleanMerges},
    {"falcon", kFalcon, kPlain},
    {"mpt", kGpt2Set, kPlain},
    {"starcoder", kStarcoder, kPlain},
    {"gpt-2", kGpt2Set, kPlain},
    {"phi-2", kGpt2Set, kPlain},
    {"jina-es", kGpt2Set, kPlain},
    {"jina-de", kGpt2Set, kPlain},
    {"gigachat", kGpt2Set, kPlain},
    {"jina-v2-es", kGpt2Set, kPlain},
    {"jina-v2-de", kGpt2Set, kPlain},
    {"a.x-4.0", kGpt2Set, kPlain},
    {"mellum", kGpt2Set, kPlain},
    {"modern-bert", kGpt2Set, kPlain},
    {"jais-2", kJais2, kPlain},
    {"gemma4", kNewlines, kGemma4},
    {"granite-embed-multi-311m", kNewlines, kGemma4},
    {"sarvam-moe", kNewlines, kSarvam},
    {"jina-v1-en", kGpt2Set, kSep},
    {"jina-v2-code", kGpt2Set, kSep},
    {"roberta-bpe", kGpt2Set, kSep},
    {"whitespace", kWhitespace, kRawUtf8},
    {"refact", kStarcoder, kPlain},
    {"command-r", kStarcoder, kNoClean},
    {"qwen2", kQwen2Set, kNoClean},
    {"deepseek-r1-qwen", kQwen2Set, kNoClean},
    {"kormo", kQwen2Set, kNoClean},
    {"f2llmv2", kQwen2Set, kNoClean},
    {"qwen35", kQwen35, kNoClean},
    {"stablelm2", kQwen2Set, kPlain},
    {"olmo", kGpt2Set, kPlain},
    {"dbrx", kLlama3Set, kPlain},
    {"smaug-bpe", kLlama3Set, kPlain},
    {"poro-chat", kBloomSet, kNoClean},
    {"glm4", kLlama3Set, kNoBos},
    {"chatglm-bpe", kLlama3Set, kNoBos},
    {"viking", kViking, kNoClean},
    {"jais", kGpt2Set, kPlain},
    {"tekken", kTekken, kTekkenFlags},
    {"smollm", kStarcoder, kNoClean},
    {"codeshell", kStarcoder, kPlain},
    {"bloom", kBloomSet, kPlain},
    {"gpt3-finnish", kBloomSet, kPlain},
    {"exaone", kStarcoder, kPlain},
    {"exaone4", kGpt2Set, kPlain},
    {"exaone-moe", kExaoneMoe, kPlain},
    {"chameleon", kChameleon, kChameleonFlags},
    {"minerva-7b", kStarcoder, kPlain},
    {"megrez", kQwen2Set, kPlain},
    {"gpt-4o", kGpt4o, kNoClean},
    {"llama4", kGpt4o, kNoClean},
    {"kanana2", kGpt4o, kNoClean},
    {"talkie", kGpt4o, kNoClean},
    {"granite-embed-multi-97m", kGraniteEmbMulti, kNoCleanMerges},
    {"tiny_aya", kTinyAya, kNoClean},
    {"cohere2moe", kTinyAya, kNoClean},
    {"superbpe", kSuperBpe, kNoClean},
    {"trillion", kGpt2Set, kNoClean},
    {"granite-docling", kGpt2Set, kNoClean},
    {"bailingmoe", kBailingMoe, kNoClean},
    {"bailingmoe2", kBailingMoe, kNoClean},
    {"llada-moe", kBailingMoe, kNoClean},
    {"seed-coder", kSeedCoder, kNoClean},
    {"hunyuan", kQwen2Set, kNoClean},
    {"hunyuan-dense", kDeepseek3, kNoClean},
    {"hy_v4", kDeepseek3, kNoClean},
    {"joyai-llm", kDeepseek3, kNoClean},
    {"kimi-k2", kKimiK2, kNoClean},
    {"ufakzeka", kUfakzeka, kNoClean},
    {"grok-2", kQwen2Set, kNoClean},
    {"afmoe", kAfmoe, kNoClean},
    {"laguna", kLaguna, kNoClean},
    {"minimax-m2", kGpt4o, kNoClean},
    {"solar-open", kQwen2Set, kNoClean},
    {"mellum2", kStarcoder, kPlain},
};

PreTypeSpec to_spec(const Entry& e) {
    PreTypeSpec s;
    s.name = e.name;
    s.regexes = e.regexes;
    s.clean_spaces = e.flags.clean_spaces;
    s.ignore_merges = e.flags.ignore_merges;
    s.add_bos = e.flags.add_bos;
    s.add_sep = e.flags.add_sep;
    s.no_bos_token = e.flags.no_bos;
    s.byte_encode = e.flags.byte_encode;
    s.escape_whitespace = e.flags.escape_ws;
    s.newline_runs_whole = e.flags.newline_runs;
    return s;
}

// Built once; immutable afterwards.
const std::array<PreTypeSpec, std::size(kEntries)>& specs() {
    static const auto table = [] {
        std::array<PreTypeSpec, std::size(kEntries)> t{};
        for (size_t i = 0; i < std::size(kEntries); ++i) t[i] = to_spec(kEntries[i]);
        return t;
    }();
    return table;
}

}  // namespace

const PreTypeSpec* find_pre_type(std::string_view pre) {
    if (pre.empty()) pre = "default";
    for (const PreTypeSpec& s : specs()) {
        if (s.name == pre) return &s;
    }
    return nullptr;
}

}  // namespace kiln::tok
