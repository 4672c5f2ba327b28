// The sampler chain: each sampler against hand-computed expectations, the
// random draw against the softmax probabilities, reproducibility, edge cases.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <iterator>
#include <limits>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "model/sampling.h"

namespace {

using kiln::Candidates;
using kiln::SamplerChain;
using kiln::SamplingParams;

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

Candidates make(const std::vector<float>& logits) {
    Candidates c;
    c.fill(logits.data(), static_cast<int64_t>(logits.size()));
    return c;
}

std::vector<int32_t> ids(const Candidates& c) {
    std::vector<int32_t> out;
    for (const auto& td : c.data) out.push_back(td.id);
    return out;
}

std::vector<int32_t> sorted_ids(const Candidates& c) {
    auto out = ids(c);
    std::sort(out.begin(), out.end());
    return out;
}

// Logits whose softmax is exactly the given distribution (up to rounding).
std::vector<float> logits_of(const std::vector<double>& probs) {
    std::vector<float> out;
    for (double p : probs) out.push_back(p > 0 ? static_cast<float>(std::log(p)) : kNegInf);
    return out;
}

// Deterministic pseudo-random logits (no dependence on <random> distributions).
std::vector<float> random_logits(size_t n, uint32_t seed, float scale = 8.0f) {
    std::vector<float> out(n);
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    for (auto& v : out) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        v = (static_cast<float>(s >> 40) / static_cast<float>(1ull << 24) - 0.5f) * scale;
    }
    return out;
}

SamplerChain dist_only(uint32_t seed) {
    SamplerChain ch;
    ch.emplace<kiln::DistSampler>(seed);
    return ch;
}

// ---- greedy -----------------------------------------------------------------

TEST(Sampling, GreedyPicksMax) {
    SamplerChain ch(SamplingParams{.temp = 0.0f});
    EXPECT_EQ(ch.describe(), "greedy");
    const std::vector<float> l = {0.1f, 2.5f, -1.0f, 2.4f, 0.0f};
    EXPECT_EQ(ch.sample(l), 1);
    const std::vector<float> neg = {-5.0f, -3.0f, -4.0f};
    EXPECT_EQ(ch.sample(neg), 1);
}

TEST(Sampling, GreedyTieTakesLowestId) {
    SamplerChain ch(SamplingParams{.temp = -1.0f});
    const std::vector<float> l = {1.0f, 3.0f, 0.0f, 3.0f, 3.0f};
    EXPECT_EQ(ch.sample(l), 1);
    kiln::GreedySampler g;
    auto c = make(l);
    std::reverse(c.data.begin(), c.data.end());  // the tie rule must not depend on order
    g.apply(c);
    EXPECT_EQ(c.data[static_cast<size_t>(c.selected)].id, 1);
}

// ---- top-k ------------------------------------------------------------------

TEST(Sampling, TopKKeepsK) {
    const std::vector<float> l = {0.5f, 3.0f, -1.0f, 2.0f, 4.0f, 1.0f};
    auto c = make(l);
    kiln::TopKSampler(3).apply(c);
    EXPECT_EQ(ids(c), (std::vector<int32_t>{4, 1, 3}));  // sorted, descending
    for (int32_t k : {0, -1, 6, 100}) {
        auto d = make(l);
        kiln::TopKSampler(k).apply(d);
        EXPECT_EQ(d.size(), l.size()) << k;
    }
    auto e = make(l);
    kiln::TopKSampler(1).apply(e);
    EXPECT_EQ(ids(e), (std::vector<int32_t>{4}));
}

TEST(Sampling, TopKTiesKeepLowestIds) {
    const std::vector<float> l(10, 1.0f);
    auto c = make(l);
    kiln::TopKSampler(4).apply(c);
    EXPECT_EQ(ids(c), (std::vector<int32_t>{0, 1, 2, 3}));
}

// ---- top-p ------------------------------------------------------------------

TEST(Sampling, TopPBoundaries) {
    const auto l = logits_of({0.5, 0.3, 0.15, 0.05});
    auto keep = [&](float p, size_t min_keep = 1) {
        auto c = make(l);
        kiln::TopPSampler(p, min_keep).apply(c);
        return sorted_ids(c);
    };
    EXPECT_EQ(keep(0.4f), (std::vector<int32_t>{0}));
    EXPECT_EQ(keep(0.79f), (std::vector<int32_t>{0, 1}));
    EXPECT_EQ(keep(0.81f), (std::vector<int32_t>{0, 1, 2}));
    EXPECT_EQ(keep(0.96f), (std::vector<int32_t>{0, 1, 2, 3}));
    EXPECT_EQ(keep(1.0f), (std::vector<int32_t>{0, 1, 2, 3}));
    EXPECT_EQ(keep(0.1f, 3), (std::vector<int32_t>{0, 1, 2}));  // min_keep wins
    EXPECT_EQ(keep(0.1f, 0), (std::vector<int32_t>{0}));        // 0 behaves as 1
}

TEST(Sampling, TopPExactBoundaryIsInclusive) {
    // Four equal logits: every probability is exactly 0.25, the sums exact.
    const std::vector<float> l(4, 0.0f);
    auto c = make(l);
    kiln::TopPSampler(0.5f).apply(c);
    EXPECT_EQ(ids(c), (std::vector<int32_t>{0, 1}));  // 0.25 + 0.25 >= 0.5
    auto d = make(l);
    kiln::TopPSampler(0.5000001f).apply(d);
    EXPECT_EQ(ids(d), (std::vector<int32_t>{0, 1, 2}));
}

TEST(Sampling, TopPLargeNucleus) {
    // A flat distribution over 4096 tokens (p = 2^-12 exactly): the nucleus is
    // far beyond the first probe, and ties go to the lowest ids.
    std::vector<float> l(4096, 0.0f);
    auto c = make(l);
    kiln::TopPSampler(0.5f).apply(c);
    EXPECT_EQ(c.size(), 2048u);
    for (size_t i = 0; i < c.size(); ++i) ASSERT_EQ(c.data[i].id, static_cast<int32_t>(i));
}

// Brute force: sort everything, walk the cumulative mass.
std::vector<int32_t> reference_top_p(const std::vector<float>& l, double p, size_t min_keep) {
    auto c = make(l);
    c.softmax();
    auto d = c.data;
    std::sort(d.begin(), d.end(), [](const auto& a, const auto& b) { return a.logit > b.logit || (a.logit == b.logit && a.id < b.id); });
    double cum = 0;
    std::vector<int32_t> out;
    for (size_t i = 0; i < d.size(); ++i) {
        out.push_back(d[i].id);
        cum += d[i].p;
        if (cum >= p && i + 1 >= min_keep) break;
    }
    std::sort(out.begin(), out.end());
    return out;
}

std::vector<int32_t> reference_typical(const std::vector<float>& l, double p, size_t min_keep) {
    auto c = make(l);
    c.softmax();
    double h = 0;
    for (const auto& td : c.data) h -= td.p > 0 ? td.p * std::log(static_cast<double>(td.p)) : 0.0;
    std::vector<std::pair<double, int32_t>> order;
    for (const auto& td : c.data) order.push_back({std::fabs(-std::log(static_cast<double>(td.p)) - h), td.id});
    std::sort(order.begin(), order.end());
    double cum = 0;
    std::vector<int32_t> out;
    for (size_t i = 0; i < order.size(); ++i) {
        out.push_back(order[i].second);
        cum += c.data[static_cast<size_t>(order[i].second)].p;
        if (cum > p && i + 1 >= min_keep) break;
    }
    std::sort(out.begin(), out.end());
    return out;
}

TEST(Sampling, TopPAndTypicalMatchFullSort) {
    // The mass selection (nth_element bisection) against a full sort, on
    // nuclei from a handful of tokens to most of the vocabulary.
    for (float scale : {80.0f, 30.0f, 8.0f, 1.0f, 0.001f}) {
        const auto l = random_logits(8000, 17, scale);
        for (float p : {0.1f, 0.5f, 0.9f, 0.99f, 0.999999f}) {
            for (size_t min_keep : {1u, 300u}) {
                auto c = make(l);
                kiln::TopPSampler(p, min_keep).apply(c);
                EXPECT_EQ(sorted_ids(c), reference_top_p(l, p, min_keep)) << scale << " " << p << " " << min_keep;
                auto d = make(l);
                kiln::TypicalSampler(p, min_keep).apply(d);
                const auto ref = reference_typical(l, p, min_keep);
                // log p from the logits vs std::log(p) may reorder near-equal
                // scores; the kept sets must agree up to such swaps.
                EXPECT_NEAR(static_cast<double>(d.size()), static_cast<double>(ref.size()), 2.0) << scale << " " << p;
                std::vector<int32_t> common;
                const auto got = sorted_ids(d);
                std::set_intersection(got.begin(), got.end(), ref.begin(), ref.end(), std::back_inserter(common));
                EXPECT_GE(common.size() + 2, ref.size()) << scale << " " << p;
            }
            // After top_k the sorted prefix is walked in place.
            auto e = make(l);
            kiln::TopKSampler(5000).apply(e);
            std::vector<float> lk(l.size(), kNegInf);
            for (const auto& td : e.data) lk[static_cast<size_t>(td.id)] = td.logit;
            kiln::TopPSampler(p).apply(e);
            EXPECT_EQ(sorted_ids(e), reference_top_p(lk, p, 1)) << "after top_k " << scale << " " << p;
        }
    }
}

// ---- min-p ------------------------------------------------------------------

TEST(Sampling, MinPThreshold) {
    // Probabilities relative to the max: 1, 0.5, 0.1, 0.04.
    const std::vector<float> l = {0.0f, std::log(0.5f), std::log(0.1f), std::log(0.04f)};
    auto keep = [&](float p, size_t min_keep = 1) {
        auto c = make(l);
        kiln::MinPSampler(p, min_keep).apply(c);
        return sorted_ids(c);
    };
    EXPECT_EQ(keep(0.05f), (std::vector<int32_t>{0, 1, 2}));
    EXPECT_EQ(keep(0.1f), (std::vector<int32_t>{0, 1, 2}));  // equal to the threshold: kept
    EXPECT_EQ(keep(0.11f), (std::vector<int32_t>{0, 1}));
    EXPECT_EQ(keep(0.0f), (std::vector<int32_t>{0, 1, 2, 3}));
    EXPECT_EQ(keep(1.0f), (std::vector<int32_t>{0}));
    EXPECT_EQ(keep(0.9f, 2), (std::vector<int32_t>{0, 1}));  // min_keep
    // Order is preserved (the default chain relies on it after top_k).
    auto c = make({std::log(0.1f), 0.0f, std::log(0.01f), std::log(0.5f)});
    kiln::MinPSampler(0.05f).apply(c);
    EXPECT_EQ(ids(c), (std::vector<int32_t>{0, 1, 3}));
}

// ---- typical ----------------------------------------------------------------

TEST(Sampling, TypicalKeepsMostTypical) {
    // p = 0.4 0.3 0.2 0.1: entropy 1.2799 nats; |surprisal - entropy| =
    // 0.364, 0.076, 0.329, 1.023, so the order is 1, 2, 0, 3.
    const auto l = logits_of({0.4, 0.3, 0.2, 0.1});
    auto keep = [&](float p, size_t min_keep = 1) {
        auto c = make(l);
        kiln::TypicalSampler(p, min_keep).apply(c);
        return sorted_ids(c);
    };
    EXPECT_EQ(keep(0.25f), (std::vector<int32_t>{1}));        // 0.3 > 0.25
    EXPECT_EQ(keep(0.45f), (std::vector<int32_t>{1, 2}));     // 0.5 > 0.45
    EXPECT_EQ(keep(0.6f), (std::vector<int32_t>{0, 1, 2}));   // 0.9 > 0.6
    EXPECT_EQ(keep(0.95f), (std::vector<int32_t>{0, 1, 2, 3}));
    EXPECT_EQ(keep(1.0f), (std::vector<int32_t>{0, 1, 2, 3}));  // off: untouched
    EXPECT_EQ(keep(0.1f, 3), (std::vector<int32_t>{0, 1, 2}));
}

// ---- penalties --------------------------------------------------------------

TEST(Sampling, PenaltiesArithmetic) {
    kiln::PenaltiesSampler pen(/*last_n=*/64, /*repeat=*/2.0f, /*freq=*/0.5f, /*present=*/0.25f);
    for (int32_t t : {0, 0, 1, 3}) pen.accept(t);
    EXPECT_EQ(pen.count(0), 2);
    EXPECT_EQ(pen.count(2), 0);
    auto c = make({2.0f, -2.0f, 1.0f, 0.0f, 3.0f});
    pen.apply(c);
    EXPECT_FLOAT_EQ(c.data[0].logit, 2.0f / 2 - (2 * 0.5f + 0.25f));  // positive: divided
    EXPECT_FLOAT_EQ(c.data[1].logit, -2.0f * 2 - (1 * 0.5f + 0.25f)); // negative: multiplied
    EXPECT_FLOAT_EQ(c.data[2].logit, 1.0f);                            // not seen
    EXPECT_FLOAT_EQ(c.data[3].logit, 0.0f * 2 - 0.75f);                // zero counts as <= 0
    EXPECT_FLOAT_EQ(c.data[4].logit, 3.0f);
}

TEST(Sampling, PenaltiesWindow) {
    kiln::PenaltiesSampler pen(/*last_n=*/2, 1.0f, 1.0f, 0.0f);
    for (int32_t t : {0, 1, 2, 2}) pen.accept(t);  // window: {2, 2}
    EXPECT_EQ(pen.count(0), 0);
    EXPECT_EQ(pen.count(1), 0);
    EXPECT_EQ(pen.count(2), 2);
    auto c = make({0.0f, 0.0f, 0.0f});
    pen.apply(c);
    EXPECT_EQ(c.data[0].logit, 0.0f);
    EXPECT_EQ(c.data[2].logit, -2.0f);
    pen.reset();
    EXPECT_EQ(pen.count(2), 0);

    // last_n == 0 disables; -1 means n_ctx (and needs it).
    kiln::PenaltiesSampler off(0, 2.0f, 1.0f, 1.0f);
    off.accept(0);
    auto d = make({1.0f, 1.0f});
    off.apply(d);
    EXPECT_EQ(d.data[0].logit, 1.0f);
    kiln::PenaltiesSampler all(-1, 1.0f, 1.0f, 0.0f, /*n_ctx=*/3);
    for (int32_t t : {5, 5, 5, 5}) all.accept(t);
    EXPECT_EQ(all.count(5), 3);
    EXPECT_THROW(kiln::PenaltiesSampler(-1, 1.1f, 0, 0), std::invalid_argument);
    EXPECT_THROW(kiln::PenaltiesSampler(-2, 1.1f, 0, 0), std::invalid_argument);
    EXPECT_THROW(kiln::PenaltiesSampler(64, 0.0f, 0, 0), std::invalid_argument);
}

TEST(Sampling, PenaltiesAfterReordering) {
    // Penalties behind top_k see moved candidates: the map lookup path.
    SamplerChain ch;
    ch.emplace<kiln::TopKSampler>(3);
    ch.emplace<kiln::PenaltiesSampler>(64, 10.0f, 0.0f, 0.0f);
    ch.emplace<kiln::GreedySampler>();
    const std::vector<float> l = {5.0f, 4.0f, 3.0f, 1.0f, 0.0f};
    EXPECT_EQ(ch.sample(l), 0);
    ch.accept(0);
    EXPECT_EQ(ch.sample(l), 1);  // 5 / 10 = 0.5 < 4
    ch.accept(1);
    EXPECT_EQ(ch.sample(l), 2);
    ch.reset();
    EXPECT_EQ(ch.sample(l), 0);
}

TEST(Sampling, PenaltiesInDefaultChain) {
    SamplerChain ch(SamplingParams{.temp = 0.0f, .penalty_last_n = 64, .penalty_repeat = 1.5f});
    EXPECT_EQ(ch.describe(), "penalties -> greedy");
    const std::vector<float> l = {3.0f, 2.5f, 1.0f};
    EXPECT_EQ(ch.sample(l), 0);
    ch.accept(std::vector<int32_t>{0, 7});  // 7: beyond this vocabulary, ignored
    EXPECT_EQ(ch.sample(l), 1);             // 3 / 1.5 = 2 < 2.5
}

// ---- temperature ------------------------------------------------------------

TEST(Sampling, TemperatureScalesProbabilities) {
    const std::vector<float> l = {1.0f, 2.0f, 3.0f};
    for (float t : {0.5f, 1.0f, 2.0f}) {
        auto c = make(l);
        kiln::TemperatureSampler(t).apply(c);
        c.softmax();
        double z = 0;
        for (float v : l) z += std::exp(v / t);
        for (size_t i = 0; i < l.size(); ++i) EXPECT_NEAR(c.data[i].p, std::exp(l[i] / t) / z, 1e-6) << t;
    }
    auto c = make(l);
    kiln::TemperatureSampler(0.0f).apply(c);
    EXPECT_EQ(ids(c), (std::vector<int32_t>{2}));
    // A tiny temperature overflows to +inf; it must stay usable.
    auto d = make({1.0f, 2.0f});
    kiln::TemperatureSampler(1e-38f).apply(d);
    kiln::GreedySampler().apply(d);
    EXPECT_EQ(d.data[static_cast<size_t>(d.selected)].id, 1);
}

TEST(Sampling, DynamicTemperature) {
    // A flat distribution has normalized entropy 1: temperature = temp + range.
    const std::vector<float> flat(4, 1.0f);
    auto c = make(flat);
    kiln::TemperatureSampler(1.0f, 0.5f, 1.0f).apply(c);
    for (const auto& td : c.data) EXPECT_NEAR(td.logit, 1.0f / 1.5f, 1e-5);
    // A one-hot distribution has entropy 0: temperature = max(0, temp - range) = 0 -> greedy.
    auto d = make({0.0f, kNegInf, kNegInf});
    kiln::TemperatureSampler(0.5f, 0.5f, 1.0f).apply(d);
    EXPECT_EQ(ids(d), (std::vector<int32_t>{0}));
}

// ---- top-n-sigma, xtc, logit bias -------------------------------------------

TEST(Sampling, TopNSigma) {
    // logits 0,0,0,4: mean 1, sd sqrt(3) = 1.732; n = 1 keeps >= 2.27: only id 3.
    auto c = make({0.0f, 0.0f, 0.0f, 4.0f});
    kiln::TopNSigmaSampler(1.0f).apply(c);
    EXPECT_EQ(ids(c), (std::vector<int32_t>{3}));
    auto d = make({0.0f, 0.0f, 0.0f, 4.0f});
    kiln::TopNSigmaSampler(3.0f).apply(d);  // keeps >= -1.2: all
    EXPECT_EQ(d.size(), 4u);
}

TEST(Sampling, Xtc) {
    // p = 0.5, 0.3, 0.15, 0.05 with threshold 0.2: removes 0 (keeps 1, the least likely above it).
    const auto l = logits_of({0.5, 0.3, 0.15, 0.05});
    auto c = make(l);
    kiln::XtcSampler(1.0f, 0.2f, 1, 7).apply(c);
    EXPECT_EQ(sorted_ids(c), (std::vector<int32_t>{1, 2, 3}));
    auto d = make(l);
    kiln::XtcSampler(1.0f, 0.6f, 1, 7).apply(d);  // threshold > 0.5: off
    EXPECT_EQ(d.size(), 4u);
    auto e = make(l);
    kiln::XtcSampler(1.0f, 0.2f, 4, 7).apply(e);  // would leave 3 < min_keep
    EXPECT_EQ(e.size(), 4u);
    auto f = make(l);
    kiln::XtcSampler(0.0f, 0.2f, 1, 7).apply(f);  // probability 0: off
    EXPECT_EQ(f.size(), 4u);
}

TEST(Sampling, LogitBias) {
    SamplerChain ch(SamplingParams{.temp = 0.0f, .logit_bias = {{0, kNegInf}, {2, 1.0f}, {2, 1.5f}, {99, 5.0f}}});
    EXPECT_EQ(ch.describe(), "logit_bias -> greedy");
    EXPECT_EQ(ch.sample(std::vector<float>{5.0f, 3.0f, 1.0f}), 2);  // 0 banned, 1 + 2.5 > 3
    EXPECT_THROW(kiln::LogitBiasSampler({{1, std::numeric_limits<float>::infinity()}}), std::invalid_argument);
    EXPECT_THROW(kiln::LogitBiasSampler({{-1, 1.0f}}), std::invalid_argument);
}

// ---- the random draw --------------------------------------------------------

TEST(Sampling, DistMatchesSoftmax) {
    // Pearson chi-square over 200k draws, 7 degrees of freedom. With a fixed
    // seed the result is deterministic; 35 is the 1e-5 critical value, so a
    // correct sampler passes with any seed and a biased one cannot.
    const std::vector<float> l = {1.0f, 0.5f, 0.0f, -0.5f, 2.0f, -3.0f, 1.5f, 0.2f};
    auto ch = dist_only(12345);
    const int n = 200000;
    std::vector<int> hist(l.size(), 0);
    for (int i = 0; i < n; ++i) ++hist[static_cast<size_t>(ch.sample(l))];
    double z = 0;
    for (float v : l) z += std::exp(static_cast<double>(v));
    double chi2 = 0;
    for (size_t i = 0; i < l.size(); ++i) {
        const double expected = n * std::exp(static_cast<double>(l[i])) / z;
        chi2 += (hist[i] - expected) * (hist[i] - expected) / expected;
    }
    EXPECT_LT(chi2, 35.0);
    EXPECT_EQ(ch.n_sample(), n);
    EXPECT_GT(ch.t_sample_ms(), 0.0);
}

TEST(Sampling, DistNeverPicksBanned) {
    auto ch = dist_only(7);
    const std::vector<float> l = {kNegInf, 0.0f, kNegInf, 0.0f, kNegInf};
    for (int i = 0; i < 2000; ++i) {
        const int32_t t = ch.sample(l);
        ASSERT_TRUE(t == 1 || t == 3) << t;
    }
}

TEST(Sampling, SeededReproducibility) {
    const auto l = random_logits(1000, 3, 4.0f);
    SamplingParams p{.temp = 1.0f, .top_k = 0, .top_p = 1.0f, .min_p = 0.0f, .seed = 42};
    SamplerChain a(p), b(p);
    EXPECT_EQ(a.seed(), 42u);
    std::vector<int32_t> sa, sb;
    for (int i = 0; i < 64; ++i) {
        sa.push_back(a.sample(l));
        sb.push_back(b.sample(l));
    }
    EXPECT_EQ(sa, sb);
    a.reset();  // back to the seed
    std::vector<int32_t> again;
    for (int i = 0; i < 64; ++i) again.push_back(a.sample(l));
    EXPECT_EQ(sa, again);

    p.seed = 43;
    SamplerChain c(p);
    std::vector<int32_t> sc;
    for (int i = 0; i < 64; ++i) sc.push_back(c.sample(l));
    EXPECT_NE(sa, sc);
}

TEST(Sampling, GoldenSequence) {
    // std::mt19937 is fully specified and the draw does its own bits->double,
    // so this sequence must be identical on every platform and compiler.
    const std::vector<float> l(16, 0.0f);  // uniform: p = 1/16 exactly
    auto ch = dist_only(2024);
    std::vector<int32_t> got;
    for (int i = 0; i < 12; ++i) got.push_back(ch.sample(l));
    std::string s;
    for (int32_t t : got) s += std::to_string(t) + ",";
    EXPECT_EQ(s, "9,11,3,0,3,1,11,10,7,7,0,12,");
}

TEST(Sampling, RandomSeedIsDrawnAndReportable) {
    // A random-seed run can be replayed from the seed it reports.
    const auto l = random_logits(100, 5, 4.0f);
    SamplerChain r(SamplingParams{.top_k = 0, .top_p = 1.0f, .min_p = 0.0f, .seed = kiln::kRandomSeed});
    SamplerChain replay(SamplingParams{.top_k = 0, .top_p = 1.0f, .min_p = 0.0f, .seed = r.seed()});
    for (int i = 0; i < 32; ++i) ASSERT_EQ(r.sample(l), replay.sample(l));
    SamplerChain g(SamplingParams{.temp = 0.0f});
    EXPECT_EQ(g.seed(), kiln::kRandomSeed);  // no dist sampler
}

// ---- the default chain ------------------------------------------------------

TEST(Sampling, DefaultChainOrder) {
    SamplerChain def{SamplingParams{}};
    EXPECT_EQ(def.describe(), "top_k -> top_p -> min_p -> temperature -> dist");
    SamplerChain full(SamplingParams{.temp = 0.7f, .top_k = 40, .top_p = 0.9f, .min_p = 0.1f, .typical_p = 0.9f,
                                     .penalty_last_n = 64, .penalty_repeat = 1.1f, .seed = 1, .top_n_sigma = 2.0f,
                                     .xtc_probability = 0.5f, .logit_bias = {{1, 1.0f}}});
    EXPECT_EQ(full.describe(),
              "logit_bias -> penalties -> top_n_sigma -> top_k -> typical -> top_p -> min_p -> xtc -> temperature -> dist");
    SamplerChain plain(SamplingParams{.temp = 1.0f, .top_k = 0, .top_p = 1.0f, .min_p = 0.0f});
    EXPECT_EQ(plain.describe(), "dist");
    // Greedy keeps typical (it can drop the best token) and what precedes it.
    SamplerChain gt(SamplingParams{.temp = 0.0f, .typical_p = 0.5f});
    EXPECT_EQ(gt.describe(), "top_k -> typical -> top_p -> min_p -> greedy");
}

TEST(Sampling, DefaultChainRespectsTruncation) {
    // With top_k = 3 only the three best can come out, whatever the seed.
    const std::vector<float> l = {0.0f, 1.0f, 5.0f, 4.9f, 4.8f, 4.7f, 0.5f};
    SamplerChain ch(SamplingParams{.temp = 1.5f, .top_k = 3, .top_p = 1.0f, .min_p = 0.0f, .seed = 9});
    std::set<int32_t> seen;
    for (int i = 0; i < 500; ++i) seen.insert(ch.sample(l));
    EXPECT_EQ(seen, (std::set<int32_t>{2, 3, 4}));
    // min_p 0.5 relative to exp(5): keeps 4.9, 4.8 (>= 5 + ln 0.5 = 4.31) too, nothing below.
    SamplerChain mp(SamplingParams{.temp = 1.0f, .top_k = 0, .top_p = 1.0f, .min_p = 0.5f, .seed = 9});
    seen.clear();
    for (int i = 0; i < 500; ++i) seen.insert(mp.sample(l));
    EXPECT_EQ(seen, (std::set<int32_t>{2, 3, 4, 5}));
}

// ---- large vocabulary -------------------------------------------------------

TEST(Sampling, LargeVocab) {
    const size_t n = 262144;
    const auto l = random_logits(n, 11, 20.0f);
    const auto best = static_cast<int32_t>(std::max_element(l.begin(), l.end()) - l.begin());
    std::vector<float> sorted_l = l;
    std::sort(sorted_l.begin(), sorted_l.end(), std::greater<float>());

    SamplerChain greedy(SamplingParams{.temp = 0.0f});
    EXPECT_EQ(greedy.sample(l), best);

    SamplerChain def(SamplingParams{.seed = 5});
    for (int i = 0; i < 20; ++i) {
        const int32_t t = def.sample(l);
        ASSERT_GE(l[static_cast<size_t>(t)], sorted_l[39]) << "outside the top 40";
        def.accept(t);
    }
    std::printf("default chain, n_vocab %zu: %.3f ms/sample\n", n, def.t_sample_ms() / def.n_sample());

    // No top_k: top_p and min_p work on the full vocabulary.
    SamplerChain wide(SamplingParams{.temp = 1.0f, .top_k = 0, .top_p = 0.9f, .min_p = 0.0f, .typical_p = 0.95f,
                                     .penalty_last_n = 64, .penalty_repeat = 1.1f, .seed = 5});
    for (int i = 0; i < 5; ++i) wide.accept(wide.sample(l));
    std::printf("top_k 0 + typical + top_p + penalties, n_vocab %zu: %.3f ms/sample\n", n,
                wide.t_sample_ms() / wide.n_sample());
    EXPECT_EQ(wide.n_sample(), 5);
}

// ---- edge cases and errors --------------------------------------------------

TEST(Sampling, AllNegInfButOne) {
    std::vector<float> l(1000, kNegInf);
    l[777] = -3.0f;
    for (auto p : {SamplingParams{}, SamplingParams{.temp = 0.0f}, SamplingParams{.top_k = 0, .top_p = 0.1f},
                   SamplingParams{.top_k = 0, .top_p = 1.0f, .min_p = 0.0f, .typical_p = 0.2f},
                   SamplingParams{.penalty_last_n = 8, .penalty_repeat = 1.3f, .penalty_freq = 0.2f, .top_n_sigma = 1.0f,
                                  .xtc_probability = 1.0f}}) {
        p.seed = 3;
        SamplerChain ch(p);
        for (int i = 0; i < 5; ++i) {
            ASSERT_EQ(ch.sample(l), 777) << ch.describe();
            ch.accept(777);
        }
    }
}

TEST(Sampling, MinKeepInDefaultChain) {
    // A very peaked distribution: top_p and min_p alone keep one token, min_keep 3 keeps three.
    const std::vector<float> l = {20.0f, 0.0f, -1.0f, -2.0f, -3.0f};
    SamplerChain ch(SamplingParams{.temp = 100.0f, .top_k = 0, .top_p = 0.5f, .min_p = 0.5f, .seed = 1, .min_keep = 3});
    std::set<int32_t> seen;
    for (int i = 0; i < 300; ++i) seen.insert(ch.sample(l));
    EXPECT_EQ(seen, (std::set<int32_t>{0, 1, 2}));
}

TEST(Sampling, BadInputsThrow) {
    SamplerChain ch(SamplingParams{.seed = 1});
    const std::vector<float> ok = {0.0f, 1.0f};
    EXPECT_THROW(ch.sample(nullptr, 2), std::invalid_argument);
    EXPECT_THROW(ch.sample(ok.data(), 0), std::invalid_argument);
    EXPECT_THROW(ch.sample(ok.data(), -5), std::invalid_argument);
    EXPECT_THROW(ch.sample(std::vector<float>{0.0f, std::nanf("")}), std::invalid_argument);
    EXPECT_THROW(ch.sample(std::vector<float>{0.0f, std::numeric_limits<float>::infinity()}), std::invalid_argument);
    EXPECT_THROW(ch.sample(std::vector<float>{kNegInf, kNegInf}), std::invalid_argument);
    EXPECT_THROW(ch.accept(-1), std::invalid_argument);
    EXPECT_EQ(ch.n_sample(), 0);
    // Banning every token through the bias is caught too.
    SamplerChain banned(SamplingParams{.temp = 0.0f, .logit_bias = {{0, kNegInf}, {1, kNegInf}}});
    EXPECT_THROW(banned.sample(ok), std::invalid_argument);
    SamplerChain banned_dist(SamplingParams{.logit_bias = {{0, kNegInf}, {1, kNegInf}}});
    EXPECT_THROW(banned_dist.sample(ok), std::invalid_argument);
    try {
        ch.sample(std::vector<float>{0.0f, 1.0f, std::nanf("")});
        FAIL();
    } catch (const std::invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find("logit 2 is NaN"), std::string::npos) << e.what();
    }
}

TEST(Sampling, BadParamsThrow) {
    const float nan = std::nanf("");
    for (const auto& p : {SamplingParams{.top_p = 0.0f}, SamplingParams{.top_p = 1.5f}, SamplingParams{.top_p = nan},
                          SamplingParams{.min_p = -0.1f}, SamplingParams{.min_p = 1.1f}, SamplingParams{.typical_p = 0.0f},
                          SamplingParams{.temp = nan}, SamplingParams{.penalty_last_n = -2},
                          SamplingParams{.penalty_repeat = 0.0f}, SamplingParams{.penalty_repeat = -1.0f},
                          SamplingParams{.penalty_freq = nan}, SamplingParams{.min_keep = -1},
                          SamplingParams{.dynatemp_range = -1.0f}, SamplingParams{.xtc_probability = 2.0f},
                          SamplingParams{.logit_bias = {{0, nan}}}}) {
        EXPECT_THROW(SamplerChain{p}, std::invalid_argument);
    }
    EXPECT_THROW(SamplerChain(SamplingParams{.penalty_last_n = -1}), std::invalid_argument);  // needs n_ctx
    EXPECT_NO_THROW(SamplerChain(SamplingParams{.penalty_last_n = -1}, 4096));
    EXPECT_THROW(kiln::TopPSampler(0.0f), std::invalid_argument);
    EXPECT_THROW(kiln::MinPSampler(2.0f), std::invalid_argument);
}

TEST(Sampling, MisconfiguredChainsThrow) {
    const std::vector<float> l = {0.0f, 1.0f};
    SamplerChain empty;
    EXPECT_THROW(empty.sample(l), std::logic_error);
    SamplerChain no_select;
    no_select.emplace<kiln::TopKSampler>(1);
    EXPECT_THROW(no_select.sample(l), std::logic_error);
    EXPECT_THROW(empty.add(nullptr), std::invalid_argument);
}

}  // namespace
