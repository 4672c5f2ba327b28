/* kiln: a C API that stays stable across releases.
 *
 * Functions that can fail return 0 / NULL / a negative value and leave a
 * message for kiln_last_error() (per thread). */
#ifndef KILN_H
#define KILN_H

#include <stddef.h>
#include <stdint.h>

#if defined(KILN_SHARED)
#  if defined(_WIN32)
#    if defined(KILN_BUILDING_LIBRARY)
#      define KILN_API __declspec(dllexport)
#    else
#      define KILN_API __declspec(dllimport)
#    endif
#  else
#    define KILN_API __attribute__((visibility("default")))
#  endif
#else
#  define KILN_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* "MAJOR.MINOR.PATCH". */
KILN_API const char* kiln_version(void);

/* The last error message of a failed call on this thread ("" if none). */
KILN_API const char* kiln_last_error(void);

/* ---- Element types (ids as in GGUF files: 0 = F32, 1 = F16, 2 = Q4_0, ...) ---- */

/* Name such as "q4_K", or NULL for an unknown id. */
KILN_API const char* kiln_type_name(int32_t type);
/* Type id for a name (case-insensitive), or -1. */
KILN_API int32_t kiln_type_from_name(const char* name);
/* Elements per block, or -1 for an unknown id. */
KILN_API int64_t kiln_type_block_size(int32_t type);
/* Bytes per block, or 0 for an unknown id. */
KILN_API size_t kiln_type_size(int32_t type);
/* Bytes of a row of n elements, or 0 if the id is unknown or n is not a multiple of the block size. */
KILN_API size_t kiln_row_size(int32_t type, int64_t n);
/* 1 if kiln can quantize to and dequantize from this type. */
KILN_API int kiln_type_has_reference(int32_t type);

/* Quantizes nrows rows of n_per_row floats into dst (nrows * kiln_row_size bytes).
 * importance: NULL or n_per_row importance weights (imatrix).
 * Returns the bytes written, or 0 on error. */
KILN_API size_t kiln_quantize(int32_t type, const float* src, void* dst, int64_t nrows, int64_t n_per_row,
                              const float* importance);
/* Dequantizes n elements (a multiple of the block size) of one row. Returns 0 on success, -1 on error. */
KILN_API int kiln_dequantize(int32_t type, const void* src, float* dst, int64_t n);

#ifdef __cplusplus
}
#endif

#endif /* KILN_H */
