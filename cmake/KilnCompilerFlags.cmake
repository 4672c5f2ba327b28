# Warnings, floating-point discipline, CPU tuning and sanitizers for every kiln target.
if(CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
  add_compile_options(-Wall -Wextra -Wshadow=local -Wno-unused-parameter)
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    # GCC 12 reports false -Wrestrict positives inside std::string concatenation.
    add_compile_options(-Wno-restrict)
  endif()
  # The reference quantizers must round exactly like the GGML C reference and
  # numpy: no silent fusing of a*b+c into FMA. SIMD kernels use FMA explicitly.
  add_compile_options(-ffp-contract=off)
  if(KILN_NATIVE AND CMAKE_CROSSCOMPILING)
    # The build machine is not the target: tuning for it would be wrong.
    message(STATUS "kiln: KILN_NATIVE ignored when cross-compiling (baseline ISA, SIMD chosen at run time)")
  elseif(KILN_NATIVE)
    add_compile_options(-march=native)
  endif()
  if(MINGW)
    # Windows x64 only guarantees 16-byte stack alignment and GCC does not
    # realign the stack for 32/64-byte vector spills, so its aligned
    # vmovaps/vmovdqa on the stack fault in AVX code. The assembler option
    # turns every aligned vector move into the unaligned form (same speed on
    # aligned data on every AVX-capable CPU).
    # (binutils >= 2.38.)
    include(CheckCXXCompilerFlag)
    check_cxx_compiler_flag(-Wa,-muse-unaligned-vector-move KILN_HAVE_UNALIGNED_VECTOR_MOVE)
    if(KILN_HAVE_UNALIGNED_VECTOR_MOVE)
      add_compile_options(-Wa,-muse-unaligned-vector-move)
    else()
      message(WARNING "kiln: this assembler lacks -muse-unaligned-vector-move (binutils < 2.38): "
                      "AVX kernels may fault on misaligned stack spills; use KILN_CPU=scalar")
    endif()
    # No MinGW runtime DLLs (libstdc++, libgcc, winpthread) next to the .exe.
    add_link_options(-static)
  endif()
  if(KILN_SANITIZE)
    add_compile_options(-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
    add_link_options(-fsanitize=address,undefined)
  endif()
elseif(MSVC)
  add_compile_options(/W4 /fp:precise /utf-8)
endif()
