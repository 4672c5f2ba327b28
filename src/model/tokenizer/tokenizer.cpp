// Tokenizer: loading and the tokenize() pipeline (special-token partition,
// then SPM / BPE / WPM on each text fragment), following llama.cpp.
#include <algorithm>

#include "model/gguf.h"
#include "model/tokenizer/tokenizer_impl.h"
#include "model/tokenizer/wpm.h"

namespace kiln {
namespace {

constexpr std::string_view kSpaceMarker = "\xE2\x96\x81";  // U+2581

// SentencePiece's whitespace escape: every ' ' becomes U+2581.
void escape_spaces(std::string_view text, std::string& out) {
    out.reserve(out.size() + text.size() + text.size() / 2);
    for (char c : text) {
        if (c == ' ') {
            out += kSpaceMarker;
        } else {
            out += c;
        }
    }
}

}  // namespace

void Tokenizer::Impl::encode_fragment(std::string_view text, bool space_prefix, Scratch& scratch,
                                      std::vector<int32_t>& out) const {
    switch (vocab.type) {
        case VocabType::SPM: {
            std::string& buf = scratch.buf;
            buf.clear();
            if (space_prefix) buf = kSpaceMarker;
            escape_spaces(text, buf);
            spm->encode(vocab, buf, scratch.spm, out);
            break;
        }
        case VocabType::BPE: {
            if (vocab.escape_whitespace) {
                scratch.buf.clear();
                escape_spaces(text, scratch.buf);
                text = scratch.buf;
            }
            pre->split(text, scratch.pre);
            const std::string_view words = scratch.pre.text();
            for (const auto& [b, e] : scratch.pre.words) {
                const std::string_view word = words.substr(b, e - b);
                if (scratch.bpe.cache.get(word, out)) continue;
                const size_t before = out.size();
                bpe->encode_word(vocab, word, scratch.bpe, out);
                scratch.bpe.cache.put(word, std::span<const int32_t>(out).subspan(before));
            }
            break;
        }
        case VocabType::WPM:
            tok::wpm_encode(vocab, text, out);
            break;
    }
}

Tokenizer Tokenizer::from_gguf(const gguf::File& file) {
    auto impl = std::make_unique<Impl>();
    impl->vocab = tok::load_vocab(file);
    tok::Vocab& v = impl->vocab;
    try {
        switch (v.type) {
            case VocabType::SPM:
                impl->spm.emplace(v);
                break;
            case VocabType::BPE: {
                impl->bpe.emplace(file, v);
                impl->pre.emplace(v.pre_spec->regexes, v.source + ": metadata key 'tokenizer.ggml.pre' ('" + v.pre + "')");
                // llama.cpp takes the newline token from tokenizing "\n"
                // (before special tokens are known).
                std::vector<int32_t> ids;
                Impl::Scratch scratch;
                impl->encode_fragment("\n", false, scratch, ids);
                v.nl = ids.empty() ? v.pad : ids.front();
                break;
            }
            case VocabType::WPM:
                break;
        }
    } catch (const gguf::Error& e) {
        throw TokenizerError(e.what());
    }
    impl->special.emplace(v);
    impl->build_pieces();
    return Tokenizer(std::move(impl));
}

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

std::vector<int32_t> Tokenizer::tokenize(std::string_view text, const TokenizeOptions& opts) const {
    const tok::Vocab& v = impl_->vocab;
    std::vector<int32_t> out;
    out.reserve(text.size() / 3 + 4);
    std::vector<tok::Fragment> fragments;
    impl_->special->partition(v, text, opts.parse_special, fragments);

    const bool bos = opts.add_special && (v.type == VocabType::WPM ? v.bos != kNoToken : v.add_bos);
    if (bos) out.push_back(v.bos);
    // SPM puts a space in front of the text and after every special token.
    bool prev_special = true;
    Impl::Scratch scratch;
    for (const tok::Fragment& f : fragments) {
        if (f.token != kNoToken) {
            out.push_back(f.token);
            prev_special = true;
            continue;
        }
        impl_->encode_fragment(text.substr(f.begin, f.end - f.begin), v.add_space_prefix && prev_special, scratch, out);
        prev_special = false;
    }
    if (opts.add_special) {
        if (v.type == VocabType::WPM) {
            if (v.sep != kNoToken) out.push_back(v.sep);  // BERT always closes with [SEP]
        } else if (v.add_eos) {
            out.push_back(v.eos);
        }
    }
    return out;
}

int32_t Tokenizer::n_vocab() const { return impl_->vocab.n_tokens(); }
VocabType Tokenizer::type() const { return impl_->vocab.type; }
const std::string& Tokenizer::model_name() const { return impl_->vocab.model; }
const std::string& Tokenizer::pre_name() const { return impl_->vocab.pre; }

namespace {
void check_id(const tok::Vocab& v, int32_t id) {
    if (!v.valid(id)) {
        throw TokenizerError("token id " + std::to_string(id) + " is out of range (vocabulary of " +
                             std::to_string(v.n_tokens()) + ")");
    }
}
}  // namespace

TokenType Tokenizer::token_type(int32_t id) const {
    check_id(impl_->vocab, id);
    return impl_->vocab.types[id];
}
uint32_t Tokenizer::token_attrs(int32_t id) const {
    check_id(impl_->vocab, id);
    return impl_->vocab.attrs[id];
}
std::string_view Tokenizer::token_text(int32_t id) const {
    check_id(impl_->vocab, id);
    return impl_->vocab.text(id);
}
float Tokenizer::token_score(int32_t id) const {
    check_id(impl_->vocab, id);
    return impl_->vocab.scores[id];
}
int32_t Tokenizer::find_token(std::string_view text) const { return impl_->vocab.find(text); }
bool Tokenizer::is_control(int32_t id) const {
    return impl_->vocab.valid(id) && impl_->vocab.has(id, token_attr::Control);
}
bool Tokenizer::is_eog(int32_t id) const {
    return std::binary_search(impl_->vocab.eog.begin(), impl_->vocab.eog.end(), id);
}
const std::vector<int32_t>& Tokenizer::eog_tokens() const { return impl_->vocab.eog; }

int32_t Tokenizer::bos() const { return impl_->vocab.bos; }
int32_t Tokenizer::eos() const { return impl_->vocab.eos; }
int32_t Tokenizer::eot() const { return impl_->vocab.eot; }
int32_t Tokenizer::eom() const { return impl_->vocab.eom; }
int32_t Tokenizer::unk() const { return impl_->vocab.unk; }
int32_t Tokenizer::sep() const { return impl_->vocab.sep; }
int32_t Tokenizer::pad() const { return impl_->vocab.pad; }
int32_t Tokenizer::mask() const { return impl_->vocab.mask; }
int32_t Tokenizer::nl() const { return impl_->vocab.nl; }
int32_t Tokenizer::fim_pre() const { return impl_->vocab.fim_pre; }
int32_t Tokenizer::fim_suf() const { return impl_->vocab.fim_suf; }
int32_t Tokenizer::fim_mid() const { return impl_->vocab.fim_mid; }
int32_t Tokenizer::fim_pad() const { return impl_->vocab.fim_pad; }
int32_t Tokenizer::fim_rep() const { return impl_->vocab.fim_rep; }
int32_t Tokenizer::fim_sep() const { return impl_->vocab.fim_sep; }

bool Tokenizer::add_bos() const { return impl_->vocab.add_bos; }
bool Tokenizer::add_eos() const { return impl_->vocab.add_eos; }
bool Tokenizer::add_sep() const { return impl_->vocab.add_sep; }
bool Tokenizer::add_space_prefix() const { return impl_->vocab.add_space_prefix; }
bool Tokenizer::clean_spaces() const { return impl_->vocab.clean_spaces; }

}  // namespace kiln
