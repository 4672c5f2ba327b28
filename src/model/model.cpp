#include "model/model.h"

#include <chrono>
#include <cstdio>
#include <algorithm>
#include <new>
#include <thread>
#include <vector>
#include <stdexcept>
#include <unordered_set>

#include "backends/cpu/kernels/gemm.h"
#include "core/float_convert.h"
#include "core/quant_blocks.h"
#include "core/quant_repack.h"

#if !defined(_WIN32)
#include <sys/mman.h>
#else
#ifndef NOMINMAX
#define NOMINMAX
#endif
#ifndef WIN32_LEAN_AND_MEAN
#define WIN32_LEAN_AND_MEAN
#endif
#include <windows.h>  // VirtualLock
#endif

namespace kiln {
namespace {

std::string shape_str(const std::vector<int64_t>& s) {
    std::string r = "[";
    for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
    return r + "]";
}

class FileWeightLoader final : public WeightLoader {
public:
    FileWeightLoader(const gguf::File& f, std::deque<Tensor>& out) : f_(f), out_(out) {}

    Tensor* require(const std::string& name, std::vector<int64_t> shape) override {
        Tensor* t = optional(name, std::move(shape));
        if (!t) throw std::runtime_error(f_.path() + ": tensor '" + name + "' is missing");
        return t;
    }

    Tensor* optional(const std::string& name, std::vector<int64_t> shape) override {
        const gguf::TensorInfo* info = f_.find_tensor(name);
        if (!info) return nullptr;
        std::vector<int64_t> have = info->shape;
        while (have.size() > shape.size() && have.back() == 1) have.pop_back();
        while (shape.size() > have.size() && shape.back() == 1) shape.pop_back();
        if (have != shape) {
            throw std::runtime_error(f_.path() + ": tensor '" + name + "' has shape " + shape_str(info->shape) + ", expected " +
                                     shape_str(shape));
        }
        Tensor& t = out_.emplace_back();
        t.type = info->type;
        for (size_t i = 0; i < info->shape.size(); ++i) t.ne[i] = info->shape[i];
        set_contiguous_strides(t);
        t.name = name;
        t.data = const_cast<uint8_t*>(f_.tensor_data(*info).data());  // read-only mapping: kernels only read weights
        used_.insert(name);
        return &t;
    }

    const std::unordered_set<std::string>& used() const { return used_; }

private:
    const gguf::File& f_;
    std::deque<Tensor>& out_;
    std::unordered_set<std::string> used_;
};

}  // namespace

std::unique_ptr<Model> Model::load(const std::string& path, const ModelParams& params) {
    const auto t0 = std::chrono::steady_clock::now();
    std::unique_ptr<Model> m(new Model(gguf::File::open(path, gguf::OpenOptions{.use_mmap = params.use_mmap})));
    const auto arch_name = m->file_.get_string("general.architecture");
    if (!arch_name) throw std::runtime_error(path + ": metadata key 'general.architecture' is missing");
    m->arch_ = find_architecture(*arch_name);
    if (!m->arch_) {
        std::string known;
        for (auto n : architecture_names()) known += (known.empty() ? "" : ", ") + std::string(n);
        throw std::runtime_error(path + ": unknown architecture '" + *arch_name + "' (kiln knows: " + known + ")");
    }
    m->hp_.arch = *arch_name;
    read_common_hparams(m->file_, m->hp_);
    m->arch_->load_hparams(m->file_, m->hp_);
    if (m->file_.find("tokenizer.ggml.model")) {
        m->tokenizer_ = std::make_unique<Tokenizer>(Tokenizer::from_gguf(m->file_));
        if (m->tokenizer_->n_vocab() != m->hp_.n_vocab) {
            throw std::runtime_error(path + ": the tokenizer has " + std::to_string(m->tokenizer_->n_vocab()) +
                                     " tokens but the model " + std::to_string(m->hp_.n_vocab));
        }
    }
    FileWeightLoader wl(m->file_, m->tensors_);
    m->arch_->load_weights(wl, m->hp_, m->w_);
    if (params.repack) m->repack_weights(params);

    // Touch every page of the weights once (with progress) so the first decode does not pay for
    // page faults, and lock them in RAM when asked.
    size_t total = 0;
    for (const Tensor& t : m->tensors_) total += t.nbytes();
    size_t done = 0;
    for (const Tensor& t : m->tensors_) done += t.layout == Layout::Packed16 ? t.nbytes() : 0;
    volatile uint8_t sink = 0;
    for (const Tensor& t : m->tensors_) {
        const auto* p = static_cast<const uint8_t*>(t.data);
        const size_t n = t.nbytes();
        m->n_params_ += t.nelements();
        if (t.layout == Layout::Packed16) continue;  // written, counted (and locked) by repack_weights
        for (size_t off = 0; off < n; off += 4096) sink = static_cast<uint8_t>(sink + p[off]);
#if !defined(_WIN32)
        if (params.use_mlock && ::mlock(p, n) != 0) {
            std::fprintf(stderr, "kiln: warning: mlock of '%s' failed (raise RLIMIT_MEMLOCK?); continuing unlocked\n",
                         t.name.c_str());
        }
#else
        // Windows locks at most the process's working-set minimum (raise it with SetProcessWorkingSetSize).
        if (params.use_mlock && !VirtualLock(const_cast<uint8_t*>(p), n)) {
            std::fprintf(stderr, "kiln: warning: VirtualLock of '%s' failed (working set too small?); continuing unlocked\n",
                         t.name.c_str());
        }
#endif
        done += n;
        if (params.progress && !params.progress(total ? static_cast<float>(done) / static_cast<float>(total) : 1.0f)) {
            throw std::runtime_error(path + ": loading cancelled");
        }
    }
    m->weights_bytes_ = total;
    m->load_ms_ = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    return m;
}

namespace {
constexpr size_t kPackAlign = size_t{2} << 20;  // 2 MiB: lets the kernel back the copy with huge pages


// The packed F16 fast path sums runs of fp16 products (kernels/gemm_float.h): weights must stay
// below 511 in magnitude for the runs to stay finite; anything that large is not a normal
// weight, and such a tensor keeps the file layout (exact F32 sums) instead.
constexpr float kMaxHalfSumWeight = 256.0f;

bool f16_fits_half_sums(const Tensor& t) {
    const auto* h = static_cast<const fp16_t*>(t.data);
    const fp16_t limit = fp32_to_fp16(kMaxHalfSumWeight);  // magnitudes compare as integers
    for (int64_t i = 0, n = t.nelements(); i < n; ++i) {
        if ((h[i] & 0x7FFF) >= limit) return false;
    }
    return true;
}
}  // namespace

void Model::AlignedFree::operator()(uint8_t* p) const { ::operator delete(p, std::align_val_t{kPackAlign}); }

// Copies each matrix weight the selected CPU kernels accelerate into the packed layout (one
// buffer for all), points the tensor at the copy and releases the file pages it came from.
void Model::repack_weights(const ModelParams& params) {
    const cpu::Isa isa = cpu::selected_isa();
    std::vector<Tensor*> todo;
    auto consider = [&](Tensor* t) {
        if (!t || t->layout != Layout::Rows || !t->is_contiguous() || t->ne[2] != 1 || t->ne[3] != 1) return;
        if (std::find(todo.begin(), todo.end(), t) != todo.end()) return;
        if (!can_pack(t->type, t->ne[0], t->ne[1]) || !cpu::packed_accelerated(t->type, isa)) return;
        if (t->type == Type::F16 && !f16_fits_half_sums(*t)) {
            std::fprintf(stderr, "kiln: '%s' has F16 weights of magnitude >= %g; kept in the file layout (the packed fast path sums in fp16)\n",
                         t->name.c_str(), static_cast<double>(kMaxHalfSumWeight));
            return;
        }
        todo.push_back(t);
    };
    for (const LayerWeights& l : w_.layers) {
        for (Tensor* t : {l.wq, l.wk, l.wv, l.wo, l.ffn_gate, l.ffn_up, l.ffn_down}) consider(t);
    }
    consider(w_.output);
    if (todo.empty()) return;
    size_t all_bytes = 0, packed_done = 0;  // progress: packing comes first, then the other tensors are touched
    for (const Tensor& t : tensors_) all_bytes += t.nbytes();
    size_t total = 0;
    for (const Tensor* t : todo) total += (packed_size(t->type, t->ne[0], t->ne[1]) + 63) / 64 * 64;
    packed_.reset(static_cast<uint8_t*>(::operator new(total, std::align_val_t{kPackAlign})));
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    ::madvise(packed_.get(), total, MADV_HUGEPAGE);
#endif
    // Tensors are packed in order, each split by row groups over the machine's threads (first
    // touches of the new memory are page faults; doing them in parallel roughly halves the time).
    const int n_threads = static_cast<int>(std::clamp(std::thread::hardware_concurrency(), 1u, 8u));
    // Gives the file's pages in [p, p + n) back (whole pages only): nothing reads the file layout
    // of a packed tensor again.
    auto release_pages = [this](const void* p, size_t n) {
#if !defined(_WIN32)
        if (!file_.is_mmapped()) return;
        const auto page = static_cast<uintptr_t>(4096);
        const uintptr_t a = (reinterpret_cast<uintptr_t>(p) + page - 1) / page * page;
        const uintptr_t b = (reinterpret_cast<uintptr_t>(p) + n) / page * page;
        // Replaced by an inaccessible anonymous reservation rather than madvise(MADV_DONTNEED):
        // file pages the kernel maps in large folios came back with DONTNEED, this drops
        // them for certain (and turns any stray read of the old layout into a fault).
        if (b > a) ::mmap(reinterpret_cast<void*>(a), b - a, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
#else
        (void)p;
        (void)n;
#endif
    };
    std::vector<std::pair<uintptr_t, uintptr_t>> released;
    size_t off = 0;
    for (Tensor* t : todo) {
        uint8_t* dst = packed_.get() + off;
        const auto* src = static_cast<const uint8_t*>(t->data);
        const int64_t groups = t->ne[1] / kPackRows;
        const size_t group_out = packed_size(t->type, t->ne[0], kPackRows);
        auto pack_part = [&](int i) {
            const int64_t g0 = groups * i / n_threads, g1 = groups * (i + 1) / n_threads;
            if (g1 > g0) {
                pack_rows(t->type, src + static_cast<size_t>(g0 * kPackRows) * t->nb[1], t->nb[1], dst + static_cast<size_t>(g0) * group_out,
                          t->ne[0], (g1 - g0) * kPackRows);
            }
        };
        std::vector<std::thread> workers;
        for (int i = 1; i < n_threads; ++i) workers.emplace_back(pack_part, i);
        pack_part(0);
        for (auto& w : workers) w.join();
        const size_t n = t->nbytes();
        release_pages(src, n);
        released.emplace_back(reinterpret_cast<uintptr_t>(src), reinterpret_cast<uintptr_t>(src) + n);
        t->data = dst;
        t->layout = Layout::Packed16;
        off += (n + 63) / 64 * 64;
        packed_done += n;
        if (params.progress && !params.progress(static_cast<float>(packed_done) / static_cast<float>(all_bytes))) {
            throw std::runtime_error(path() + ": loading cancelled");
        }
    }
    packed_bytes_ = off;
    // Again over the merged ranges: pages shared by two neighbouring packed tensors, and pages
    // that fault-around mapped back in while later tensors were read, go too.
    std::sort(released.begin(), released.end());
    for (size_t i = 0; i < released.size();) {
        uintptr_t a = released[i].first, b = released[i].second;
        for (++i; i < released.size() && released[i].first <= b + 64; ++i) b = std::max(b, released[i].second);
        release_pages(reinterpret_cast<const void*>(a), b - a);
    }
#if !defined(_WIN32)
    if (params.use_mlock && ::mlock(packed_.get(), off) != 0) {
        std::fprintf(stderr, "kiln: warning: mlock of the repacked weights failed (raise RLIMIT_MEMLOCK?); continuing unlocked\n");
    }
#endif
}

const Tokenizer& Model::tokenizer() const {
    if (!tokenizer_) throw std::runtime_error(path() + ": the model has no tokenizer (no tokenizer.ggml.model key)");
    return *tokenizer_;
}

std::string Model::description() const {
    std::string d = hp_.arch;
    if (auto label = file_.get_string("general.size_label")) d += " " + *label;
    else d += " " + std::to_string(n_params_ / 1000000) + "M";
    if (auto ft = file_.get_u64("general.file_type")) d += " (file type " + std::to_string(*ft) + ")";
    return d;
}

}  // namespace kiln
