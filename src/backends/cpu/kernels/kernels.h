// CPU dot-product kernels for matrix multiplication, one table per instruction
// set (scalar reference, AVX2, AVX-512, NEON), chosen once at run time from the
// CPU's features. Each weight type is multiplied against activations
// converted ("quantized on the fly") to its vec_dot_type: Q8_0 for the 32-block
// formats, Q8_K for the K-quants, F16/BF16/F32 for the float formats.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#if defined(_MSC_VER) && !defined(__clang__)
#include <intrin.h>
#endif

#include "core/types.h"

// Whether the AVX-512 kernel files can hold AVX512-FP16 functions: the instructions are enabled
// per function (target attribute) with GCC 12 and later; clang (14) only declares their
// intrinsics when the whole file is compiled for them. Such functions run only where the CPU
// has AVX512-FP16 (float_gemm::fast_path(Type::F16) is FastPath::Half, gemm_float.h).
#if defined(__AVX512FP16__) || (!defined(__clang__) && defined(__GNUC__) && __GNUC__ >= 12)
#define KILN_HAVE_FP16_TARGET 1
#else
#define KILN_HAVE_FP16_TARGET 0
#endif

namespace kiln::cpu {

// Converts n floats (a multiple of the vec_dot_type's block size) of one activation row.
using FromFloatFn = void (*)(const float* x, void* y, int64_t n);
// s = dot(weights row x, activation row y) over n elements.
using VecDotFn = void (*)(int64_t n, float* s, const void* x, const void* y);

struct TypeKernels {
    Type vec_dot_type = Type::F32;
    FromFloatFn from_float = nullptr;  // converts activations to vec_dot_type
    VecDotFn vec_dot = nullptr;        // null: the type has no kernel in this set
};

enum class Isa : uint8_t { Scalar, Avx2, Avx512, Neon };
std::string_view isa_name(Isa isa);

// What this CPU can run (detected once, cheap to call).
struct CpuFeatures {
    bool avx2 = false, fma = false, f16c = false;
    bool avx512f = false, avx512bw = false, avx512vl = false, avx512vnni = false, avx512bf16 = false;
    bool gfni = false;  // vgf2p8affineqb (with AVX-512: on 512-bit registers)
    // AMX tiles with int8 products (Sapphire Rapids and later), the OS saving the tile state and,
    // on Linux, granting it to this process (arch_prctl ARCH_REQ_XCOMP_PERM, asked for once at
    // detection). KILN_AMX=0 in the environment turns it off (A/B runs). Elsewhere: false.
    bool amx_int8 = false;
    bool amx_bf16 = false;  // AMX tiles with BF16 products, on the same terms as amx_int8
    bool neon = false, dotprod = false, i8mm = false;
    bool amd = false;  // vendor AuthenticAMD (tuning only: prefetch_weights and float_weights_prefetch, kernels/gemm.h)
    bool zen5 = false;  // AMD family 1Ah or later (Zen 5; tuning only: gemm_wide, kernels/gemm_avx512_tiles.h)
    // AMD family 19h (Zen 3 and 4). With avx512f this is Zen 4, whose 512-bit operations issue as
    // two 256-bit halves (tuning only: the attention tiles' broadcasts, kernels/attn_avx512.cpp;
    // q8_0_weights_prefetch, kernels/gemm.h).
    bool zen4 = false;
};
const CpuFeatures& cpu_features();
// The CPU's name as it gives it (x86: the CPUID brand string, with family and model; elsewhere
// what the system reports), "unknown" where there is none. Read once.
const std::string& cpu_description();
// One line for logs and benchmark records: the CPU, the kernel set in use (or why KILN_CPU
// cannot be honoured) and the instruction-set features detected, llama.cpp's system_info style.
std::string cpu_system_info();

// The best instruction set this CPU supports, unless the environment variable
// KILN_CPU (scalar | avx2 | avx512 | neon) forces one; forcing an unsupported
// set is an error.
Isa selected_isa();
// Kernels of the given set for a weight type; falls back to the scalar entry
// for types the set does not accelerate. Throws if the type has no kernel at all.
const TypeKernels& kernels(Type weight_type, Isa isa);
inline const TypeKernels& kernels(Type weight_type) { return kernels(weight_type, selected_isa()); }
// The set's converter from float rows to type t itself when it has one (F32, F16, BF16, Q8_0:
// the activation converters, bit-exact with core/quant_*.cpp), else null. Used to write new K/V
// rows into the cache and to round the attention's queries.
FromFloatFn native_from_float(Type t, Isa isa);
// True if the ISA can run on this CPU (for tests that loop over every set).
bool isa_supported(Isa isa);

// Software prefetch of the cache line at p into L1 / into L2 (a hint: never faults).
// With GCC and clang an asm statement, not __builtin_prefetch: GCC 12 treated the builtin as
// free of side effects and dropped the requests of prefetch_weights (a loop over a block's
// lines, and even written out line by line) from every tile once the tiles stopped reading
// their settings inside it (kernels/gemm.h, WeightsPrefetch); a static's guard had kept them.
inline void prefetch_l1(const void* p) {
#if defined(_MSC_VER) && !defined(__clang__)
    _mm_prefetch(static_cast<const char*>(p), _MM_HINT_T0);
#elif defined(__x86_64__) || defined(__i386__)
    asm volatile("prefetcht0 %0" : : "m"(*static_cast<const char*>(p)));
#elif defined(__aarch64__)
    asm volatile("prfm pldl1keep, %a0" : : "p"(p));
#else
    __builtin_prefetch(p, 0, 3);
#endif
}
inline void prefetch_l2(const void* p) {
#if defined(_MSC_VER) && !defined(__clang__)
    _mm_prefetch(static_cast<const char*>(p), _MM_HINT_T1);
#elif defined(__x86_64__) || defined(__i386__)
    asm volatile("prefetcht1 %0" : : "m"(*static_cast<const char*>(p)));
#elif defined(__aarch64__)
    asm volatile("prfm pldl2keep, %a0" : : "p"(p));
#else
    __builtin_prefetch(p, 0, 2);
#endif
}

}  // namespace kiln::cpu
