#include "bandwidth.h"

#include <algorithm>
#include <barrier>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>

#if defined(__linux__)
#  include <sys/mman.h>
#endif
#if defined(_WIN32)
#  include <malloc.h>  // _aligned_malloc: the Windows C runtime has no aligned_alloc
#endif

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#  include <immintrin.h>
#  define KILN_BENCH_X86 1
#endif

namespace kiln_bench {

namespace {

// Each reader sums its slice into a few independent accumulators (so loads are
// not serialised behind one dependency chain) and returns the sum, which the
// caller keeps: the compiler cannot drop the loads. kPrefetch: each line is also
// requested `near` bytes ahead into L1 and `far` bytes ahead into L2 (0: not);
// requests past the slice's end are harmless (prefetches do not fault).
using ReadFn = uint64_t (*)(const uint8_t* p, size_t n, size_t near, size_t far);

#if defined(__GNUC__) || defined(__clang__)
inline void request_line(const uint8_t* p, size_t near, size_t far) {
    if (near) __builtin_prefetch(p + near, 0, 3);
    if (far) __builtin_prefetch(p + far, 0, 2);
}
#else
inline void request_line(const uint8_t*, size_t, size_t) {}
#endif

template <bool kPrefetch>
uint64_t read_scalar(const uint8_t* p, size_t n, size_t near, size_t far) {
    uint64_t a[8] = {};
    const auto* q = reinterpret_cast<const uint64_t*>(p);
    for (size_t i = 0; i + 8 <= n / 8; i += 8) {
        if constexpr (kPrefetch) request_line(p + i * 8, near, far);
        for (int k = 0; k < 8; ++k) a[k] += q[i + static_cast<size_t>(k)];
    }
    uint64_t s = 0;
    for (uint64_t x : a) s += x;
    return s;
}

#if defined(KILN_BENCH_X86)
// Compiled for these instruction sets whatever the build's -march; chosen at run time.
template <bool kPrefetch>
__attribute__((target("avx2"))) uint64_t read_avx2(const uint8_t* p, size_t n, size_t near, size_t far) {
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
    for (size_t i = 0; i + 128 <= n; i += 128) {
        if constexpr (kPrefetch) {
            request_line(p + i, near, far);
            request_line(p + i + 64, near, far);
        }
        a0 = _mm256_add_epi64(a0, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i)));
        a1 = _mm256_add_epi64(a1, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 32)));
        a2 = _mm256_add_epi64(a2, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 64)));
        a3 = _mm256_add_epi64(a3, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 96)));
    }
    alignas(32) uint64_t out[4];
    _mm256_store_si256(reinterpret_cast<__m256i*>(out), _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3)));
    return out[0] + out[1] + out[2] + out[3];
}

template <bool kPrefetch>
__attribute__((target("avx512f"))) uint64_t read_avx512(const uint8_t* p, size_t n, size_t near, size_t far) {
    __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
    for (size_t i = 0; i + 256 <= n; i += 256) {
        if constexpr (kPrefetch) {
            for (size_t l = 0; l < 256; l += 64) request_line(p + i + l, near, far);
        }
        a0 = _mm512_add_epi64(a0, _mm512_load_si512(p + i));
        a1 = _mm512_add_epi64(a1, _mm512_load_si512(p + i + 64));
        a2 = _mm512_add_epi64(a2, _mm512_load_si512(p + i + 128));
        a3 = _mm512_add_epi64(a3, _mm512_load_si512(p + i + 192));
    }
    alignas(64) uint64_t out[8];
    _mm512_store_si512(out, _mm512_add_epi64(_mm512_add_epi64(a0, a1), _mm512_add_epi64(a2, a3)));
    uint64_t s = 0;
    for (uint64_t x : out) s += x;
    return s;
}
#endif

struct Reader {
    ReadFn plain, prefetching;
    const char* name;
};

Reader pick_reader() {
#if defined(KILN_BENCH_X86)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) return {read_avx512<false>, read_avx512<true>, "avx512"};
    if (__builtin_cpu_supports("avx2")) return {read_avx2<false>, read_avx2<true>, "avx2"};
#endif
    return {read_scalar<false>, read_scalar<true>, "scalar"};
}

// The read patterns every probe tries (see ReadPattern): plain loads, and the distances that read
// fastest among those tried on the AMX Xeon (1-6 KiB into L1, 3-16 KiB into L2; the best pair moved
// from run to run), plus far requests alone as AMD's cores like them.
constexpr ReadPattern kReadPatterns[] = {
    {.name = "plain loads"},
    {.name = "prefetch 1+3 KiB", .near = 1024, .far = 3072},
    {.name = "prefetch 2+4 KiB", .near = 2048, .far = 4096},
    {.name = "prefetch 4+6 KiB", .near = 4096, .far = 6144},
    {.name = "prefetch L2 16 KiB", .far = 16384},
};
constexpr int kNumPatterns = static_cast<int>(std::size(kReadPatterns));

constexpr size_t kAlign = size_t{2} << 20;  // 2 MiB: huge-page sized, a multiple of every load width

uint8_t* alloc_aligned(size_t bytes) {
#if defined(_WIN32)
    return static_cast<uint8_t*>(_aligned_malloc(bytes, kAlign));
#else
    return static_cast<uint8_t*>(std::aligned_alloc(kAlign, bytes));
#endif
}

struct FreeDeleter {
    void operator()(uint8_t* p) const {
#if defined(_WIN32)
        _aligned_free(p);
#else
        std::free(p);
#endif
    }
};

}  // namespace

Bandwidth measure_bandwidth(const BandwidthOptions& opts) {
    const int threads = std::max(1, opts.threads.threads);
    const size_t bytes = std::max(kAlign, opts.bytes / kAlign * kAlign);
    std::unique_ptr<uint8_t, FreeDeleter> buf(alloc_aligned(bytes));
    if (!buf) throw std::runtime_error("bandwidth probe: cannot allocate " + std::to_string(bytes >> 20) + " MiB");
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    // Fewer TLB misses: the probe should see what a huge-page weight mapping would get.
    (void)madvise(buf.get(), bytes, MADV_HUGEPAGE);
#endif
    const Reader reader = pick_reader();
    // Slices in 256-byte steps (the widest unrolled loop); the last thread takes the remainder.
    const size_t slice = bytes / static_cast<size_t>(threads) / 256 * 256;
    // Pass 0 (plain loads) warms up and is not recorded; then rounds of one pass per pattern.
    const int rounds = std::max(1, opts.passes);
    const int total_passes = 1 + rounds * kNumPatterns;
    std::vector<double> seconds(static_cast<size_t>(total_passes));
    std::vector<uint64_t> sums(static_cast<size_t>(threads));
    std::barrier sync(threads);
    std::chrono::steady_clock::time_point t0;
    auto pattern_of = [](int pass) { return pass == 0 ? 0 : (pass - 1) % kNumPatterns; };

    auto worker = [&](int tid) {
        uint8_t* p = buf.get() + slice * static_cast<size_t>(tid);
        const size_t n = tid == threads - 1 ? bytes - slice * static_cast<size_t>(tid) : slice;
        std::memset(p, tid + 1, n);  // first touch by the reader
        uint64_t sum = 0;
        for (int pass = 0; pass < total_passes; ++pass) {
            const ReadPattern& pat = kReadPatterns[pattern_of(pass)];
            const ReadFn fn = pat.near || pat.far ? reader.prefetching : reader.plain;
            sync.arrive_and_wait();
            if (tid == 0) t0 = std::chrono::steady_clock::now();
            sync.arrive_and_wait();  // nobody reads before the clock starts
            sum += fn(p, n, pat.near, pat.far);
            sync.arrive_and_wait();
            if (tid == 0) seconds[static_cast<size_t>(pass)] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        }
        sums[static_cast<size_t>(tid)] = sum;
    };
    ProbePlacement placement = opts.threads;
    placement.threads = threads;
    run_probe_threads(placement, worker);

    Bandwidth r;
    r.threads = placement;
    r.bytes = bytes;
    r.loads = reader.name;
    r.n_patterns = kNumPatterns;
    constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
    std::vector<std::vector<double>> by_pattern(static_cast<size_t>(kNumPatterns));
    for (int pass = 1; pass < total_passes; ++pass) {
        const double gibs = static_cast<double>(bytes) / kGiB / std::max(seconds[static_cast<size_t>(pass)], 1e-9);
        by_pattern[static_cast<size_t>(pattern_of(pass))].push_back(gibs);
    }
    int best = 0;
    for (int i = 0; i < kNumPatterns; ++i) {
        const auto& v = by_pattern[static_cast<size_t>(i)];
        const double top = *std::max_element(v.begin(), v.end());
        if (i == 0) r.plain_best_gibs = top;
        if (top > r.best_gibs) {
            r.best_gibs = top;
            best = i;
        }
    }
    r.pattern = kReadPatterns[best].name;
    r.passes_gibs = by_pattern[static_cast<size_t>(best)];
    std::vector<double> sorted = r.passes_gibs;
    std::sort(sorted.begin(), sorted.end());
    r.median_gibs = sorted.size() % 2 ? sorted[sorted.size() / 2] : 0.5 * (sorted[sorted.size() / 2 - 1] + sorted[sorted.size() / 2]);
    // The sums are kept so the loads are not optimised away; their value is meaningless.
    volatile uint64_t sink = 0;
    for (uint64_t s : sums) sink = sink + s;
    (void)sink;
    return r;
}

}  // namespace kiln_bench
