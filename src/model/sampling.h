// Token sampling: turning one row of logits into the next token.
//
// The design follows llama.cpp's sampler chain: a list of samplers, each of
// which edits a shared candidate list (removes candidates, changes logits,
// reorders them) and the last of which selects a token (greedy or a seeded
// random draw). SamplerChain(SamplingParams) builds llama.cpp's default
// chain; a custom chain is built by adding samplers one by one.
//
//   SamplerChain chain(SamplingParams{.temp = 0.8f, .top_k = 40, .seed = 42}, n_ctx);
//   for (int32_t t : prompt) chain.accept(t);       // penalties see the prompt too
//   int32_t tok = chain.sample(logits, n_vocab);    // does not accept by itself
//   chain.accept(tok);
//
// Errors (all exceptions, never UB):
//   - std::invalid_argument: a bad parameter (top_p outside (0,1], min_p outside
//     [0,1], typical_p outside (0,1], NaN temperature, penalty_repeat <= 0,
//     penalty_last_n < -1, penalty_last_n == -1 without n_ctx, min_keep < 0,
//     ...), a bad sample() input (null logits, n_vocab <= 0 or > INT32_MAX, a
//     NaN or +inf logit, every logit -inf), a negative token given to accept().
//     -inf logits are allowed: they mark banned tokens.
//   - std::logic_error: a chain whose samplers did not select a token (a custom
//     chain without greedy/dist at the end) or that removed every candidate.
//
// Reproducibility: the random draw uses std::mt19937 (whose output is fixed by
// the standard) and turns its bits into a double itself, every sort breaks ties
// by token id, so the same seed and logits give the same tokens on every
// platform (up to the last bit of the C library's expf, which can only matter
// when a draw lands within ~1e-7 of a boundary).
//
// A SamplerChain is not thread-safe; use one per sequence.
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace kiln {

// llama.cpp's LLAMA_DEFAULT_SEED: "pick a random seed".
constexpr uint32_t kRandomSeed = 0xFFFFFFFFu;

struct TokenData {
    int32_t id;
    float logit;
    float p;  // valid only after Candidates::softmax()
};

// The candidate list the samplers of a chain edit in turn. Its buffer is kept
// by the chain and reused from call to call, so after the first call
// sampling does not allocate.
class Candidates {
public:
    std::vector<TokenData> data;
    // The first `sorted` entries are the highest-logit candidates in descending
    // order (ties: lower id first) and no later entry is above them. Samplers
    // that change logits in a non-monotone way or reorder must lower it (0 is
    // always safe); sort_top() maintains it.
    size_t sorted = 0;
    // Index into data of the chosen token; set by a selecting sampler (greedy, dist).
    int64_t selected = -1;
    int64_t n_vocab = 0;

    // Refills from a logits row: data[i] = {i, logits[i], 0}. Validates the
    // row (see the error list above).
    void fill(const float* logits, int64_t n_vocab);

    size_t size() const { return data.size(); }
    // Makes the first min(k, size) entries the top ones in sorted order
    // (O(n + k log k)). The order of the entries after k is then whatever the
    // standard library left, which differs between libraries: a sampler that
    // keeps them must restore a defined order, or results would differ
    // across platforms (top_k truncates to k, so it need not).
    void sort_top(size_t k);
    void sort_all() { sort_top(data.size()); }
    // Keeps the first k entries.
    void truncate(size_t k);
    // Largest logit (data[0] when sorted, else a scan).
    float max_logit() const;
    // Index of the largest logit, the lowest id among ties.
    size_t argmax() const;
    // Sets p to the softmax of the logits, in the current order, and returns
    // log of the normaliser (log-sum-exp of the logits), so log p_i = logit_i
    // - result. Throws if every remaining logit is -inf.
    double softmax();
};

// One step of a chain.
class Sampler {
public:
    virtual ~Sampler() = default;
    virtual const char* name() const = 0;
    // Edits the candidates (and, for a selecting sampler, sets `selected`).
    virtual void apply(Candidates& cands) = 0;
    // Records a token that became part of the sequence (prompt or generated).
    virtual void accept(int32_t /*token*/) {}
    // Forgets the sequence (history, RNG state back to the seed).
    virtual void reset() {}
};

// ---- the samplers -----------------------------------------------------------

// Picks the highest logit (lowest id among ties).
class GreedySampler final : public Sampler {
public:
    const char* name() const override { return "greedy"; }
    void apply(Candidates& cands) override;
};

// Draws from the softmax of the remaining logits with a seeded std::mt19937.
class DistSampler final : public Sampler {
public:
    explicit DistSampler(uint32_t seed = kRandomSeed);
    const char* name() const override { return "dist"; }
    void apply(Candidates& cands) override;
    // Re-seeds: with the fixed seed, or with a fresh random one for kRandomSeed.
    void reset() override;
    // The seed in use (the drawn one when constructed with kRandomSeed).
    uint32_t seed() const { return seed_cur_; }

private:
    uint32_t seed_;
    uint32_t seed_cur_;
    std::mt19937 rng_;
};

// logit /= temp; temp <= 0 keeps only the highest logit. With
// dynatemp_range > 0 the temperature varies with the entropy of the
// candidates (llama.cpp's temp_ext): temp +- range, scaled by
// (entropy / max entropy)^exponent.
class TemperatureSampler final : public Sampler {
public:
    explicit TemperatureSampler(float temp, float dynatemp_range = 0.0f, float dynatemp_exponent = 1.0f);
    const char* name() const override { return "temperature"; }
    void apply(Candidates& cands) override;

private:
    float temp_, range_, exponent_;
};

// Keeps the k highest logits (k <= 0: no-op). Like llama.cpp, ignores min_keep.
class TopKSampler final : public Sampler {
public:
    explicit TopKSampler(int32_t k);
    const char* name() const override { return "top_k"; }
    void apply(Candidates& cands) override;

private:
    int32_t k_;
};

// Nucleus: keeps the smallest prefix (by probability) whose mass reaches p,
// at least min_keep candidates. p == 1: no-op. O(n) (a histogram of the
// probability mass by logit), not a full sort.
class TopPSampler final : public Sampler {
public:
    explicit TopPSampler(float p, size_t min_keep = 1);
    const char* name() const override { return "top_p"; }
    void apply(Candidates& cands) override;

private:
    float p_;
    size_t min_keep_;
    std::vector<TokenData> scratch_;  // reused
    std::vector<double> bucket_mass_;
    std::vector<uint32_t> bucket_count_;
};

// Keeps candidates whose probability is at least p times the largest one
// (at least min_keep). p == 0: no-op.
class MinPSampler final : public Sampler {
public:
    explicit MinPSampler(float p, size_t min_keep = 1);
    const char* name() const override { return "min_p"; }
    void apply(Candidates& cands) override;

private:
    float p_;
    size_t min_keep_;
};

// Locally typical sampling: orders candidates by how far their surprisal
// (-log p) is from the entropy and keeps the closest ones until their mass
// exceeds p (at least min_keep). p == 1: no-op. The kept candidates stay in
// their previous order (llama.cpp reorders them by typicality; the choice of
// token is distributed the same way).
class TypicalSampler final : public Sampler {
public:
    explicit TypicalSampler(float p, size_t min_keep = 1);
    const char* name() const override { return "typical"; }
    void apply(Candidates& cands) override;

private:
    float p_;
    size_t min_keep_;
    std::vector<float> scores_;     // |surprisal - entropy| per candidate, reused
    std::vector<uint32_t> order_;   // candidate indices, reused
};

// Keeps logits within n standard deviations of the max (n <= 0: no-op).
class TopNSigmaSampler final : public Sampler {
public:
    explicit TopNSigmaSampler(float n);
    const char* name() const override { return "top_n_sigma"; }
    void apply(Candidates& cands) override;

private:
    float n_;
};

// Exclude Top Choices: with the given probability, removes every candidate
// with p >= threshold except the least likely of them (llama.cpp semantics).
class XtcSampler final : public Sampler {
public:
    XtcSampler(float probability, float threshold, size_t min_keep = 1, uint32_t seed = kRandomSeed);
    const char* name() const override { return "xtc"; }
    void apply(Candidates& cands) override;
    void reset() override;

private:
    float probability_, threshold_;
    size_t min_keep_;
    uint32_t seed_;
    std::mt19937 rng_;
};

// Repetition, frequency and presence penalties over the last `last_n`
// accepted tokens (llama.cpp semantics): a token seen `count` > 0 times has
// its logit divided by `repeat` if positive, multiplied by it if <= 0, then
// lowered by count * freq + present. last_n == 0 disables, -1 means n_ctx.
class PenaltiesSampler final : public Sampler {
public:
    PenaltiesSampler(int32_t last_n, float repeat, float freq, float present, int32_t n_ctx = 0);
    const char* name() const override { return "penalties"; }
    void apply(Candidates& cands) override;
    void accept(int32_t token) override;
    void reset() override;
    // Times the token occurs in the window.
    int32_t count(int32_t token) const;

private:
    void penalize(TokenData& td, int32_t count) const;

    size_t capacity_;
    float repeat_, freq_, present_;
    std::vector<int32_t> ring_;  // the window, oldest at head_ once full
    size_t head_ = 0;
    std::unordered_map<int32_t, int32_t> counts_;  // kept in step with ring_
};

// Adds a fixed bias to chosen tokens (-inf bans a token). Biases must not be
// NaN or +inf. Tokens beyond the vocabulary are ignored.
class LogitBiasSampler final : public Sampler {
public:
    explicit LogitBiasSampler(std::vector<std::pair<int32_t, float>> biases);
    const char* name() const override { return "logit_bias"; }
    void apply(Candidates& cands) override;

private:
    std::vector<std::pair<int32_t, float>> biases_;
};

// ---- the chain --------------------------------------------------------------

// Parameters of the default chain, with llama.cpp's defaults. The first
// fields are in the order the brief's designated initialisers use.
struct SamplingParams {
    float temp = 0.80f;           // <= 0: greedy
    int32_t top_k = 40;           // <= 0: off
    float top_p = 0.95f;          // (0, 1]; 1: off
    float min_p = 0.05f;          // [0, 1]; 0: off
    float typical_p = 1.00f;      // (0, 1]; 1: off
    int32_t penalty_last_n = 64;  // 0: off, -1: the whole context (n_ctx)
    float penalty_repeat = 1.00f; // 1: off
    float penalty_freq = 0.00f;   // 0: off
    float penalty_present = 0.00f;// 0: off
    uint32_t seed = kRandomSeed;  // kRandomSeed: random
    int32_t min_keep = 1;         // 0 behaves as 1 (llama.cpp's "disabled")
    float dynatemp_range = 0.00f; // 0: plain temperature
    float dynatemp_exponent = 1.00f;
    float top_n_sigma = -1.00f;   // <= 0: off
    float xtc_probability = 0.00f;// 0: off
    float xtc_threshold = 0.10f;  // > 0.5: off
    std::vector<std::pair<int32_t, float>> logit_bias = {};  // applied first; -inf bans a token
};

class SamplerChain {
public:
    // An empty chain, to be filled with add().
    SamplerChain() = default;
    // llama.cpp's default chain: logit_bias -> penalties -> top_n_sigma ->
    // top_k -> typical -> top_p -> min_p -> xtc -> temperature -> dist. Samplers
    // that would do nothing with these parameters are left out. With
    // temp <= 0 the chain ends in greedy instead of temperature -> dist, and
    // the truncating samplers that always keep the best token are left out
    // too (unless typical or xtc, which can drop it, are on). n_ctx is needed
    // only for penalty_last_n == -1. Throws std::invalid_argument on bad params.
    explicit SamplerChain(const SamplingParams& params, int32_t n_ctx = 0);

    SamplerChain(SamplerChain&&) noexcept = default;
    SamplerChain& operator=(SamplerChain&&) noexcept = default;

    SamplerChain& add(std::unique_ptr<Sampler> sampler);
    template <typename S, typename... Args>
    S& emplace(Args&&... args) {
        auto s = std::make_unique<S>(std::forward<Args>(args)...);
        S& ref = *s;
        add(std::move(s));
        return ref;
    }

    // Runs the chain over one logits row and returns the chosen token. Does
    // not accept it.
    int32_t sample(const float* logits, int64_t n_vocab);
    int32_t sample(std::span<const float> logits) { return sample(logits.data(), static_cast<int64_t>(logits.size())); }
    // Records a token for the samplers with history (penalties).
    void accept(int32_t token);
    void accept(std::span<const int32_t> tokens) {
        for (int32_t t : tokens) accept(t);
    }
    // Forgets history and re-seeds; timings are kept (see reset_perf).
    void reset();

    size_t size() const { return samplers_.size(); }
    const Sampler& at(size_t i) const { return *samplers_.at(i); }
    Sampler& at(size_t i) { return *samplers_.at(i); }
    // "logit_bias -> penalties -> ... -> dist"
    std::string describe() const;
    // The seed of the chain's last dist sampler (kRandomSeed if it has none).
    uint32_t seed() const;
    // The candidates as the last sample() left them (for log-probabilities).
    const Candidates& candidates() const { return cands_; }

    double t_sample_ms() const { return t_sample_ms_; }
    int64_t n_sample() const { return n_sample_; }
    void reset_perf() {
        t_sample_ms_ = 0.0;
        n_sample_ = 0;
    }

private:
    std::vector<std::unique_ptr<Sampler>> samplers_;
    Candidates cands_;
    double t_sample_ms_ = 0.0;
    int64_t n_sample_ = 0;
};

// Validates params as the SamplerChain constructor does (throws std::invalid_argument).
void validate_sampling_params(const SamplingParams& params, int32_t n_ctx = 0);

}  // namespace kiln
