/* Compares two builds of libkiln in one process: each is dlopen'ed privately (RTLD_LOCAL |
 * RTLD_DEEPBIND, so each keeps its own kernels and state; not its STB_GNU_UNIQUE symbols, the
 * function-local statics of inline functions among them, `nm -D` type 'u': the dynamic linker
 * shares those, so a setting the two builds differ in must not live there), loads the model and
 * decodes, and the two contexts take turns, token by token (generation) or call by call
 * (prompts). Both then see the same memory phases of a shared machine, which separate kiln-bench
 * runs do not: on the 2-vCPU VMs this project measures on, the streaming bandwidth moves by 30-50%
 * within minutes. Reported: each build's median t/s and the median of the per-step time ratios B/A
 * with its quartiles.
 *
 * The model loaded second can land differently in memory (fewer huge pages, say): run both
 * orders (A B, then B A) and take the geometric mean of B/A and 1 / (A/B). With the same
 * library in both slots the ratio measured 1.01-1.04 on Zen 4.
 *
 * Each call is preceded by a 3 ms pause: the idle build's thread pool polls for 2 ms after its
 * last job (thread_pool.cpp) and would take the cores from the other one.
 *
 *   ab_builds LIB_A LIB_B MODEL STEPS [THREADS=2] [PRECISION=0|A,B] [PROMPT=1] [DEPTH=0]
 *   e.g. ab_builds /tmp/a/libkiln.so.0 build/release/src/libkiln.so.0 1b-q4_0.gguf 64
 * PROMPT > 1: each step decodes a PROMPT-token batch from an empty cache (prompt speed);
 * otherwise one token per step at positions DEPTH..DEPTH+255, the cache trimmed back to DEPTH
 * every 256 (generation). DEPTH > 0: the cache is first filled with DEPTH tokens (untimed, in
 * 512-token batches), as kiln-bench -d does; prompts then decode after them.
 * Environment: AB_CPU_MASK_A / AB_CPU_MASK_B (hexadecimal CPU masks, as -C) place that build's
 * threads, each alone on one CPU of the mask unless AB_CPU_STRICT_A / _B is 0. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kiln.h"

typedef struct {
    struct kiln_model_params (*model_params)(void);
    kiln_model* (*model_load)(const char*, struct kiln_model_params);
    struct kiln_context_params (*context_params)(void);
    kiln_context* (*context_new)(const kiln_model*, struct kiln_context_params);
    kiln_batch (*batch_init)(int32_t, int32_t);
    int32_t (*decode)(kiln_context*, kiln_batch);
    void (*kv_clear)(kiln_context*);
    bool (*kv_seq_rm)(kiln_context*, int32_t, int32_t, int32_t);
    const char* (*last_error)(void);
} Build;

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}
static int cmp_double(const void* a, const void* b) {
    const double x = *(const double*)a, y = *(const double*)b;
    return x < y ? -1 : x > y;
}
static void* need(void* lib, const char* path, const char* name) {
    void* p = dlsym(lib, name);
    if (!p) {
        fprintf(stderr, "ab_builds: %s has no symbol %s\n", path, name);
        exit(1);
    }
    return p;
}
static int parse_int(const char* s, const char* what, int lo, int hi) {
    char* end = NULL;
    const long v = strtol(s, &end, 10);
    if (*s == '\0' || *end != '\0' || v < lo || v > hi) {
        fprintf(stderr, "ab_builds: %s must be an integer in %d..%d, got '%s'\n", what, lo, hi, s);
        exit(2);
    }
    return (int)v;
}

int main(int argc, char** argv) {
    if (argc < 5 || argc > 9) {
        fprintf(stderr, "usage: ab_builds LIB_A LIB_B MODEL STEPS [THREADS=2] [PRECISION=0|A,B] [PROMPT=1] [DEPTH=0]\n");
        return 2;
    }
    const int steps = parse_int(argv[4], "STEPS", 1, 100000);
    const int threads = argc > 5 ? parse_int(argv[5], "THREADS", 1, 1024) : 2;
    /* PRECISION: kiln_matmul_precision for both, or "A,B" for each (one build twice: the cost
     * of a precision mode) */
    int precision[2] = {0, 0};
    if (argc > 6) {
        char pa[16] = {0};
        const char* comma = strchr(argv[6], ',');
        if (comma && (size_t)(comma - argv[6]) < sizeof pa) {
            memcpy(pa, argv[6], (size_t)(comma - argv[6]));
            precision[0] = parse_int(pa, "PRECISION", 0, 2);
            precision[1] = parse_int(comma + 1, "PRECISION", 0, 2);
        } else {
            precision[0] = precision[1] = parse_int(argv[6], "PRECISION", 0, 2);
        }
    }
    const int prompt = argc > 7 ? parse_int(argv[7], "PROMPT", 1, 512) : 1;
    const int depth = argc > 8 ? parse_int(argv[8], "DEPTH", 0, 1 << 20) : 0;

    Build b[2];
    kiln_context* ctx[2];
    kiln_batch batch[2];
    for (int i = 0; i < 2; ++i) {
        const char* path = argv[1 + i];
        void* lib = dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
        if (!lib) {
            fprintf(stderr, "ab_builds: %s\n", dlerror());
            return 1;
        }
        b[i].model_params = (struct kiln_model_params(*)(void))need(lib, path, "kiln_model_default_params");
        b[i].model_load = (kiln_model * (*)(const char*, struct kiln_model_params)) need(lib, path, "kiln_model_load");
        b[i].context_params = (struct kiln_context_params(*)(void))need(lib, path, "kiln_context_default_params");
        b[i].context_new = (kiln_context * (*)(const kiln_model*, struct kiln_context_params)) need(lib, path, "kiln_context_new");
        b[i].batch_init = (kiln_batch(*)(int32_t, int32_t))need(lib, path, "kiln_batch_init");
        b[i].decode = (int32_t(*)(kiln_context*, kiln_batch))need(lib, path, "kiln_decode");
        b[i].kv_clear = (void (*)(kiln_context*))need(lib, path, "kiln_kv_clear");
        b[i].kv_seq_rm = (bool (*)(kiln_context*, int32_t, int32_t, int32_t))need(lib, path, "kiln_kv_seq_rm");
        b[i].last_error = (const char* (*)(void))need(lib, path, "kiln_last_error");
        kiln_model* model = b[i].model_load(argv[3], b[i].model_params());
        if (!model) {
            fprintf(stderr, "ab_builds: %s: %s\n", path, b[i].last_error());
            return 1;
        }
        struct kiln_context_params cp = b[i].context_params();
        cp.n_ctx = (uint32_t)depth + 512;
        cp.n_batch = cp.n_ubatch = 512;
        cp.n_threads = threads;
        cp.matmul_precision = precision[i];
        /* AB_CPU_MASK_A / AB_CPU_MASK_B: that build's threads placed on the mask's CPUs, each alone
         * on one (cpu_strict) unless AB_CPU_STRICT_A / _B is 0: the same library in both slots
         * then compares placements. */
        const char* mask = getenv(i == 0 ? "AB_CPU_MASK_A" : "AB_CPU_MASK_B");
        if (mask && *mask) {
            const char* strict = getenv(i == 0 ? "AB_CPU_STRICT_A" : "AB_CPU_STRICT_B");
            cp.cpu_mask = mask;
            cp.cpu_strict = !(strict && strcmp(strict, "0") == 0);
        }
        ctx[i] = b[i].context_new(model, cp);
        if (!ctx[i]) {
            fprintf(stderr, "ab_builds: %s: %s\n", path, b[i].last_error());
            return 1;
        }
        batch[i] = b[i].batch_init(512, 1);
        for (int p0 = 0; p0 < depth; p0 += 512) {  // the depth, once
            kiln_batch* bt = &batch[i];
            bt->n_tokens = depth - p0 < 512 ? depth - p0 : 512;
            for (int j = 0; j < bt->n_tokens; ++j) {
                bt->token[j] = ((p0 + j) * 13) % 1000 + 5;
                bt->pos[j] = p0 + j;
                bt->n_seq_id[j] = 1;
                bt->seq_id[j][0] = 0;
                bt->logits[j] = j == bt->n_tokens - 1;
            }
            if (b[i].decode(ctx[i], *bt) != 0) {
                fprintf(stderr, "ab_builds: %s: filling the depth failed: %s\n", path, b[i].last_error());
                return 1;
            }
        }
    }

    const int warmup = 4;
    double* t[2] = {malloc(sizeof(double) * steps), malloc(sizeof(double) * steps)};
    double* ratio = malloc(sizeof(double) * steps);
    if (!t[0] || !t[1] || !ratio) return 1;
    for (int s = 0; s < steps + warmup; ++s) {
        double ms[2];
        for (int k = 0; k < 2; ++k) {
            const int i = (s & 1) ? 1 - k : k;  // alternate which build goes first
            kiln_batch* bt = &batch[i];
            const int pos = s % 256;
            if (prompt > 1 || pos == 0) {
                if (depth > 0) b[i].kv_seq_rm(ctx[i], -1, depth, -1);
                else b[i].kv_clear(ctx[i]);
            }
            bt->n_tokens = prompt;
            for (int j = 0; j < prompt; ++j) {
                bt->token[j] = (s * 7 + j * 13) % 1000 + 5;
                bt->pos[j] = depth + (prompt > 1 ? j : pos);
                bt->n_seq_id[j] = 1;
                bt->seq_id[j][0] = 0;
                bt->logits[j] = j == prompt - 1;
            }
            usleep(3000);
            const double t0 = now_ms();
            if (b[i].decode(ctx[i], *bt) != 0) {
                fprintf(stderr, "ab_builds: %s: decode failed: %s\n", argv[1 + i], b[i].last_error());
                return 1;
            }
            ms[i] = now_ms() - t0;
        }
        if (s >= warmup) {
            t[0][s - warmup] = ms[0];
            t[1][s - warmup] = ms[1];
            ratio[s - warmup] = ms[1] / ms[0];
        }
    }
    qsort(t[0], steps, sizeof(double), cmp_double);
    qsort(t[1], steps, sizeof(double), cmp_double);
    qsort(ratio, steps, sizeof(double), cmp_double);
    printf("%s, %s%s: A %.2f t/s  B %.2f t/s  B/A time: median %.4f (quartiles %.4f %.4f), %d steps\n", argv[3],
           prompt > 1 ? "prompt" : "generation", depth > 0 ? " after a filled depth" : "", prompt * 1e3 / t[0][steps / 2], prompt * 1e3 / t[1][steps / 2], ratio[steps / 2],
           ratio[steps / 4], ratio[3 * steps / 4], steps);
    return 0;
}
