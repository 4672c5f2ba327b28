#include "model/context.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>

#include "core/quant.h"

namespace kiln {

void Batch::add(int32_t token, int32_t p, std::initializer_list<int> seq_ids, bool want_logits) {
    uint64_t mask = 0;
    for (int s : seq_ids) {
        if (s < 0 || s >= kMaxSequences) throw std::invalid_argument("batch: sequence id " + std::to_string(s) + " is out of range");
        mask |= uint64_t{1} << s;
    }
    tokens.push_back(token);
    pos.push_back(p);
    seqs.push_back(mask);
    logits.push_back(want_logits ? 1 : 0);
}

void Batch::clear() {
    tokens.clear();
    pos.clear();
    seqs.clear();
    logits.clear();
}

namespace {

uint32_t round_up(uint32_t n, uint32_t m) { return (n + m - 1) / m * m; }

std::vector<int> layers_where(const HParams& hp, bool swa) {
    std::vector<int> out;
    for (int il = 0; il < hp.n_layer; ++il) {
        if (hp.is_swa(il) == swa) out.push_back(il);
    }
    return out;
}

}  // namespace

// A graph depends on the batch only through these (GraphBuilder's arguments and fields); the
// tokens, positions, cells and masks are its inputs' data, filled for every run. Generation
// decodes one token after another with the same shape until the attended cache prefix (n_kv)
// grows by 32 cells, so most tokens run the previous token's graph: building and allocating the
// 1b llama's graph (~500 nodes) took ~150 us a token, 0.8% of its generation time (2 threads).
struct Context::BuiltGraph {
    struct Shape {
        int64_t n_tokens = 0, n_outputs = 0;
        int64_t n_kv[2] = {};  // per cache of GraphBuilder (0: none)
        bool mixed_sequences = false;
        bool operator==(const Shape&) const = default;
    };
    Shape shape;
    uint64_t plan_id = 0;  // Scheduler::plan_id() after its allocate()
    Graph graph;
    std::optional<GraphBuilder> builder;  // holds the graph's inputs
    Tensor* logits = nullptr;
};

Context::~Context() = default;

Context::Context(const Model& model, const ContextParams& params)
    : model_(model),
      params_(params),
      n_ctx_(params.n_ctx ? params.n_ctx : static_cast<uint32_t>(std::min<int64_t>(model.hparams().n_ctx_train, 1 << 20))),
      n_threads_(params.n_threads > 0 ? params.n_threads : cpu::physical_cores()),
      n_threads_batch_(params.n_threads_batch > 0 ? params.n_threads_batch : n_threads_),
      // One pool for both: prompts and generation take its first n_threads_batch_ / n_threads_ threads.
      cpu_(cpu::CpuBackendOptions{.n_threads = std::max(n_threads_, n_threads_batch_), .matmul_precision = params.matmul_precision, .placement = params.placement}),
      sched_({&cpu_}, [](int) { return 0; }) {
    const HParams& hp = model.hparams();
    if (params_.n_ubatch == 0 || params_.n_batch == 0) throw std::invalid_argument("context: n_batch and n_ubatch must be > 0");
    params_.n_ubatch = std::min(params_.n_ubatch, params_.n_batch);
    n_ctx_ = round_up(n_ctx_, 32);
    const KvCacheOptions base{.size = n_ctx_, .type_k = params.type_k, .type_v = params.type_v, .layers = {},
                              .n_embd_k = hp.n_embd_k_gqa(), .n_embd_v = hp.n_embd_v_gqa(), .head_dim_k = hp.head_dim,
                              .head_dim_v = hp.head_dim_v, .window = 0,
                              .n_seq_max = params.n_seq_max};
    KvCacheOptions global = base;
    global.layers = layers_where(hp, false);
    if (!global.layers.empty()) kv_global_ = std::make_unique<KvCache>(global, cpu_);
    const auto swa_layers = layers_where(hp, true);
    if (!swa_layers.empty()) {
        // Sliding-window layers only ever see the last `window` positions of each sequence.
        KvCacheOptions swa = base;
        swa.layers = swa_layers;
        swa.window = hp.sliding_window;
        swa.size = std::min(n_ctx_, round_up(static_cast<uint32_t>(hp.sliding_window) * params.n_seq_max + params_.n_ubatch, 256));
        kv_swa_ = std::make_unique<KvCache>(swa, cpu_);
    }
    if (!kv_global_) {  // every layer is sliding-window: the "global" slot holds them for position bookkeeping
        kv_global_ = std::move(kv_swa_);
    }
}

void Context::decode(const Batch& b) {
    const auto t0 = std::chrono::steady_clock::now();
    const HParams& hp = model_.hparams();
    const size_t n = b.tokens.size();
    if (n == 0) throw std::invalid_argument("decode: the batch is empty");
    if (b.pos.size() != n || b.seqs.size() != n || b.logits.size() != n) {
        throw std::invalid_argument("decode: batch arrays differ in length");
    }
    if (n > params_.n_batch) {
        throw std::invalid_argument("decode: batch of " + std::to_string(n) + " tokens exceeds n_batch " + std::to_string(params_.n_batch));
    }
    if (n > n_ctx_) {
        throw ContextFullError("decode: " + std::to_string(n) + " tokens do not fit in a context of " + std::to_string(n_ctx_));
    }
    const uint64_t allowed = params_.n_seq_max >= 64 ? ~uint64_t{0} : (uint64_t{1} << params_.n_seq_max) - 1;
    for (size_t i = 0; i < n; ++i) {
        if (b.tokens[i] < 0 || b.tokens[i] >= hp.n_vocab) {
            throw std::invalid_argument("decode: token id " + std::to_string(b.tokens[i]) + " at batch index " + std::to_string(i) +
                                        " is outside the vocabulary of " + std::to_string(hp.n_vocab));
        }
        if (b.pos[i] < 0) throw std::invalid_argument("decode: negative position at batch index " + std::to_string(i));
        if (b.seqs[i] == 0 || (b.seqs[i] & ~allowed)) {
            throw std::invalid_argument("decode: batch index " + std::to_string(i) + " has no sequence or one >= n_seq_max " +
                                        std::to_string(params_.n_seq_max));
        }
    }
    if (kv_global_->has_pending_shift() || (kv_swa_ && kv_swa_->has_pending_shift())) apply_kv_shift();

    size_t n_out = 0;
    output_row_.assign(n, -1);
    for (size_t i = 0; i < n; ++i) {
        if (b.logits[i]) output_row_[i] = static_cast<int32_t>(n_out++);
    }
    logits_.assign(n_out * static_cast<size_t>(hp.n_vocab), 0.0f);
    for (size_t begin = 0; begin < n; begin += params_.n_ubatch) {
        decode_ubatch(b, begin, std::min(n, begin + params_.n_ubatch));
    }
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (n > 1) {
        perf_.t_prompt_ms += ms;
        perf_.n_prompt += static_cast<int64_t>(n);
    } else {
        perf_.t_eval_ms += ms;
        perf_.n_eval += 1;
    }
}

void Context::decode_ubatch(const Batch& b, size_t begin, size_t end) {
    const HParams& hp = model_.hparams();
    const auto n_tokens = static_cast<int64_t>(end - begin);
    const std::span<const int32_t> pos(b.pos.data() + begin, end - begin);
    const std::span<const uint64_t> seqs(b.seqs.data() + begin, end - begin);
    std::vector<int32_t> out_ids;
    for (size_t i = begin; i < end; ++i) {
        if (b.logits[i]) out_ids.push_back(static_cast<int32_t>(i - begin));
    }

    // Cells for the new tokens in each cache (all-or-nothing across the caches).
    std::vector<int32_t> slots_global = kv_global_->place(pos, seqs);
    std::vector<int32_t> slots_swa;
    if (kv_swa_) {
        try {
            slots_swa = kv_swa_->place(pos, seqs);
        } catch (...) {
            kv_global_->release(slots_global);
            throw;
        }
    }

    KvCache* caches[2] = {kv_global_.get(), kv_swa_.get()};
    if (kv_global_->window() > 0) std::swap(caches[0], caches[1]);  // all-SWA model
    const BuiltGraph::Shape shape{
        .n_tokens = n_tokens,
        .n_outputs = static_cast<int64_t>(out_ids.size()),
        .n_kv = {caches[0] ? caches[0]->n_kv() : 0, caches[1] ? caches[1]->n_kv() : 0},
        .mixed_sequences = std::any_of(seqs.begin(), seqs.end(), [&](uint64_t s) { return s != seqs.front(); }),
    };
    if (!graph_ || graph_->shape != shape || graph_->plan_id != sched_.plan_id()) {
        graph_.reset();
        auto built = std::make_unique<BuiltGraph>();
        built->shape = shape;
        GraphBuilder& gb = built->builder.emplace(built->graph, hp, model_.weights(), caches[0], caches[1], n_tokens, shape.n_outputs);
        gb.mixed_sequences = shape.mixed_sequences;
        built->logits = model_.arch().build_graph(gb);
        sched_.allocate(built->graph);
        built->plan_id = sched_.plan_id();
        graph_ = std::move(built);
    }
    GraphBuilder& gb = *graph_->builder;
    Graph& g = graph_->graph;
    Tensor* logits = graph_->logits;

    std::memcpy(gb.in.tokens->data, b.tokens.data() + begin, static_cast<size_t>(n_tokens) * sizeof(int32_t));
    std::memcpy(gb.in.positions->data, pos.data(), static_cast<size_t>(n_tokens) * sizeof(int32_t));
    if (!out_ids.empty()) std::memcpy(gb.in.out_ids->data, out_ids.data(), out_ids.size() * sizeof(int32_t));
    for (int c = 0; c < 2; ++c) {
        if (!caches[c]) continue;
        const auto& slots = caches[c] == kv_global_.get() ? slots_global : slots_swa;
        std::memcpy(gb.in.cache[c].store_idx->data, slots.data(), slots.size() * sizeof(int32_t));
        caches[c]->fill_mask(static_cast<float*>(gb.in.cache[c].mask->data), gb.in.cache[c].n_kv, pos, seqs);
    }
    cpu_.set_active_threads(n_tokens > 1 ? n_threads_batch_ : n_threads_);
    sched_.compute(g);

    for (size_t r = 0; r < out_ids.size(); ++r) {
        const size_t row = static_cast<size_t>(output_row_[begin + static_cast<size_t>(out_ids[r])]);
        std::memcpy(logits_.data() + row * static_cast<size_t>(hp.n_vocab), logits->row(static_cast<int64_t>(r)),
                    static_cast<size_t>(hp.n_vocab) * sizeof(float));
    }
}

// Rotates cached K rows by the position deltas recorded by seq_add: RoPE of
// angle (p + d) equals RoPE of angle d applied after RoPE of angle p. The
// rotation depends on the delta, not on the cell, so its cos/sin pairs are
// computed once per distinct delta (a context shift has one) and layer kind.
// Panel caches are rotated a tile (64 cells of one head) at a time: the two
// values of a rotated pair are then two contiguous rows of the tile.
void Context::apply_kv_shift() {
    const HParams& hp = model_.hparams();
    const int half = hp.n_rot / 2;
    const bool neox = hp.rope_mode == RopeMode::Neox;
    auto pair_dims = [&](int i) { return neox ? std::pair{i, i + half} : std::pair{2 * i, 2 * i + 1}; };
    auto rotate = [](float& x0, float& x1, float cos_t, float sin_t) {
        const float a = x0, b = x1;
        x0 = a * cos_t - b * sin_t;
        x1 = a * sin_t + b * cos_t;
    };
    // (swa, delta) -> cos/sin interleaved per rotated pair [half][2]
    std::map<std::pair<bool, int32_t>, std::vector<float>> rotations;
    auto rotation = [&](bool swa, int32_t delta) -> const std::vector<float>& {
        auto [it, added] = rotations.try_emplace({swa, delta});
        if (added) {
            const double base = swa ? hp.rope_freq_base_swa : hp.rope_freq_base;
            const double fscale = swa ? hp.rope_freq_scale_swa : hp.rope_freq_scale;
            const double theta_scale = std::pow(base, -2.0 / hp.n_rot);
            it->second.resize(2 * static_cast<size_t>(half));
            double theta = delta * fscale;
            for (int i = 0; i < half; ++i, theta *= theta_scale) {
                it->second[2 * static_cast<size_t>(i)] = static_cast<float>(std::cos(theta));
                it->second[2 * static_cast<size_t>(i) + 1] = static_cast<float>(std::sin(theta));
            }
        }
        return it->second;
    };
    for (KvCache* kv : {kv_global_.get(), kv_swa_.get()}) {
        if (!kv || !kv->has_pending_shift()) continue;
        const auto shift = kv->pending_shift();
        const auto n_cells = static_cast<int64_t>(shift.size());
        if (const std::optional<KPanels> panels = kv->k_panels()) {
            const int64_t hd = panels->head_dim, w = kKPanelCells;
            std::vector<float> tile(static_cast<size_t>(hd * w));
            std::vector<float> cs(static_cast<size_t>(half * w) * 2);  // [half][cos w | sin w] of one panel
            for (int il : kv->options().layers) {
                Tensor* k = kv->k(il);
                const bool swa = hp.is_swa(il);
                for (int64_t c0 = 0; c0 < n_cells; c0 += w) {
                    const int64_t nc = std::min(w, n_cells - c0);
                    if (std::all_of(shift.begin() + c0, shift.begin() + c0 + nc, [](int32_t d) { return d == 0; })) continue;
                    for (int64_t c = 0; c < nc; ++c) {
                        if (shift[static_cast<size_t>(c0 + c)] == 0) continue;
                        const std::vector<float>& r = rotation(swa, shift[static_cast<size_t>(c0 + c)]);
                        for (int i = 0; i < half; ++i) {
                            cs[static_cast<size_t>(2 * i * w + c)] = r[2 * static_cast<size_t>(i)];
                            cs[static_cast<size_t>((2 * i + 1) * w + c)] = r[2 * static_cast<size_t>(i) + 1];
                        }
                    }
                    for (int64_t h = 0; h < panels->n_head; ++h) {
                        uint8_t* t = panels->tile(k->data, c0, h);
                        dequantize_row(panels->type, t, tile.data(), hd * w);
                        for (int i = 0; i < half; ++i) {
                            const auto [a, b] = pair_dims(i);
                            float* xa = tile.data() + a * w;
                            float* xb = tile.data() + b * w;
                            const float* cos_t = cs.data() + 2 * i * w;
                            const float* sin_t = cos_t + w;
                            // Cells with no shift (and the panel's unused cells) keep their bits.
                            for (int64_t c = 0; c < nc; ++c) {
                                if (shift[static_cast<size_t>(c0 + c)] != 0) rotate(xa[c], xb[c], cos_t[c], sin_t[c]);
                            }
                        }
                        quantize(panels->type, tile.data(), t, 1, hd * w);
                    }
                }
            }
        } else {
            std::vector<float> row(static_cast<size_t>(hp.n_embd_k_gqa()));
            for (int il : kv->options().layers) {
                Tensor* k = kv->k(il);
                const bool swa = hp.is_swa(il);
                for (int64_t c = 0; c < n_cells; ++c) {
                    if (shift[static_cast<size_t>(c)] == 0) continue;
                    const std::vector<float>& r = rotation(swa, shift[static_cast<size_t>(c)]);
                    dequantize_row(k->type, k->row(c), row.data(), k->ne[0]);
                    for (int64_t h = 0; h < hp.n_head_kv; ++h) {
                        float* x = row.data() + h * hp.head_dim;
                        for (int i = 0; i < half; ++i) {
                            const auto [a, b] = pair_dims(i);
                            rotate(x[a], x[b], r[2 * static_cast<size_t>(i)], r[2 * static_cast<size_t>(i) + 1]);
                        }
                    }
                    quantize(k->type, row.data(), k->row(c), 1, k->ne[0]);
                }
            }
        }
        kv->clear_pending_shift();
    }
}

const float* Context::logits(int32_t i) const {
    const auto n = static_cast<int32_t>(output_row_.size());
    if (i < 0) i += n;
    if (i < 0 || i >= n || output_row_[static_cast<size_t>(i)] < 0) {
        throw std::invalid_argument("logits: batch index " + std::to_string(i) + " has no logits (set its logits flag)");
    }
    return logits_.data() + static_cast<size_t>(output_row_[static_cast<size_t>(i)]) * static_cast<size_t>(n_vocab());
}

void Context::seq_rm(int seq, int32_t p0, int32_t p1) {
    kv_global_->seq_rm(seq, p0, p1);
    if (kv_swa_) kv_swa_->seq_rm(seq, p0, p1);
}
void Context::seq_cp(int src, int dst, int32_t p0, int32_t p1) {
    kv_global_->seq_cp(src, dst, p0, p1);
    if (kv_swa_) kv_swa_->seq_cp(src, dst, p0, p1);
}
void Context::seq_keep(int seq) {
    kv_global_->seq_keep(seq);
    if (kv_swa_) kv_swa_->seq_keep(seq);
}
void Context::seq_add(int seq, int32_t p0, int32_t p1, int32_t delta) {
    kv_global_->seq_add(seq, p0, p1, delta);
    if (kv_swa_) kv_swa_->seq_add(seq, p0, p1, delta);
}
int32_t Context::seq_pos_max(int seq) const { return kv_global_->seq_pos_max(seq); }
void Context::kv_clear() {
    kv_global_->clear();
    if (kv_swa_) kv_swa_->clear();
}
uint32_t Context::kv_used() const { return kv_global_->used(); }
size_t Context::kv_bytes() const { return kv_global_->memory_bytes() + (kv_swa_ ? kv_swa_->memory_bytes() : 0); }
size_t Context::compute_bytes() const {
    size_t n = 0;
    for (size_t s : sched_.buffer_sizes()) n += s;
    return n;
}

}  // namespace kiln
