// An inference context over a model: KV caches, the backends and scheduler
// that run each batch's graph, the logits of the last batch, and performance
// counters. Not thread-safe: one thread drives a context at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "backends/scheduler.h"
#include "model/kv_cache.h"
#include "model/model.h"

namespace kiln {

struct ContextParams {
    uint32_t n_ctx = 0;       // KV cells (0: the model's training context)
    uint32_t n_batch = 2048;  // most tokens one decode() call accepts
    uint32_t n_ubatch = 512;  // tokens per graph evaluation
    int n_threads = 0;        // threads for one-token batches (generation); 0: physical cores
    int n_threads_batch = 0;  // threads for batches of more tokens (prompts); 0: n_threads
    Type type_k = Type::F16;
    Type type_v = Type::F16;
    uint32_t n_seq_max = 1;   // sequences the context holds at once (<= 64)
    MatmulPrecision matmul_precision = MatmulPrecision::Auto;
    cpu::ThreadPlacement placement = {};  // CPUs the compute threads run on (empty: the OS places them), poll level
};

// Tokens to decode, each with its position, sequences, and whether its logits are wanted.
struct Batch {
    std::vector<int32_t> tokens;
    std::vector<int32_t> pos;
    std::vector<uint64_t> seqs;    // bit set of sequence ids per token
    std::vector<uint8_t> logits;   // 1: compute this token's logits

    void add(int32_t token, int32_t p, std::initializer_list<int> seq_ids, bool want_logits);
    void clear();
    size_t size() const { return tokens.size(); }
};

struct PerfCounters {
    double t_prompt_ms = 0;   // decode() calls of more than one token
    int64_t n_prompt = 0;
    double t_eval_ms = 0;     // decode() calls of one token
    int64_t n_eval = 0;
    double t_sample_ms = 0;   // added by samplers
    int64_t n_sample = 0;
};

class Context {
public:
    Context(const Model& model, const ContextParams& params);
    ~Context();
    Context(const Context&) = delete;
    Context& operator=(const Context&) = delete;

    // Evaluates a batch. Throws std::invalid_argument for a malformed batch (bad token id, position,
    // sequence id, more than n_batch tokens) and ContextFullError when the KV cache has no room.
    void decode(const Batch& batch);

    // Logits of token i of the last batch (i < 0 counts from the end of the batch); the token must
    // have had its logits flag set. n_vocab floats.
    const float* logits(int32_t i) const;
    int64_t n_vocab() const { return model_.hparams().n_vocab; }

    // KV cache operations on one sequence (seq < 0 in seq_rm: all sequences).
    void seq_rm(int seq, int32_t p0, int32_t p1);
    void seq_cp(int src, int dst, int32_t p0, int32_t p1);
    void seq_keep(int seq);
    void seq_add(int seq, int32_t p0, int32_t p1, int32_t delta);
    int32_t seq_pos_max(int seq) const;
    void kv_clear();

    uint32_t n_ctx() const { return n_ctx_; }
    const ContextParams& params() const { return params_; }
    uint32_t kv_used() const;      // cells in use (of the global cache)
    size_t kv_bytes() const;
    size_t compute_bytes() const;
    int n_threads() const { return n_threads_; }
    int n_threads_batch() const { return n_threads_batch_; }
    const Model& model() const { return model_; }

    // Watches chosen graph nodes during decode (see Scheduler::Observer); an empty observer stops.
    void set_observer(Scheduler::Observer obs) { sched_.set_observer(std::move(obs)); }

    // Per-op timing of the CPU graphs (kiln-bench --profile; backends/cpu/op_profile.h).
    void set_op_profiling(bool on) { cpu_.set_profiling(on); }
    std::vector<cpu::OpTime> op_times() const { return cpu_.op_times(); }

    PerfCounters& perf() { return perf_; }
    const PerfCounters& perf() const { return perf_; }

private:
    void decode_ubatch(const Batch& b, size_t begin, size_t end);
    void apply_kv_shift();

    const Model& model_;
    ContextParams params_;
    uint32_t n_ctx_;
    int n_threads_;        // params' n_threads resolved (before cpu_: it sizes the pool)
    int n_threads_batch_;  // params' n_threads_batch resolved
    cpu::CpuBackend cpu_;
    Scheduler sched_;
    std::unique_ptr<KvCache> kv_global_;
    std::unique_ptr<KvCache> kv_swa_;     // null when the model has no sliding-window layers
    std::vector<float> logits_;           // n_outputs x n_vocab of the last batch
    std::vector<int32_t> output_row_;     // per token of the last batch: row in logits_, or -1
    PerfCounters perf_;
    // The last micro-batch's graph, built and allocated, run again for the next micro-batch of the
    // same shape (context.cpp).
    struct BuiltGraph;
    std::unique_ptr<BuiltGraph> graph_;
};

}  // namespace kiln
