#include "model/kv_cache.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <string>

namespace kiln {

KvCache::KvCache(const KvCacheOptions& opts, Backend& backend) : opts_(opts) {
    if (opts.size == 0) throw std::invalid_argument("KV cache: size must be > 0");
    if (opts.n_seq_max == 0 || opts.n_seq_max > kMaxSequences) {
        throw std::invalid_argument("KV cache: n_seq_max must be 1.." + std::to_string(kMaxSequences));
    }
    for (Type t : {opts.type_k, opts.type_v}) {
        if (t != Type::F16 && t != Type::F32 && t != Type::Q8_0 && t != Type::BF16) {
            throw std::invalid_argument("KV cache: type " + std::string(type_name(t)) + " is not supported (f16, f32, bf16, q8_0)");
        }
    }
    auto check_row = [](Type t, int64_t n, const char* what) {
        if (n % traits(t).block_size != 0) {
            throw std::invalid_argument(std::string("KV cache: ") + what + " rows of " + std::to_string(n) +
                                        " are not a multiple of the " + std::string(type_name(t)) + " block");
        }
    };
    check_row(opts.type_k, opts.n_embd_k, "K");
    if (opts.head_dim_k < 0 || (opts.head_dim_k > 0 && opts.n_embd_k % opts.head_dim_k != 0)) {
        throw std::invalid_argument("KV cache: K rows of " + std::to_string(opts.n_embd_k) + " are not whole heads of " +
                                    std::to_string(opts.head_dim_k));
    }
    check_row(opts.type_v, opts.n_embd_v, "V");
    cells_.resize(opts.size);
    shift_.assign(opts.size, 0);
    for (int layer : opts.layers) {
        for (int kv = 0; kv < 2; ++kv) {
            Tensor t;
            t.type = kv == 0 ? opts.type_k : opts.type_v;
            const int64_t cells = kv == 0 && k_panels() ? KPanels::padded_cells(opts.size) : opts.size;
            t.ne = {kv == 0 ? opts.n_embd_k : opts.n_embd_v, cells, 1, 1};
            set_contiguous_strides(t);
            t.name = (kv == 0 ? "cache_k_l" : "cache_v_l") + std::to_string(layer);
            auto buf = backend.alloc_buffer(t.nbytes());
            if (backend.is_host()) std::memset(buf->base(), 0, buf->size());
            t.data = buf->base();
            buffers_.push_back(std::move(buf));
            (kv == 0 ? k_ : v_).push_back(std::move(t));
        }
    }
}

uint32_t KvCache::used() const {
    return static_cast<uint32_t>(std::count_if(cells_.begin(), cells_.end(), [](const Cell& c) { return c.pos >= 0; }));
}

size_t KvCache::memory_bytes() const {
    size_t n = 0;
    for (const auto& b : buffers_) n += b->size();
    return n;
}

bool KvCache::has_layer(int layer) const {
    return std::find(opts_.layers.begin(), opts_.layers.end(), layer) != opts_.layers.end();
}

std::optional<HeadMajorRows> KvCache::v_head_major() const {
    const int64_t hd = opts_.head_dim_v;
    if (hd <= 0 || opts_.n_embd_v % hd != 0 || hd % traits(opts_.type_v).block_size != 0) return std::nullopt;
    return HeadMajorRows{.type = opts_.type_v, .head_dim = hd, .cells = static_cast<int64_t>(opts_.size)};
}

std::optional<KPanels> KvCache::k_panels() const {
    if (opts_.head_dim_k <= 0 || !k_panels_supported(opts_.type_k)) return std::nullopt;
    return KPanels{.type = opts_.type_k, .head_dim = opts_.head_dim_k, .n_head = opts_.n_embd_k / opts_.head_dim_k,
                   .cells = KPanels::padded_cells(opts_.size)};
}

Tensor* KvCache::k(int layer) {
    const auto it = std::find(opts_.layers.begin(), opts_.layers.end(), layer);
    if (it == opts_.layers.end()) throw std::logic_error("KV cache: layer " + std::to_string(layer) + " is not stored here");
    return &k_[static_cast<size_t>(it - opts_.layers.begin())];
}

Tensor* KvCache::v(int layer) {
    const auto it = std::find(opts_.layers.begin(), opts_.layers.end(), layer);
    if (it == opts_.layers.end()) throw std::logic_error("KV cache: layer " + std::to_string(layer) + " is not stored here");
    return &v_[static_cast<size_t>(it - opts_.layers.begin())];
}

void KvCache::evict_out_of_window(std::span<const int32_t> pos, std::span<const uint64_t> seqs) {
    if (opts_.window <= 0) return;
    // Smallest position any present or future token of each sequence can have.
    int32_t next_pos[kMaxSequences];
    for (int s = 0; s < kMaxSequences; ++s) next_pos[s] = seq_pos_max(s) + 1;
    for (size_t i = 0; i < pos.size(); ++i) {
        for (int s = 0; s < kMaxSequences; ++s) {
            if (seqs[i] >> s & 1u) next_pos[s] = std::min(next_pos[s], pos[i]);
        }
    }
    for (Cell& c : cells_) {
        if (c.pos < 0) continue;
        bool visible = false;
        for (int s = 0; s < kMaxSequences && !visible; ++s) {
            if ((c.seqs >> s & 1u) && next_pos[s] - c.pos < opts_.window) visible = true;
        }
        if (!visible) free_cell(c);
    }
}

std::vector<int32_t> KvCache::place(std::span<const int32_t> pos, std::span<const uint64_t> seqs) {
    evict_out_of_window(pos, seqs);
    std::vector<int32_t> slots;
    slots.reserve(pos.size());
    const uint32_t n = size();
    uint32_t i = head_;
    for (uint32_t scanned = 0; slots.size() < pos.size() && scanned < n; ++scanned, i = (i + 1) % n) {
        if (cells_[i].pos < 0) slots.push_back(static_cast<int32_t>(i));
    }
    if (slots.size() < pos.size()) {
        throw ContextFullError("the KV cache is full: " + std::to_string(pos.size()) + " tokens need cells, " +
                               std::to_string(n - used()) + " of " + std::to_string(n) + " are free");
    }
    for (size_t t = 0; t < pos.size(); ++t) {
        Cell& c = cells_[static_cast<size_t>(slots[t])];
        c.pos = pos[t];
        c.seqs = seqs[t];
    }
    head_ = static_cast<uint32_t>(slots.back() + 1) % n;
    return slots;
}

void KvCache::release(std::span<const int32_t> slots) {
    for (int32_t s : slots) free_cell(cells_[static_cast<size_t>(s)]);
}

int64_t KvCache::n_kv() const {
    int64_t last = 0;
    for (size_t i = 0; i < cells_.size(); ++i) {
        if (cells_[i].pos >= 0) last = static_cast<int64_t>(i) + 1;
    }
    const int64_t padded = (last + 31) / 32 * 32;
    return std::min<int64_t>(std::max<int64_t>(padded, 32), size());
}

void KvCache::fill_mask(float* mask, int64_t n_kv, std::span<const int32_t> pos, std::span<const uint64_t> seqs) const {
    constexpr float kHidden = -std::numeric_limits<float>::infinity();
    for (size_t t = 0; t < pos.size(); ++t) {
        float* row = mask + static_cast<int64_t>(t) * n_kv;
        for (int64_t c = 0; c < n_kv; ++c) {
            const Cell& cell = cells_[static_cast<size_t>(c)];
            const bool visible = cell.pos >= 0 && (cell.seqs & seqs[t]) != 0 && cell.pos <= pos[t] &&
                                 (opts_.window <= 0 || pos[t] - cell.pos < opts_.window);
            row[c] = visible ? 0.0f : kHidden;
        }
    }
}

namespace {
bool in_range(int32_t p, int32_t p0, int32_t p1) { return p >= std::max(p0, 0) && (p1 < 0 || p < p1); }
}  // namespace

void KvCache::seq_rm(int seq, int32_t p0, int32_t p1) {
    for (Cell& c : cells_) {
        if (c.pos < 0 || !in_range(c.pos, p0, p1)) continue;
        if (seq < 0) {
            free_cell(c);
        } else if (c.seqs >> seq & 1u) {
            c.seqs &= ~(uint64_t{1} << seq);
            if (c.seqs == 0) free_cell(c);
        }
    }
    head_ = 0;
}

void KvCache::seq_cp(int src, int dst, int32_t p0, int32_t p1) {
    if (src == dst) return;
    for (Cell& c : cells_) {
        if (c.pos >= 0 && (c.seqs >> src & 1u) && in_range(c.pos, p0, p1)) c.seqs |= uint64_t{1} << dst;
    }
}

void KvCache::seq_keep(int seq) {
    for (Cell& c : cells_) {
        if (c.pos < 0) continue;
        if (c.seqs >> seq & 1u) {
            c.seqs = uint64_t{1} << seq;
        } else {
            free_cell(c);
        }
    }
    head_ = 0;
}

void KvCache::seq_add(int seq, int32_t p0, int32_t p1, int32_t delta) {
    if (delta == 0) return;
    for (size_t i = 0; i < cells_.size(); ++i) {
        Cell& c = cells_[i];
        if (c.pos < 0 || !(c.seqs >> seq & 1u) || !in_range(c.pos, p0, p1)) continue;
        c.pos += delta;
        if (c.pos < 0) {
            free_cell(c);
            shift_[i] = 0;
            continue;
        }
        shift_[i] += delta;
        has_shift_ = true;
    }
    head_ = 0;
}

int32_t KvCache::seq_pos_max(int seq) const {
    int32_t m = -1;
    for (const Cell& c : cells_) {
        if (c.pos >= 0 && (c.seqs >> seq & 1u)) m = std::max(m, c.pos);
    }
    return m;
}

int32_t KvCache::seq_pos_min(int seq) const {
    int32_t m = -1;
    for (const Cell& c : cells_) {
        if (c.pos >= 0 && (c.seqs >> seq & 1u) && (m < 0 || c.pos < m)) m = c.pos;
    }
    return m;
}

void KvCache::clear() {
    for (Cell& c : cells_) free_cell(c);
    clear_pending_shift();
    head_ = 0;
}

void KvCache::clear_pending_shift() {
    std::fill(shift_.begin(), shift_.end(), 0);
    has_shift_ = false;
}

}  // namespace kiln
