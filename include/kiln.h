/* kiln: a C API that stays stable across releases.
 *
 * Functions that can fail return 0 / NULL / a negative value and leave a
 * message for kiln_last_error() (per thread). */
#ifndef KILN_H
#define KILN_H

#include <stdbool.h>
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


/* ---- Models ---- */

typedef struct kiln_model kiln_model;
typedef struct kiln_context kiln_context;
typedef int32_t kiln_token;

/* Called with the fraction loaded; return false to cancel. */
typedef bool (*kiln_progress_callback)(float progress, void* user_data);

struct kiln_model_params {
    int32_t n_gpu_layers;  /* layers to offload to a GPU backend (none exists yet: ignored with a warning) */
    bool use_mmap;         /* map the file instead of reading it (default true) */
    bool use_mlock;        /* lock the weights in RAM */
    kiln_progress_callback progress_callback;
    void* progress_callback_user_data;
};

KILN_API struct kiln_model_params kiln_model_default_params(void);
/* NULL on error (kiln_last_error() names the file and what is wrong). */
KILN_API kiln_model* kiln_model_load(const char* path, struct kiln_model_params params);
KILN_API void kiln_model_free(kiln_model* model);

KILN_API int32_t kiln_model_n_vocab(const kiln_model* model);
KILN_API int32_t kiln_model_n_ctx_train(const kiln_model* model);
KILN_API int32_t kiln_model_n_embd(const kiln_model* model);
KILN_API int32_t kiln_model_n_layer(const kiln_model* model);
KILN_API uint64_t kiln_model_size(const kiln_model* model);      /* bytes of weights */
KILN_API uint64_t kiln_model_n_params(const kiln_model* model);
KILN_API double kiln_model_load_ms(const kiln_model* model);
/* Writes a description such as "gemma3 270M ..." ; returns its length (snprintf semantics). */
KILN_API int32_t kiln_model_desc(const kiln_model* model, char* buf, size_t buf_size);
/* Metadata: the value of a key rendered as text (arrays summarised); -1 if the key is absent. */
KILN_API int32_t kiln_model_meta_count(const kiln_model* model);
KILN_API int32_t kiln_model_meta_key_by_index(const kiln_model* model, int32_t i, char* buf, size_t buf_size);
KILN_API int32_t kiln_model_meta_val_str(const kiln_model* model, const char* key, char* buf, size_t buf_size);

/* ---- Contexts ---- */

struct kiln_context_params {
    uint32_t n_ctx;      /* KV cells; 0 = the model's training context */
    uint32_t n_batch;    /* most tokens per kiln_decode call */
    uint32_t n_ubatch;   /* tokens per graph evaluation */
    int32_t n_threads;   /* 0 = physical cores */
    int32_t type_k;      /* KV cache types: 1 = F16 (default), 0 = F32, 8 = Q8_0, 30 = BF16 */
    int32_t type_v;
    uint32_t n_seq_max;  /* sequences held at once (1..64) */
    int32_t matmul_precision;  /* 0 = auto (precise for small batches), 1 = fast (8-bit activations),
                                  2 = precise (8-bit + residual pass, ~16-bit activations) */
};

KILN_API struct kiln_context_params kiln_context_default_params(void);
KILN_API kiln_context* kiln_context_new(const kiln_model* model, struct kiln_context_params params);
KILN_API void kiln_context_free(kiln_context* ctx);
KILN_API uint32_t kiln_n_ctx(const kiln_context* ctx);
KILN_API uint32_t kiln_n_batch(const kiln_context* ctx);
KILN_API uint32_t kiln_n_seq_max(const kiln_context* ctx);
KILN_API const kiln_model* kiln_get_model(const kiln_context* ctx);

/* ---- Batches and decoding ---- */

typedef struct kiln_batch {
    int32_t n_tokens;
    kiln_token* token;   /* [n_tokens] */
    int32_t* pos;        /* [n_tokens] */
    int32_t* n_seq_id;   /* [n_tokens] */
    int32_t** seq_id;    /* [n_tokens][n_seq_id[i]] */
    int8_t* logits;      /* [n_tokens]: 1 = return logits for this token */
} kiln_batch;

/* A batch with room for n_tokens_max tokens, each in up to n_seq_max sequences. */
KILN_API kiln_batch kiln_batch_init(int32_t n_tokens_max, int32_t n_seq_max);
KILN_API void kiln_batch_free(kiln_batch batch);

/* 0: done; 1: no room in the KV cache (free some with kiln_kv_* and retry, or use a larger n_ctx);
 * -1: error (kiln_last_error). */
KILN_API int32_t kiln_decode(kiln_context* ctx, kiln_batch batch);
/* Logits (n_vocab floats) of token i of the last batch; i < 0 counts from the end. NULL if that
 * token had no logits flag. */
KILN_API float* kiln_get_logits_ith(kiln_context* ctx, int32_t i);

/* ---- KV cache, per sequence (positions [p0, p1); p1 < 0 = to the end) ---- */

KILN_API void kiln_kv_clear(kiln_context* ctx);
KILN_API bool kiln_kv_seq_rm(kiln_context* ctx, int32_t seq_id, int32_t p0, int32_t p1);  /* seq_id < 0: all */
KILN_API void kiln_kv_seq_cp(kiln_context* ctx, int32_t seq_src, int32_t seq_dst, int32_t p0, int32_t p1);
KILN_API void kiln_kv_seq_keep(kiln_context* ctx, int32_t seq_id);
KILN_API void kiln_kv_seq_add(kiln_context* ctx, int32_t seq_id, int32_t p0, int32_t p1, int32_t delta);
KILN_API int32_t kiln_kv_seq_pos_max(const kiln_context* ctx, int32_t seq_id);  /* -1 if empty */
KILN_API int32_t kiln_kv_used_cells(const kiln_context* ctx);

/* ---- Performance counters ---- */

struct kiln_perf_context_data {
    double t_load_ms;     /* model load */
    double t_p_eval_ms;   /* prompt evaluation (batches of more than one token) */
    double t_eval_ms;     /* generation (single-token batches) */
    double t_sample_ms;
    int32_t n_p_eval;
    int32_t n_eval;
    int32_t n_sample;
};
KILN_API struct kiln_perf_context_data kiln_perf_context(const kiln_context* ctx);
KILN_API void kiln_perf_context_reset(kiln_context* ctx);
/* Bytes of the KV cache and of the compute buffers. */
KILN_API uint64_t kiln_kv_bytes(const kiln_context* ctx);
KILN_API uint64_t kiln_compute_bytes(const kiln_context* ctx);

#ifdef __cplusplus
}
#endif

#endif /* KILN_H */
