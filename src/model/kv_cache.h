// The KV cache: per layer, K and V rows for a fixed number of cells. A cell
// holds one token position and the set of sequences that share it (so a
// common prompt prefix is stored once for several sequences). A cache with a
// window (for sliding-window layers) reuses cells that no present or future
// token can see any more, so it needs only about window + batch cells.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <vector>

#include "backends/backend.h"
#include "core/kv_layout.h"
#include "core/tensor.h"

namespace kiln {

// No free cells for a batch: the caller must free some (remove or shift a sequence) or use a larger context.
class ContextFullError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

constexpr int kMaxSequences = 64;  // sequence sets are 64-bit masks

struct KvCacheOptions {
    uint32_t size = 0;              // cells
    Type type_k = Type::F16;
    Type type_v = Type::F16;
    std::vector<int> layers;        // model layers stored here
    int64_t n_embd_k = 0;           // K row length per layer (head_dim * n_head_kv)
    int64_t n_embd_v = 0;
    int64_t head_dim_k = 0;         // > 0 and type_k F32/F16/BF16: K is stored in panels (core/kv_layout.h)
    int64_t head_dim_v = 0;         // > 0 and a whole number of type_v blocks: V in head-major rows (core/kv_layout.h)
    int64_t window = 0;             // > 0: sliding window, cells older than it are reused
    uint32_t n_seq_max = 1;
};

class KvCache {
public:
    KvCache(const KvCacheOptions& opts, Backend& backend);

    uint32_t size() const { return static_cast<uint32_t>(cells_.size()); }
    uint32_t used() const;
    int64_t window() const { return opts_.window; }
    size_t memory_bytes() const;
    bool has_layer(int layer) const;
    // Cache tensors of a layer: [n_embd_k, size] and [n_embd_v, size]; with K panels, K has whole
    // panels of cells ([n_embd_k, size rounded up to kKPanelCells]) and is not one row per cell.
    Tensor* k(int layer);
    // The layout of K when it is stored in panels.
    std::optional<KPanels> k_panels() const;
    Tensor* v(int layer);
    // The layout of V when it is stored in head-major rows.
    std::optional<HeadMajorRows> v_head_major() const;
    const KvCacheOptions& options() const { return opts_; }

    // Chooses a cell for each token of a micro-batch and records it there (pos, seq set).
    // seqs[i] is the bit set of sequences token i belongs to. Throws ContextFullError.
    std::vector<int32_t> place(std::span<const int32_t> pos, std::span<const uint64_t> seqs);
    // Frees cells returned by place() (to undo it when a later step fails).
    void release(std::span<const int32_t> slots);
    // Cells attended: a prefix of the cache covering every used cell (rounded up to 32).
    int64_t n_kv() const;
    // mask [n_kv, n_tokens] (row per token): 0 where the token may see the cell, -inf elsewhere.
    void fill_mask(float* mask, int64_t n_kv, std::span<const int32_t> pos, std::span<const uint64_t> seqs) const;

    // Sequence operations (positions in [p0, p1); p1 < 0 means to the end).
    void seq_rm(int seq, int32_t p0, int32_t p1);
    void seq_cp(int seq_src, int seq_dst, int32_t p0, int32_t p1);
    void seq_keep(int seq);
    void seq_add(int seq, int32_t p0, int32_t p1, int32_t delta);
    int32_t seq_pos_max(int seq) const;  // -1 if the sequence has no cells
    int32_t seq_pos_min(int seq) const;
    void clear();

    // Shifts recorded by seq_add that K rows still have to be rotated by (0: none).
    bool has_pending_shift() const { return has_shift_; }
    std::span<const int32_t> pending_shift() const { return shift_; }
    void clear_pending_shift();

private:
    struct Cell {
        int32_t pos = -1;   // -1: free
        uint64_t seqs = 0;
    };
    void free_cell(Cell& c) { c = Cell{}; }
    // Frees cells of a windowed cache that no token at or after each sequence's next position can see.
    void evict_out_of_window(std::span<const int32_t> pos, std::span<const uint64_t> seqs);

    KvCacheOptions opts_;
    std::vector<Cell> cells_;
    std::vector<int32_t> shift_;
    bool has_shift_ = false;
    uint32_t head_ = 0;  // where the search for free cells starts
    std::vector<std::unique_ptr<Buffer>> buffers_;
    std::vector<Tensor> k_, v_;  // per stored layer
};

}  // namespace kiln
