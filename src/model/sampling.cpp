// Token sampling (see sampling.h for the semantics and the error policy).
#include "model/sampling.h"

#include <algorithm>
#include <cfloat>
#include <chrono>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

namespace kiln {

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// Descending logit, ties by ascending id: a strict total order over distinct
// ids, so every sort and selection gives the same result on every standard
// library (std::sort/nth_element are not stable and their tie order differs).
struct ByLogitDesc {
    bool operator()(const TokenData& a, const TokenData& b) const {
        return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
    }
};

// A double in [0, 1) from 53 random bits (genrand_res53 of the MT reference
// code). std::uniform_real_distribution and std::discrete_distribution are not
// specified bit-for-bit, so they would break cross-platform reproducibility.
double uniform01(std::mt19937& rng) {
    const uint32_t a = static_cast<uint32_t>(rng()) >> 5;  // 27 bits
    const uint32_t b = static_cast<uint32_t>(rng()) >> 6;  // 26 bits
    return (a * 67108864.0 + b) * (1.0 / 9007199254740992.0);
}

uint32_t draw_random_seed() {
    try {
        std::random_device rd;
        return static_cast<uint32_t>(rd());
    } catch (const std::exception&) {
        // Some platforms have no entropy source; the clock is enough to make
        // "random seed" runs differ, which is all kRandomSeed promises.
        const auto t = std::chrono::high_resolution_clock::now().time_since_epoch().count();
        return static_cast<uint32_t>(t ^ (t >> 32));
    }
}

uint32_t resolve_seed(uint32_t seed) { return seed == kRandomSeed ? draw_random_seed() : seed; }

[[noreturn]] void bad_param(const std::string& what) { throw std::invalid_argument("sampling: " + what); }

size_t check_min_keep(int64_t min_keep) {
    if (min_keep < 0) bad_param("min_keep must be >= 0, got " + std::to_string(min_keep));
    // A sampler must leave at least one token; llama.cpp's "0 = disabled" is the same as 1.
    return static_cast<size_t>(std::max<int64_t>(1, min_keep));
}

// Keeps the candidates for which keep(td, index) is true, in their order.
// Any subset of a sorted top prefix is again one (its members stay in order
// and above every kept later entry), so `sorted` becomes the kept part of it.
template <typename Keep>
void compact(Candidates& c, Keep keep) {
    size_t out = 0, sorted_kept = 0;
    for (size_t i = 0; i < c.data.size(); ++i) {
        if (keep(c.data[i], i)) {
            if (i < c.sorted) ++sorted_kept;
            c.data[out++] = c.data[i];
        }
    }
    c.data.resize(out);
    c.sorted = sorted_kept;
    c.selected = -1;
}

// Keeps the candidates with logit >= threshold, if at least `min_keep` of
// them pass; returns false (and changes nothing) otherwise.
bool keep_at_least(Candidates& c, float threshold, size_t min_keep) {
    size_t kept = 0;
    for (const TokenData& td : c.data) kept += td.logit >= threshold;
    if (kept < min_keep) return false;
    if (kept < c.size()) compact(c, [threshold](const TokenData& td, size_t) { return td.logit >= threshold; });
    return true;
}

// The shortest prefix, in `cmp` order, of the keys in s whose mass reaches
// `target` (exceeds it when `strict`) and has at least min_keep keys: returns
// its length m and leaves those keys in s[0, m), with s[m - 1] the last of
// them in `cmp` order. Returns s.size() when no prefix qualifies.
//
// top_p and typical need this on up to 262k candidates, where the prefix can
// hold tens of thousands: instead of sorting, bisect with nth_element and
// compare the mass of the upper half with what is still needed (expected
// O(n)); only the last <= 256 keys are sorted and walked one by one.
template <typename T, typename Cmp, typename Mass>
size_t mass_prefix(std::vector<T>& s, Cmp cmp, Mass mass, double target, bool strict, size_t min_keep) {
    const auto reached = [&](double cum, size_t count) {
        return (strict ? cum > target : cum >= target) && count >= min_keep;
    };
    const auto at = [&s](size_t i) { return s.begin() + static_cast<std::ptrdiff_t>(i); };
    size_t lo = 0, hi = s.size();  // the answer lies in (lo, hi]; cum is the mass of s[0, lo)
    double cum = 0.0;
    // The usual nucleus is small: probe a small prefix first, then bisect.
    size_t probe = std::max<size_t>(64, min_keep);
    while (hi - lo > 256) {
        const size_t mid = probe > lo && probe < hi ? probe : lo + (hi - lo) / 2;
        probe = 0;
        std::nth_element(at(lo), at(mid), at(hi), cmp);
        double m = 0.0;
        for (size_t i = lo; i < mid; ++i) m += mass(s[i]);
        if (reached(cum + m, mid)) {
            hi = mid;
        } else {
            cum += m;
            lo = mid;
        }
    }
    std::sort(at(lo), at(hi), cmp);
    for (size_t i = lo; i < hi; ++i) {
        cum += mass(s[i]);
        if (reached(cum, i + 1)) return i + 1;
    }
    // hi < size only if the bisection saw the target reached at hi (a
    // different summation order can leave the walk an ulp short of it).
    return hi;
}

// Calls fn(candidate, value) for every candidate whose id is a key of `m`.
// Fresh candidates sit at index == id, so most lookups are direct; only
// candidates that a previous sampler moved are looked up in the map.
template <typename Map, typename Fn>
void for_each_listed(Candidates& c, const Map& m, Fn fn) {
    const size_t n = c.size();
    size_t hits = 0;
    for (const auto& [tok, value] : m) {
        if (tok >= 0 && static_cast<size_t>(tok) < n && c.data[static_cast<size_t>(tok)].id == tok) {
            fn(c.data[static_cast<size_t>(tok)], value);
            ++hits;
        }
    }
    if (hits == m.size()) return;
    // Some keys were not at their own index: they were moved or are absent.
    // A candidate at its own index was handled above (ids are unique).
    for (size_t i = 0; i < n; ++i) {
        TokenData& td = c.data[i];
        if (static_cast<size_t>(td.id) == i) continue;
        const auto it = m.find(td.id);
        if (it != m.end()) fn(td, it->second);
    }
}

void keep_only_best(Candidates& c) {
    const size_t best = c.argmax();
    std::swap(c.data[0], c.data[best]);
    c.data.resize(1);
    c.sorted = 1;
    c.selected = -1;
}

}  // namespace

// ---- Candidates -------------------------------------------------------------

void Candidates::fill(const float* logits, int64_t n) {
    if (logits == nullptr) bad_param("logits is null");
    if (n <= 0) bad_param("n_vocab must be > 0, got " + std::to_string(n));
    if (n > std::numeric_limits<int32_t>::max()) bad_param("n_vocab too large: " + std::to_string(n));
    data.resize(static_cast<size_t>(n));
    sorted = 0;
    selected = -1;
    n_vocab = n;
    // One pass both copies and validates: NaN and +inf would poison the
    // softmax (inf - inf), -inf is a legitimate "banned" mark.
    int64_t bad = -1;
    bool any_finite = false;
    for (int64_t i = 0; i < n; ++i) {
        const float l = logits[i];
        data[static_cast<size_t>(i)] = TokenData{static_cast<int32_t>(i), l, 0.0f};
        if (!(l < kInf)) {
            if (bad < 0) bad = i;
        } else {
            any_finite |= l > -kInf;
        }
    }
    if (bad >= 0) {
        const float l = logits[bad];
        bad_param("logit " + std::to_string(bad) + " is " + (std::isnan(l) ? "NaN" : "+inf"));
    }
    if (!any_finite) bad_param("every logit is -inf: no token can be sampled");
}

void Candidates::sort_top(size_t k) {
    k = std::min(k, data.size());
    if (k <= sorted) return;
    // Everything from `sorted` on is <= the sorted prefix, so only that tail
    // needs to be ordered.
    const auto first = data.begin() + static_cast<std::ptrdiff_t>(sorted);
    const auto mid = data.begin() + static_cast<std::ptrdiff_t>(k);
    const size_t tail = data.size() - sorted;
    const size_t want = k - sorted;
    if (k == data.size()) {
        std::sort(first, data.end(), ByLogitDesc{});
    } else if (want * 64 <= tail) {
        // Few wanted: heap selection rejects most elements with one compare
        // and moves almost nothing (much faster than nth_element here).
        std::partial_sort(first, mid, data.end(), ByLogitDesc{});
    } else {
        std::nth_element(first, mid, data.end(), ByLogitDesc{});
        std::sort(first, mid, ByLogitDesc{});
    }
    sorted = k;
}

void Candidates::truncate(size_t k) {
    if (k >= data.size()) return;
    data.resize(k);
    sorted = std::min(sorted, k);
    if (selected >= static_cast<int64_t>(k)) selected = -1;
}

float Candidates::max_logit() const {
    if (sorted > 0) return data[0].logit;
    float m = -kInf;
    for (const TokenData& td : data) m = std::max(m, td.logit);
    return m;
}

size_t Candidates::argmax() const {
    if (data.empty()) throw std::logic_error("sampling: no candidates left");
    if (sorted > 0) return 0;
    size_t best = 0;
    for (size_t i = 1; i < data.size(); ++i) {
        if (ByLogitDesc{}(data[i], data[best])) best = i;
    }
    return best;
}

double Candidates::softmax() {
    if (data.empty()) throw std::logic_error("sampling: no candidates left");
    const float m = max_logit();
    if (m == -kInf) bad_param("every remaining logit is -inf: no token can be sampled");
    double sum = 0.0;
    for (TokenData& td : data) {
        td.p = std::exp(td.logit - m);
        sum += td.p;
    }
    const float inv = static_cast<float>(1.0 / sum);
    for (TokenData& td : data) td.p *= inv;
    return static_cast<double>(m) + std::log(sum);
}

namespace {

// Entropy (nats) of the candidates' distribution; log p comes from the
// logits (log p = logit - log_z), which is exact where p underflows and
// saves a log per candidate.
double entropy_of(const Candidates& c, double log_z) {
    double h = 0.0;
    for (const TokenData& td : c.data) {
        if (td.p > 0.0f) h -= td.p * (td.logit - log_z);
    }
    return h;
}

}  // namespace

// ---- samplers ---------------------------------------------------------------

void GreedySampler::apply(Candidates& c) {
    const size_t best = c.argmax();
    if (c.data[best].logit == -kInf) bad_param("every remaining logit is -inf: no token can be sampled");
    c.selected = static_cast<int64_t>(best);
}

DistSampler::DistSampler(uint32_t seed) : seed_(seed), seed_cur_(resolve_seed(seed)), rng_(seed_cur_) {}

void DistSampler::reset() {
    seed_cur_ = resolve_seed(seed_);
    rng_.seed(seed_cur_);
}

void DistSampler::apply(Candidates& c) {
    c.softmax();
    double total = 0.0;
    for (const TokenData& td : c.data) total += td.p;
    // Walk the cumulative distribution in candidate order (deterministic:
    // every sampler orders candidates by a total order or keeps id order).
    const double target = uniform01(rng_) * total;
    double cum = 0.0;
    int64_t last_nonzero = -1;
    for (size_t i = 0; i < c.data.size(); ++i) {
        const float p = c.data[i].p;
        if (p <= 0.0f) continue;
        cum += p;
        last_nonzero = static_cast<int64_t>(i);
        if (cum > target) {
            c.selected = static_cast<int64_t>(i);
            return;
        }
    }
    // Only reachable through rounding (target just below total).
    c.selected = last_nonzero;
}

TemperatureSampler::TemperatureSampler(float temp, float dynatemp_range, float dynatemp_exponent)
    : temp_(temp), range_(dynatemp_range), exponent_(dynatemp_exponent) {
    if (!std::isfinite(temp)) bad_param("temp must be finite");
    if (!std::isfinite(dynatemp_range) || dynatemp_range < 0.0f) bad_param("dynatemp_range must be finite and >= 0");
    if (!std::isfinite(dynatemp_exponent)) bad_param("dynatemp_exponent must be finite");
}

void TemperatureSampler::apply(Candidates& c) {
    if (c.data.empty()) return;
    float t = temp_;
    if (range_ > 0.0f) {
        // Dynamic temperature (llama.cpp temp_ext): confident distributions
        // (low entropy) get the low end of the range, flat ones the high end.
        if (c.size() <= 1) return;
        const float min_temp = std::max(0.0f, temp_ - range_);
        const float max_temp = temp_ + range_;
        const float max_entropy = std::log(static_cast<float>(c.size()));
        const float entropy = static_cast<float>(entropy_of(c, c.softmax()));
        const float norm = max_entropy > 0.0f ? std::clamp(entropy / max_entropy, 0.0f, 1.0f) : 0.0f;
        t = min_temp + (max_temp - min_temp) * std::pow(norm, exponent_);
        if (!std::isfinite(t)) t = 0.0f;
    }
    if (t <= 0.0f) {
        keep_only_best(c);
        return;
    }
    if (t == 1.0f) return;
    const float inv = 1.0f / t;
    bool clamped = false;
    for (TokenData& td : c.data) {
        td.logit *= inv;
        // A tiny temperature can overflow a finite logit to +inf; keep it the
        // largest finite value so the softmax stays defined.
        if (td.logit == kInf) {
            td.logit = FLT_MAX;
            clamped = true;
        }
    }
    // Division by a positive constant keeps the order, unless clamping merged values.
    if (clamped) c.sorted = 0;
}

TopKSampler::TopKSampler(int32_t k) : k_(k) {}

void TopKSampler::apply(Candidates& c) {
    if (k_ <= 0 || static_cast<size_t>(k_) >= c.size()) return;
    c.sort_top(static_cast<size_t>(k_));
    c.truncate(static_cast<size_t>(k_));
}

TopPSampler::TopPSampler(float p, size_t min_keep) : p_(p), min_keep_(std::max<size_t>(1, min_keep)) {
    if (!(p > 0.0f && p <= 1.0f)) bad_param("top_p must be in (0, 1], got " + std::to_string(p));
}

void TopPSampler::apply(Candidates& c) {
    if (p_ >= 1.0f || c.size() <= 1) return;
    c.softmax();
    const size_t n = c.size();
    const size_t min_keep = std::min(min_keep_, n);
    // An already sorted prefix (after top_k, all of it) is walked in place.
    double cum = 0.0;
    for (size_t i = 0; i < c.sorted; ++i) {
        cum += c.data[i].p;
        if (cum >= p_ && i + 1 >= min_keep) {
            c.truncate(i + 1);
            return;
        }
    }
    const size_t head = c.sorted;
    if (head == n) return;  // rounding kept the sum just below p: keep all
    const auto reached = [&](double mass, size_t count) { return mass >= p_ && count >= min_keep; };

    // Bucket the rest by logit (bucket 0: within 1/64 of the max), one pass
    // summing mass and counts per bucket. The nucleus is then every bucket
    // before the one where the mass reaches p, plus a prefix of that one,
    // found among its (few) members alone. The bucket index falls as the
    // logit rises, so buckets never split the logit order.
    constexpr size_t kBuckets = 2048;
    constexpr float kRange = 32.0f;  // logits below max - 32 (p < 1.3e-14 * p_max) share the last bucket
    const float top = c.max_logit();
    const auto bucket_of = [top](float logit) {
        const float d = (top - logit) * (static_cast<float>(kBuckets) / kRange);
        return d < static_cast<float>(kBuckets - 1) ? static_cast<size_t>(d) : kBuckets - 1;
    };
    bucket_mass_.assign(kBuckets, 0.0);
    bucket_count_.assign(kBuckets, 0);
    for (size_t i = head; i < n; ++i) {
        const size_t b = bucket_of(c.data[i].logit);
        bucket_mass_[b] += c.data[i].p;
        ++bucket_count_[b];
    }
    size_t boundary = kBuckets, count = head;
    for (size_t b = 0; b < kBuckets; ++b) {
        if (reached(cum + bucket_mass_[b], count + bucket_count_[b])) {
            boundary = b;
            break;
        }
        cum += bucket_mass_[b];
        count += bucket_count_[b];
    }
    if (boundary == kBuckets) return;  // rounding: keep all

    // The boundary bucket's members, copied so the candidates keep their
    // (defined) order; nth_element's order differs between standard libraries.
    scratch_.clear();
    for (size_t i = head; i < n; ++i) {
        if (bucket_of(c.data[i].logit) == boundary) scratch_.push_back(c.data[i]);
    }
    const size_t m = mass_prefix(scratch_, ByLogitDesc{}, [](const TokenData& td) { return td.p; },
                                 static_cast<double>(p_) - cum, /*strict=*/false, min_keep > count ? min_keep - count : 0);
    const bool whole = m == scratch_.size();
    const TokenData last = scratch_[m - 1];
    compact(c, [&](const TokenData& td, size_t i) {
        if (i < head) return true;
        const size_t b = bucket_of(td.logit);
        return b < boundary || (b == boundary && (whole || !ByLogitDesc{}(last, td)));
    });
}

MinPSampler::MinPSampler(float p, size_t min_keep) : p_(p), min_keep_(std::max<size_t>(1, min_keep)) {
    if (!(p >= 0.0f && p <= 1.0f)) bad_param("min_p must be in [0, 1], got " + std::to_string(p));
}

void MinPSampler::apply(Candidates& c) {
    if (p_ <= 0.0f || c.size() <= 1) return;
    // p_i >= p * p_max  <=>  logit_i >= logit_max + log(p): no softmax needed.
    const float threshold = c.max_logit() + std::log(p_);
    if (keep_at_least(c, threshold, min_keep_)) return;
    c.sort_top(min_keep_);
    c.truncate(min_keep_);
}

TypicalSampler::TypicalSampler(float p, size_t min_keep) : p_(p), min_keep_(std::max<size_t>(1, min_keep)) {
    if (!(p > 0.0f && p <= 1.0f)) bad_param("typical_p must be in (0, 1], got " + std::to_string(p));
}

void TypicalSampler::apply(Candidates& c) {
    if (p_ >= 1.0f || c.size() <= 1) return;
    const double log_z = c.softmax();
    const double entropy = entropy_of(c, log_z);
    const size_t n = c.size();
    scores_.resize(n);
    order_.resize(n);
    for (size_t i = 0; i < n; ++i) {
        const TokenData& td = c.data[i];
        // |surprisal - entropy| with surprisal = -log p = log_z - logit.
        scores_[i] = td.p > 0.0f ? static_cast<float>(std::fabs(log_z - td.logit - entropy)) : kInf;
        order_[i] = static_cast<uint32_t>(i);
    }
    const auto& data = c.data;
    const auto& scores = scores_;
    const auto cmp = [&](uint32_t a, uint32_t b) {
        return scores[a] < scores[b] || (scores[a] == scores[b] && data[a].id < data[b].id);
    };
    const size_t m = mass_prefix(order_, cmp, [&data](uint32_t i) { return data[i].p; }, p_, /*strict=*/true, min_keep_);
    if (m == n) return;
    const uint32_t last = order_[m - 1];
    compact(c, [&](const TokenData&, size_t i) { return !cmp(last, static_cast<uint32_t>(i)); });
}

TopNSigmaSampler::TopNSigmaSampler(float n) : n_(n) {
    if (std::isnan(n)) bad_param("top_n_sigma must not be NaN");
}

void TopNSigmaSampler::apply(Candidates& c) {
    if (n_ <= 0.0f || c.size() <= 1) return;
    float max = -kInf;
    double sum = 0.0;
    size_t valid = 0;
    for (const TokenData& td : c.data) {
        if (td.logit == -kInf) continue;
        max = std::max(max, td.logit);
        sum += td.logit;
        ++valid;
    }
    if (valid == 0) return;
    const double mean = sum / static_cast<double>(valid);
    double acc = 0.0;
    for (const TokenData& td : c.data) {
        if (td.logit != -kInf) acc += (td.logit - mean) * (td.logit - mean);
    }
    const float sd = static_cast<float>(std::sqrt(acc / static_cast<double>(valid)));
    // The max always passes, so this cannot empty the list.
    keep_at_least(c, max - n_ * sd, 1);
}

XtcSampler::XtcSampler(float probability, float threshold, size_t min_keep, uint32_t seed)
    : probability_(probability), threshold_(threshold), min_keep_(std::max<size_t>(1, min_keep)), seed_(seed),
      rng_(resolve_seed(seed)) {
    if (!(probability >= 0.0f && probability <= 1.0f)) bad_param("xtc_probability must be in [0, 1]");
    if (!(threshold >= 0.0f && threshold <= 1.0f)) bad_param("xtc_threshold must be in [0, 1]");
}

void XtcSampler::reset() { rng_.seed(resolve_seed(seed_)); }

void XtcSampler::apply(Candidates& c) {
    // Two tokens above a threshold > 0.5 are impossible: nothing to exclude.
    if (probability_ <= 0.0f || threshold_ > 0.5f || c.size() < 2) return;
    if (uniform01(rng_) > probability_) return;
    c.softmax();
    // The candidates with p >= threshold are a top set; all but its lowest
    // go. No sort is needed to find them.
    size_t above = 0;
    size_t lowest = 0;
    for (size_t i = 0; i < c.size(); ++i) {
        if (c.data[i].p < threshold_) continue;
        if (above == 0 || ByLogitDesc{}(c.data[lowest], c.data[i])) lowest = i;
        ++above;
    }
    if (above < 2 || c.size() - (above - 1) < min_keep_) return;
    compact(c, [&](const TokenData& td, size_t i) { return td.p < threshold_ || i == lowest; });
}

PenaltiesSampler::PenaltiesSampler(int32_t last_n, float repeat, float freq, float present, int32_t n_ctx)
    : repeat_(repeat), freq_(freq), present_(present) {
    if (last_n < -1) bad_param("penalty_last_n must be >= -1, got " + std::to_string(last_n));
    if (last_n == -1 && n_ctx <= 0) bad_param("penalty_last_n = -1 (whole context) needs n_ctx > 0");
    if (!(repeat > 0.0f) || !std::isfinite(repeat)) bad_param("penalty_repeat must be finite and > 0");
    if (!std::isfinite(freq)) bad_param("penalty_freq must be finite");
    if (!std::isfinite(present)) bad_param("penalty_present must be finite");
    capacity_ = static_cast<size_t>(last_n == -1 ? n_ctx : last_n);
}

void PenaltiesSampler::accept(int32_t token) {
    if (token < 0) bad_param("accept: negative token " + std::to_string(token));
    if (capacity_ == 0) return;
    if (ring_.size() < capacity_) {
        ring_.push_back(token);
    } else {
        const int32_t old = ring_[head_];
        const auto it = counts_.find(old);
        if (--it->second == 0) counts_.erase(it);
        ring_[head_] = token;
        head_ = (head_ + 1) % capacity_;
    }
    ++counts_[token];
}

void PenaltiesSampler::reset() {
    ring_.clear();
    head_ = 0;
    counts_.clear();
}

int32_t PenaltiesSampler::count(int32_t token) const {
    const auto it = counts_.find(token);
    return it == counts_.end() ? 0 : it->second;
}

void PenaltiesSampler::penalize(TokenData& td, int32_t cnt) const {
    float& l = td.logit;
    // Dividing a negative logit would raise it, hence the multiply (llama.cpp).
    if (l <= 0.0f) {
        l *= repeat_;
    } else {
        l /= repeat_;
    }
    l -= static_cast<float>(cnt) * freq_ + (cnt > 0 ? present_ : 0.0f);
    if (l == kInf) l = FLT_MAX;  // a huge negative frequency penalty
}

void PenaltiesSampler::apply(Candidates& c) {
    if (counts_.empty() || (repeat_ == 1.0f && freq_ == 0.0f && present_ == 0.0f)) return;
    for_each_listed(c, counts_, [this](TokenData& td, int32_t cnt) { penalize(td, cnt); });
    c.sorted = 0;  // penalties do not preserve the order
}

LogitBiasSampler::LogitBiasSampler(std::vector<std::pair<int32_t, float>> biases) : biases_(std::move(biases)) {
    for (const auto& [tok, b] : biases_) {
        if (tok < 0) bad_param("logit_bias: negative token " + std::to_string(tok));
        if (std::isnan(b) || b == kInf) bad_param("logit_bias for token " + std::to_string(tok) + " must not be NaN or +inf");
    }
    // Duplicates add up; merged once here so apply() is a map walk.
    std::sort(biases_.begin(), biases_.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    size_t out = 0;
    for (size_t i = 0; i < biases_.size(); ++i) {
        if (out > 0 && biases_[out - 1].first == biases_[i].first) {
            biases_[out - 1].second += biases_[i].second;
        } else {
            biases_[out++] = biases_[i];
        }
    }
    biases_.resize(out);
}

void LogitBiasSampler::apply(Candidates& c) {
    if (biases_.empty()) return;
    // biases_ is sorted by token: a binary search serves as the map lookup.
    struct SortedView {
        const std::vector<std::pair<int32_t, float>>& v;
        using const_iterator = std::vector<std::pair<int32_t, float>>::const_iterator;
        const_iterator begin() const { return v.begin(); }
        const_iterator end() const { return v.end(); }
        size_t size() const { return v.size(); }
        const_iterator find(int32_t tok) const {
            const auto it = std::lower_bound(v.begin(), v.end(), tok, [](const auto& e, int32_t t) { return e.first < t; });
            return it != v.end() && it->first == tok ? it : v.end();
        }
    };
    for_each_listed(c, SortedView{biases_}, [](TokenData& td, float b) {
        td.logit += b;
        if (td.logit == kInf) td.logit = FLT_MAX;
    });
    c.sorted = 0;
}

// ---- chain ------------------------------------------------------------------

void validate_sampling_params(const SamplingParams& p, int32_t n_ctx) {
    if (!std::isfinite(p.temp)) bad_param("temp must be finite");
    if (!(p.top_p > 0.0f && p.top_p <= 1.0f)) bad_param("top_p must be in (0, 1], got " + std::to_string(p.top_p));
    if (!(p.min_p >= 0.0f && p.min_p <= 1.0f)) bad_param("min_p must be in [0, 1], got " + std::to_string(p.min_p));
    if (!(p.typical_p > 0.0f && p.typical_p <= 1.0f))
        bad_param("typical_p must be in (0, 1], got " + std::to_string(p.typical_p));
    if (p.penalty_last_n < -1) bad_param("penalty_last_n must be >= -1, got " + std::to_string(p.penalty_last_n));
    if (p.penalty_last_n == -1 && n_ctx <= 0) bad_param("penalty_last_n = -1 (whole context) needs n_ctx > 0");
    if (!(p.penalty_repeat > 0.0f) || !std::isfinite(p.penalty_repeat)) bad_param("penalty_repeat must be finite and > 0");
    if (!std::isfinite(p.penalty_freq)) bad_param("penalty_freq must be finite");
    if (!std::isfinite(p.penalty_present)) bad_param("penalty_present must be finite");
    check_min_keep(p.min_keep);
    if (!std::isfinite(p.dynatemp_range) || p.dynatemp_range < 0.0f) bad_param("dynatemp_range must be finite and >= 0");
    if (!std::isfinite(p.dynatemp_exponent)) bad_param("dynatemp_exponent must be finite");
    if (std::isnan(p.top_n_sigma)) bad_param("top_n_sigma must not be NaN");
    if (!(p.xtc_probability >= 0.0f && p.xtc_probability <= 1.0f)) bad_param("xtc_probability must be in [0, 1]");
    if (!(p.xtc_threshold >= 0.0f && p.xtc_threshold <= 1.0f)) bad_param("xtc_threshold must be in [0, 1]");
}

SamplerChain::SamplerChain(const SamplingParams& p, int32_t n_ctx) {
    validate_sampling_params(p, n_ctx);
    const size_t min_keep = check_min_keep(p.min_keep);
    const bool greedy = p.temp <= 0.0f;
    const bool xtc = p.xtc_probability > 0.0f && p.xtc_threshold <= 0.5f;
    const bool typical = p.typical_p < 1.0f;
    const bool penalties = p.penalty_last_n != 0 &&
                           (p.penalty_repeat != 1.0f || p.penalty_freq != 0.0f || p.penalty_present != 0.0f);

    if (!p.logit_bias.empty()) emplace<LogitBiasSampler>(p.logit_bias);
    if (penalties) emplace<PenaltiesSampler>(p.penalty_last_n, p.penalty_repeat, p.penalty_freq, p.penalty_present, n_ctx);
    // Greedy output is the best token of what the truncating samplers leave;
    // top_n_sigma, top_k, top_p and min_p always leave the best token, so
    // they only matter when typical or xtc (which can remove it) follow them.
    if (!greedy || typical || xtc) {
        if (p.top_n_sigma > 0.0f) emplace<TopNSigmaSampler>(p.top_n_sigma);
        if (p.top_k > 0) emplace<TopKSampler>(p.top_k);
        if (typical) emplace<TypicalSampler>(p.typical_p, min_keep);
        if (p.top_p < 1.0f) emplace<TopPSampler>(p.top_p, min_keep);
        if (p.min_p > 0.0f) emplace<MinPSampler>(p.min_p, min_keep);
        if (xtc) emplace<XtcSampler>(p.xtc_probability, p.xtc_threshold, min_keep, p.seed);
    }
    if (greedy) {
        emplace<GreedySampler>();
    } else {
        if (p.temp != 1.0f || p.dynatemp_range > 0.0f)
            emplace<TemperatureSampler>(p.temp, p.dynatemp_range, p.dynatemp_exponent);
        emplace<DistSampler>(p.seed);
    }
}

SamplerChain& SamplerChain::add(std::unique_ptr<Sampler> sampler) {
    if (!sampler) throw std::invalid_argument("sampling: add() given a null sampler");
    samplers_.push_back(std::move(sampler));
    return *this;
}

int32_t SamplerChain::sample(const float* logits, int64_t n_vocab) {
    const auto t0 = std::chrono::steady_clock::now();
    if (samplers_.empty()) throw std::logic_error("sampling: the chain is empty (add greedy or dist)");
    cands_.fill(logits, n_vocab);
    for (const auto& s : samplers_) {
        s->apply(cands_);
        if (cands_.data.empty())
            throw std::logic_error(std::string("sampling: sampler '") + s->name() + "' removed every candidate");
    }
    if (cands_.selected < 0 || cands_.selected >= static_cast<int64_t>(cands_.size()))
        throw std::logic_error("sampling: no sampler selected a token (end the chain with greedy or dist)");
    const int32_t token = cands_.data[static_cast<size_t>(cands_.selected)].id;
    t_sample_ms_ += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    ++n_sample_;
    return token;
}

void SamplerChain::accept(int32_t token) {
    if (token < 0) bad_param("accept: negative token " + std::to_string(token));
    for (const auto& s : samplers_) s->accept(token);
}

void SamplerChain::reset() {
    for (const auto& s : samplers_) s->reset();
}

std::string SamplerChain::describe() const {
    std::string out;
    for (const auto& s : samplers_) {
        if (!out.empty()) out += " -> ";
        out += s->name();
    }
    return out;
}

uint32_t SamplerChain::seed() const {
    for (auto it = samplers_.rbegin(); it != samplers_.rend(); ++it) {
        if (const auto* d = dynamic_cast<const DistSampler*>(it->get())) return d->seed();
    }
    return kRandomSeed;
}

}  // namespace kiln
