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

/* The build's source commit: git's short hash, "unknown" when built outside a git checkout. */
KILN_API const char* kiln_build_commit(void);
/* The build's number: the commits in its source's history (git rev-list --count HEAD, as llama.cpp
 * numbers builds), 0 when built outside a git checkout. */
KILN_API int32_t kiln_build_number(void);

/* The CPU as it names itself (x86: CPUID brand string, family and model), "unknown" if it gives none. */
KILN_API const char* kiln_cpu_description(void);

/* The CPU kernel set contexts compute with: "scalar", "avx2", "avx512" or "neon" (the best this CPU
 * runs, or the KILN_CPU environment variable's choice); null, with kiln_last_error set, when KILN_CPU
 * names a set that is unknown or that this CPU cannot run. */
KILN_API const char* kiln_cpu_kernels(void);

/* One line describing the machine for logs and benchmark records: CPU, kernel set, detected
 * instruction-set features ("CPU: ... | kernels: avx2 | AVX2 = 1 | ..."). Valid until the next call
 * on this thread. */
KILN_API const char* kiln_system_info(void);

/* The last error message of a failed call on this thread ("" if none). */
KILN_API const char* kiln_last_error(void);

/* CPU masks as kiln_context_params::cpu_mask reads them, for tools that check a mask before loading
 * a model. Both write "0x..." in lower case without leading zeros ("0x0" when no CPU is named) and
 * return its length (snprintf semantics), or -1 with kiln_last_error naming the fault. */
/* Checks a hexadecimal mask (with or without 0x; bit i = CPU i, CPUs 0-1023). */
KILN_API int32_t kiln_cpu_mask_normalize(const char* mask, char* buf, size_t buf_size);
/* The mask of CPUs first..last (llama.cpp's -Cr); an error unless 0 <= first <= last <= 1023. */
KILN_API int32_t kiln_cpu_range_mask(int32_t first, int32_t last, char* buf, size_t buf_size);
/* Places the calling thread where a context with this cpu_mask and cpu_strict places its compute
 * thread ith (any CPU of the mask; strict: the mask's ith CPU, cycling), for a tool's own threads
 * that must run where a test's threads do (kiln-bench's probes). NULL or "0x0": nothing is done.
 * Returns 0, or -1 with kiln_last_error naming the mask or the CPU the OS refused. */
KILN_API int32_t kiln_cpu_bind_thread(const char* cpu_mask, bool cpu_strict, int32_t ith);

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
    bool use_repack;       /* repack matrix weights for the CPU kernels at load (default true; lossless) */
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
/* Bytes of weights repacked at load for the CPU kernels (0: none; see use_repack). */
KILN_API uint64_t kiln_model_repacked_size(const kiln_model* model);
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
    int32_t matmul_precision;  /* 0 = auto (precise for small batches), 1 = fast (8-bit activations,
                                  BF16 ones for products of 32+ rows on CPUs with AMX-BF16; on CPUs
                                  with fast BF16 products, BF16 attention products for prompts),
                                  2 = precise (8-bit + residual pass, ~16-bit activations, F32
                                  attention). On CPUs with AVX512-FP16, auto and fast compute the
                                  attention over an F16 cache with FP16 products. */
    const char* cpu_mask;      /* CPUs the compute threads run on, as a hexadecimal bit mask (llama.cpp's -C:
                                  "0x3" = CPUs 0 and 1, "0xf0" = CPUs 4-7); NULL, "" or "0x0": wherever the
                                  OS puts them. The thread that calls kiln_decode computes too, placed as
                                  thread 0 for the length of the call. Copied by kiln_context_new. */
    bool cpu_strict;           /* each thread alone on one CPU of cpu_mask (thread i on the mask's i-th CPU,
                                  cycling), instead of every thread on any of them */
    int32_t poll;              /* 0..100: how long idle compute threads spin for work before they sleep,
                                  40 us per level (50 = 2 ms, the default; 0 = sleep at once) */
    int32_t n_threads_batch;   /* threads for batches of more than one token (prompts, batched decoding);
                                  0 = n_threads. n_threads then covers one-token batches (generation) */
};

KILN_API struct kiln_context_params kiln_context_default_params(void);
KILN_API kiln_context* kiln_context_new(const kiln_model* model, struct kiln_context_params params);
KILN_API void kiln_context_free(kiln_context* ctx);
KILN_API uint32_t kiln_n_ctx(const kiln_context* ctx);
KILN_API uint32_t kiln_n_batch(const kiln_context* ctx);
KILN_API uint32_t kiln_n_seq_max(const kiln_context* ctx);
KILN_API int32_t kiln_n_threads(const kiln_context* ctx);  /* threads for one-token batches (generation) */
KILN_API int32_t kiln_n_threads_batch(const kiln_context* ctx);  /* threads for larger batches (prompts) */
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


/* ---- Tokenizer ---- */

/* Tokenizes text (text_len bytes, or up to NUL if negative). add_special: add BOS/EOS as the model
 * wants; parse_special: control-token texts in the input become their ids. Returns the number of
 * tokens; if n_tokens_max is too small, minus the number needed; INT32_MIN on error. */
KILN_API int32_t kiln_tokenize(const kiln_model* model, const char* text, int32_t text_len, kiln_token* tokens,
                               int32_t n_tokens_max, bool add_special, bool parse_special);
/* The text of one token (special: render control tokens). snprintf semantics; -1 on error. */
KILN_API int32_t kiln_token_to_piece(const kiln_model* model, kiln_token token, char* buf, int32_t buf_size,
                                     bool special);
/* Text of a token sequence. snprintf semantics; -1 on error. */
KILN_API int32_t kiln_detokenize(const kiln_model* model, const kiln_token* tokens, int32_t n_tokens, char* buf,
                                 int32_t buf_size, bool remove_special, bool unparse_special);
KILN_API kiln_token kiln_token_bos(const kiln_model* model);  /* -1 if none */
KILN_API kiln_token kiln_token_eos(const kiln_model* model);
KILN_API kiln_token kiln_token_eot(const kiln_model* model);
KILN_API bool kiln_token_is_eog(const kiln_model* model, kiln_token token);  /* ends generation */
KILN_API bool kiln_add_bos(const kiln_model* model);

/* Streaming detokenizer: text comes out only as whole UTF-8 characters. */
typedef struct kiln_stream_decoder kiln_stream_decoder;
KILN_API kiln_stream_decoder* kiln_stream_decoder_new(const kiln_model* model, bool special);
/* Text that became printable with this token; snprintf semantics (call again with a larger buffer:
 * the text is kept until it was copied whole). */
KILN_API int32_t kiln_stream_decoder_push(kiln_stream_decoder* dec, kiln_token token, char* buf, int32_t buf_size);
KILN_API int32_t kiln_stream_decoder_flush(kiln_stream_decoder* dec, char* buf, int32_t buf_size);
KILN_API void kiln_stream_decoder_free(kiln_stream_decoder* dec);

/* ---- Chat templates ---- */

typedef struct kiln_chat_message {
    const char* role;
    const char* content;
} kiln_chat_message;

/* Renders messages with tmpl (Jinja source; NULL: the model's template, or a built-in one for its
 * architecture). Returns the length (snprintf semantics) or -1 on error. */
KILN_API int32_t kiln_chat_apply_template(const kiln_model* model, const char* tmpl, const kiln_chat_message* msgs,
                                          size_t n_msg, bool add_generation_prompt, char* buf, int32_t buf_size);
/* As above with messages as a JSON array (tool calls, content parts...) and extra template
 * variables as a JSON object (e.g. {"tools": [...]}, may be NULL). */
KILN_API int32_t kiln_chat_apply_template_json(const kiln_model* model, const char* tmpl, const char* messages_json,
                                               const char* extra_json, bool add_generation_prompt, char* buf,
                                               int32_t buf_size);

/* ---- Sampling ---- */

struct kiln_sampler_params {
    float temp;            /* <= 0: greedy */
    int32_t top_k;         /* <= 0: off */
    float top_p;           /* 1: off */
    float min_p;           /* 0: off */
    float typical_p;       /* 1: off */
    int32_t penalty_last_n;   /* tokens the penalties look back over; 0 off, -1 the context */
    float penalty_repeat;     /* 1: off */
    float penalty_freq;       /* 0: off */
    float penalty_present;    /* 0: off */
    uint32_t seed;            /* 0xFFFFFFFF: random */
    int32_t min_keep;
};
typedef struct kiln_sampler kiln_sampler;
KILN_API struct kiln_sampler_params kiln_sampler_default_params(void);
/* n_ctx: the context size, for penalty_last_n = -1. NULL on bad parameters. */
KILN_API kiln_sampler* kiln_sampler_new(struct kiln_sampler_params params, int32_t n_ctx);
KILN_API void kiln_sampler_free(kiln_sampler* smpl);
/* Samples from the logits of token idx of the last batch (adds the time to the context's counters).
 * Does not accept the token. -1 on error. */
KILN_API kiln_token kiln_sampler_sample(kiln_sampler* smpl, kiln_context* ctx, int32_t idx);
/* Records a token (prompt or generated) for the penalties. */
KILN_API void kiln_sampler_accept(kiln_sampler* smpl, kiln_token token);
KILN_API void kiln_sampler_reset(kiln_sampler* smpl);
KILN_API uint32_t kiln_sampler_seed(const kiln_sampler* smpl);

/* ---- Benchmarking (bench section, for tools/kiln-bench) ----
 * What a benchmark needs to relate measured speed to memory traffic. */

/* Threads a context computes with when n_threads is 0 (the physical cores). */
KILN_API int32_t kiln_bench_default_threads(void);
/* Weight bytes one generated token reads: every weight tensor once, except the token embedding, of
 * which it reads one row (all of it when the output projection shares it). */
KILN_API uint64_t kiln_bench_weight_bytes_per_token(const kiln_model* model);
/* K and V bytes one token reads from the KV cache when it attends to n_attended positions (its own
 * included), summed over layers; sliding-window layers read at most their window. */
KILN_API uint64_t kiln_bench_kv_bytes_per_token(const kiln_context* ctx, int32_t n_attended);
/* Where a context's graph evaluations spend their time, one row per kind of op: the op's name
 * ("rms_norm", "attention", ...) or, for matrix products, "mul_mat <role>" with the role the node
 * has in every layer ("mul_mat q", "mul_mat ffn_down", "mul_mat logits"). */
struct kiln_bench_op_time {
    char name[48];
    int64_t calls;          /* evaluations (per thread) */
    double op_ms;           /* inside the op, mean over threads */
    double op_max_ms;       /* the thread that spent the most inside it */
    double wait_ms;         /* at the barrier after it (threads that finished early), mean over threads */
    uint64_t weight_bytes;  /* matrix products: weight bytes read, summed over calls; 0 otherwise */
};
/* Starts (clearing what was collected) or stops timing every op; off by default. Returns false on error. */
KILN_API bool kiln_bench_set_op_profiling(kiln_context* ctx, bool on);
/* Writes up to n_max rows, most time first; returns how many rows there are (-1 on error). */
KILN_API int32_t kiln_bench_op_times(const kiln_context* ctx, struct kiln_bench_op_time* rows, int32_t n_max);

/* ---- Quantization and importance matrices (kiln-quantize, kiln-imatrix) ---- */

/* One line of a tool's report (no trailing newline). */
typedef void (*kiln_log_callback)(const char* line, void* user_data);

struct kiln_quantize_params {
    const char* ftype;             /* mix name: "Q4_K_M", "Q8_0", "F16", ... (kiln_quantize_ftype_name lists them) */
    int32_t n_threads;             /* 0: hardware threads */
    int32_t output_tensor_type;    /* type id for output.weight; -1: by the mix */
    int32_t token_embedding_type;  /* type id for token_embd.weight; -1: by the mix */
    bool allow_requantize;         /* accept quantized input tensors */
    bool leave_output_tensor;      /* keep output.weight as it is */
    bool pure;                     /* no per-tensor mix rules: the mix's base type everywhere */
    bool dry_run;                  /* report the plan and sizes, write nothing */
    const char* imatrix_file;      /* importance matrix (GGUF or legacy .dat); NULL: none */
    kiln_log_callback log;         /* per-tensor lines and totals; NULL: silent */
    kiln_progress_callback progress;  /* fraction done; return false to cancel (no output is left) */
    void* user_data;               /* passed to log and progress */
};

struct kiln_quantize_result {
    uint64_t bytes_in;    /* tensor data before */
    uint64_t bytes_out;   /* tensor data after */
    uint64_t n_elements;
    int32_t n_tensors;
    int32_t n_converted;
    int32_t n_fallback;   /* tensors whose rows did not fit the mix's type */
    double seconds;
};

KILN_API struct kiln_quantize_params kiln_quantize_default_params(void);
/* Name of the i-th mix kiln can write (NULL past the end). */
KILN_API const char* kiln_quantize_ftype_name(int32_t i);
/* Quantizes a GGUF model. Returns 0 on success, -1 on error (kiln_last_error). result may be NULL. */
KILN_API int32_t kiln_model_quantize(const char* in_path, const char* out_path, const struct kiln_quantize_params* params,
                                     struct kiln_quantize_result* result);

/* Collects an importance matrix from a context's matrix products while it decodes. */
typedef struct kiln_imatrix kiln_imatrix;
/* Starts collecting from ctx (inputs of the blk.* weights; also output.weight if process_output).
 * The context must outlive the collector. NULL on error. */
KILN_API kiln_imatrix* kiln_imatrix_new(kiln_context* ctx, bool process_output);
/* Stops collecting and frees. */
KILN_API void kiln_imatrix_free(kiln_imatrix* im);
KILN_API int32_t kiln_imatrix_n_entries(const kiln_imatrix* im);
/* Writes the GGUF imatrix format (legacy: the old .dat format). 0 on success, -1 on error. */
KILN_API int32_t kiln_imatrix_save(const kiln_imatrix* im, const char* path, const char* dataset, int32_t chunk_count,
                                   int32_t chunk_size, bool legacy);

#ifdef __cplusplus
}
#endif

#endif /* KILN_H */
