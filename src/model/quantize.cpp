#include "model/quantize.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cctype>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <stdexcept>
#include <thread>

#include "core/quant.h"
#include "model/gguf.h"
#include "model/imatrix.h"

namespace kiln {
namespace {

struct FileTypeInfo {
    FileType ft;
    std::string_view name;
    Type base;
};

constexpr std::array kFileTypes = {
    FileTypeInfo{FileType::F32, "F32", Type::F32},         FileTypeInfo{FileType::F16, "F16", Type::F16},
    FileTypeInfo{FileType::BF16, "BF16", Type::BF16},      FileTypeInfo{FileType::Q8_0, "Q8_0", Type::Q8_0},
    FileTypeInfo{FileType::Q5_1, "Q5_1", Type::Q5_1},      FileTypeInfo{FileType::Q5_0, "Q5_0", Type::Q5_0},
    FileTypeInfo{FileType::Q4_1, "Q4_1", Type::Q4_1},      FileTypeInfo{FileType::Q4_0, "Q4_0", Type::Q4_0},
    FileTypeInfo{FileType::IQ4_NL, "IQ4_NL", Type::IQ4_NL}, FileTypeInfo{FileType::Q6_K, "Q6_K", Type::Q6_K},
    FileTypeInfo{FileType::Q5_K_M, "Q5_K_M", Type::Q5_K}, FileTypeInfo{FileType::Q5_K_S, "Q5_K_S", Type::Q5_K},
    FileTypeInfo{FileType::Q4_K_M, "Q4_K_M", Type::Q4_K}, FileTypeInfo{FileType::Q4_K_S, "Q4_K_S", Type::Q4_K},
    FileTypeInfo{FileType::Q3_K_L, "Q3_K_L", Type::Q3_K}, FileTypeInfo{FileType::Q3_K_M, "Q3_K_M", Type::Q3_K},
    FileTypeInfo{FileType::Q3_K_S, "Q3_K_S", Type::Q3_K}, FileTypeInfo{FileType::Q2_K, "Q2_K", Type::Q2_K},
};

const FileTypeInfo& info(FileType ft) {
    for (const FileTypeInfo& i : kFileTypes)
        if (i.ft == ft) return i;
    throw std::invalid_argument("unknown file type " + std::to_string(static_cast<uint32_t>(ft)));
}

// Broad tensor roles the mix rules key on (substring matches, as llama.cpp does, so
// expert tensors such as ffn_down_exps count as ffn_down).
enum class Category { TokenEmbd, Output, AttnV, AttnK, AttnQ, AttnOutput, FfnUp, FfnGate, FfnDown, Other };

bool contains(const std::string& s, std::string_view part) { return s.find(part) != std::string::npos; }

Category category_of(const std::string& name) {
    if (name == "output.weight") return Category::Output;
    if (name == "token_embd.weight" || name == "per_layer_token_embd.weight") return Category::TokenEmbd;
    // attn_qkv and attn_kv_b are treated like attn_v (they hold V).
    if (contains(name, "attn_qkv.weight") || contains(name, "attn_kv_b.weight") || contains(name, "attn_v.weight"))
        return Category::AttnV;
    if (contains(name, "attn_k.weight")) return Category::AttnK;
    if (contains(name, "attn_q.weight")) return Category::AttnQ;
    if (contains(name, "attn_output.weight")) return Category::AttnOutput;
    if (contains(name, "ffn_up")) return Category::FfnUp;
    if (contains(name, "ffn_gate")) return Category::FfnGate;
    if (contains(name, "ffn_down")) return Category::FfnDown;
    return Category::Other;
}

// Dimensions without trailing ones (a [640, 1] tensor is 1-D).
int n_dims(const std::vector<int64_t>& shape) {
    int n = static_cast<int>(shape.size());
    while (n > 1 && shape[static_cast<size_t>(n) - 1] == 1) --n;
    return n;
}

// Whether a tensor is a weight matrix to quantize at all.
bool allows_quantization(const std::string& name, const std::vector<int64_t>& shape, const QuantizeParams& p) {
    if (n_dims(shape) < 2) return false;
    if (name.size() < 6 || name.compare(name.size() - 6, 6, "weight") != 0) return false;
    if (contains(name, "_norm.weight")) return false;
    if (p.leave_output_tensor && name == "output.weight") return false;
    // Router inputs, tiny per-layer helpers, positional tables and convolution kernels stay as they are.
    for (std::string_view keep : {"ffn_gate_inp.weight", "altup", "laurel", "per_layer_model_proj", "ssm_conv1d",
                                  "shortconv.conv.weight", "time_mix_", "attn_rel_b.weight", ".position_embd",
                                  ".patch_embd", ".rel_pos"}) {
        if (contains(name, keep)) return false;
    }
    return name != "position_embd.weight" && name != "token_types.weight";
}

bool is_quantized(Type t) { return traits(t).is_quantized; }

// Type for rows that the wanted type's block does not divide.
Type fallback_type(Type t, int64_t ncols) {
    Type r;
    switch (t) {
        case Type::Q2_K: case Type::Q3_K: r = Type::Q4_0; break;
        case Type::Q4_K: r = Type::Q5_0; break;
        case Type::Q5_K: r = Type::Q5_1; break;
        case Type::Q6_K: r = Type::Q8_0; break;
        case Type::IQ4_XS: r = Type::IQ4_NL; break;
        default: r = Type::F16; break;
    }
    if (ncols % traits(r).block_size != 0) r = Type::F16;
    return r;
}

// The model facts the mix rules use.
struct MixState {
    FileType ft;
    std::string arch;
    bool has_imatrix = false;
    bool tied_embeddings = true;  // no output.weight: token_embd is also the output matrix
    int64_t n_gqa = 1;
    int64_t n_expert = 0;
    bool is_70b = false;          // llama 70B: 8 heads share attn_v, which gets more bits
    int n_layer = 0;
    int n_attn_v = 0;
    int i_attn_v = 0;
    int i_ffn_down = 0;
    int i_ffn_gate = 0;
    int i_ffn_up = 0;
};

// More bits for the first and last eighth of the layers and every third in between.
bool use_more_bits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

// The layer a per-layer rule looks at: the running count of such tensors, or for MoE models
// (whose expert tensors need not come in layer order) the number in the name.
int layer_of(const MixState& s, int counter, const std::string& name) {
    if (s.n_expert <= 1) return counter;
    int il = -1;
    if (std::sscanf(name.c_str(), "blk.%d.", &il) != 1 || il < 0 || il >= s.n_layer)
        throw std::runtime_error("cannot tell the layer of tensor '" + name + "'");
    return il;
}

// llama.cpp's per-tensor rules of the named mixes, for the mixes kiln writes.
Type mix_type(MixState& s, Type t, Category cat, const std::string& name, int64_t ncols) {
    const FileType ft = s.ft;
    const bool falcon = s.arch == "falcon";
    if (cat == Category::Output || (s.tied_embeddings && cat == Category::TokenEmbd)) {
        if (falcon || ncols % traits(t).block_size != 0) return Type::Q8_0;
        return t == Type::Q8_0 ? t : Type::Q6_K;
    }
    switch (cat) {
        case Category::AttnV: {
            if (ft == FileType::Q2_K) t = s.n_gqa >= 4 ? Type::Q4_K : Type::Q3_K;
            else if (ft == FileType::Q3_K_M) t = s.i_attn_v < 2 ? Type::Q5_K : Type::Q4_K;
            else if (ft == FileType::Q3_K_L) t = Type::Q5_K;
            else if (ft == FileType::IQ4_NL && s.n_gqa >= 4) t = Type::Q5_K;
            else if ((ft == FileType::Q4_K_M || ft == FileType::Q5_K_M) && use_more_bits(s.i_attn_v, s.n_attn_v)) t = Type::Q6_K;
            else if (ft == FileType::Q4_K_S && s.i_attn_v < 4) t = Type::Q5_K;
            if (s.is_70b && (t == Type::Q3_K || t == Type::Q4_K)) t = Type::Q5_K;
            if (s.n_expert == 8) t = Type::Q8_0;
            ++s.i_attn_v;
            return t;
        }
        case Category::AttnK:
            return s.n_expert == 8 ? Type::Q8_0 : t;
        case Category::FfnDown: {
            const int il = layer_of(s, s.i_ffn_down, name), n = s.n_layer;
            ++s.i_ffn_down;
            if (ft == FileType::Q2_K) return Type::Q3_K;
            if (ft == FileType::Q3_K_M)
                return il < n / 16 ? Type::Q5_K : (!falcon || use_more_bits(il, n)) ? Type::Q4_K : Type::Q3_K;
            if (ft == FileType::Q3_K_L) return falcon ? Type::Q4_K : Type::Q5_K;
            if (ft == FileType::Q4_K_M) {
                if (falcon) return il < n / 16 ? Type::Q6_K : use_more_bits(il, n) ? Type::Q5_K : Type::Q4_K;
                return use_more_bits(il, n) ? Type::Q6_K : t;
            }
            if (il < n / 8 && ft == FileType::IQ4_NL && !s.has_imatrix) return Type::Q5_K;
            if (ft == FileType::Q5_K_M && use_more_bits(il, n)) return Type::Q6_K;
            if (ft == FileType::Q4_K_S && !falcon && il < n / 8) return Type::Q5_K;
            // With an imatrix the first ffn_down layers of Q4_0/Q5_0 go to the _1 variants
            // (llama.cpp guards against outliers there).
            if ((ft == FileType::Q4_0 || ft == FileType::Q5_0) && s.has_imatrix && il < n / 8)
                return ft == FileType::Q4_0 ? Type::Q4_1 : Type::Q5_1;
            return t;
        }
        case Category::AttnOutput:
            if (!falcon) {
                if (s.n_expert == 8) {
                    if (ft == FileType::Q2_K || ft == FileType::Q3_K_S || ft == FileType::Q3_K_M || ft == FileType::IQ4_NL ||
                        ft == FileType::Q4_K_S || ft == FileType::Q4_K_M)
                        return Type::Q5_K;
                    return t;
                }
                if (ft == FileType::Q2_K) return Type::Q3_K;
                if (ft == FileType::Q3_K_M) return Type::Q4_K;
                if (ft == FileType::Q3_K_L) return Type::Q5_K;
            } else if (ft == FileType::Q3_K_L) {
                return Type::Q4_K;
            }
            return t;
        case Category::FfnGate: ++s.i_ffn_gate; return t;
        case Category::FfnUp: ++s.i_ffn_up; return t;
        default: return t;
    }
}

// llama.cpp's tensor order (by layer number, then name): the per-layer counters follow it.
int layer_number(const std::string& name) {
    int il = -1;
    if (std::sscanf(name.c_str(), "blk.%d.", &il) != 1) return -1;
    return il;
}

std::string shape_str(const std::vector<int64_t>& shape) {
    std::string s = "[";
    for (size_t i = 0; i < 4; ++i) {
        char buf[32];
        std::snprintf(buf, sizeof buf, "%s%6" PRId64, i ? ", " : "", i < shape.size() ? shape[i] : int64_t{1});
        s += buf;
    }
    return s + "]";
}

double mib(uint64_t b) { return static_cast<double>(b) / (1024.0 * 1024.0); }

// Runs fn(r0, r1) over [0, n) split into contiguous ranges, one per thread; rethrows the first error.
template <typename F>
void parallel_rows(int64_t n, int n_threads, F&& fn) {
    const int nt = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(n_threads, n)));
    if (nt == 1) {
        fn(int64_t{0}, n);
        return;
    }
    std::vector<std::exception_ptr> errors(static_cast<size_t>(nt));
    std::vector<std::thread> threads;
    for (int t = 0; t < nt; ++t) {
        const int64_t r0 = n * t / nt, r1 = n * (t + 1) / nt;
        threads.emplace_back([&, t, r0, r1] {
            try {
                fn(r0, r1);
            } catch (...) {
                errors[static_cast<size_t>(t)] = std::current_exception();
            }
        });
    }
    for (auto& th : threads) th.join();
    for (auto& e : errors)
        if (e) std::rethrow_exception(e);
}

struct Cancelled : std::runtime_error {
    using std::runtime_error::runtime_error;
};

}  // namespace

std::optional<FileType> file_type_from_name(std::string_view name) {
    for (const FileTypeInfo& i : kFileTypes) {
        if (i.name.size() != name.size()) continue;
        bool eq = true;
        for (size_t k = 0; k < name.size() && eq; ++k)
            eq = std::toupper(static_cast<unsigned char>(name[k])) == static_cast<unsigned char>(i.name[k]);
        if (eq) return i.ft;
    }
    return std::nullopt;
}

std::string_view file_type_name(FileType ft) { return info(ft).name; }
Type file_type_default(FileType ft) { return info(ft).base; }

std::vector<std::string_view> file_type_names() {
    std::vector<std::string_view> out;
    for (const FileTypeInfo& i : kFileTypes) out.push_back(i.name);
    return out;
}

std::vector<TensorPlan> plan_quantization(const gguf::File& in, const QuantizeParams& p, bool has_imatrix) {
    MixState s;
    s.ft = p.ftype;
    s.has_imatrix = has_imatrix;
    s.arch = in.get_string("general.architecture").value_or("");
    const auto key = [&](const char* k) { return s.arch + "." + k; };
    s.n_layer = static_cast<int>(in.get_u64(key("block_count")).value_or(0));
    const int64_t n_head = static_cast<int64_t>(in.get_u64(key("attention.head_count")).value_or(1));
    const int64_t n_head_kv = static_cast<int64_t>(in.get_u64(key("attention.head_count_kv")).value_or(static_cast<uint64_t>(n_head)));
    s.n_gqa = n_head_kv > 0 ? n_head / n_head_kv : 1;
    s.n_expert = static_cast<int64_t>(in.get_u64(key("expert_count")).value_or(0));
    s.is_70b = s.arch == "llama" && s.n_layer == 80 && n_head != n_head_kv;

    const auto& tensors = in.tensors();
    std::vector<size_t> order(tensors.size());
    for (size_t i = 0; i < order.size(); ++i) {
        order[i] = i;
        const Category c = category_of(tensors[i].name);
        if (c == Category::AttnV) ++s.n_attn_v;
        if (c == Category::Output) s.tied_embeddings = false;
    }
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
        const int la = layer_number(tensors[a].name), lb = layer_number(tensors[b].name);
        if (la != lb) return la < lb;
        return tensors[a].name < tensors[b].name;
    });

    const Type base = file_type_default(p.ftype);
    std::vector<TensorPlan> plan(tensors.size());
    for (size_t i : order) {
        const gguf::TensorInfo& t = tensors[i];
        TensorPlan& tp = plan[i];
        tp.name = t.name;
        tp.shape = t.shape;
        tp.from = t.type;
        tp.to = t.type;
        tp.wanted = t.type;
        if (!allows_quantization(t.name, t.shape, p)) continue;
        const Category cat = category_of(t.name);
        const int64_t ncols = t.shape[0];
        Type to = base;
        if (p.token_embedding_type && cat == Category::TokenEmbd) {
            to = *p.token_embedding_type;
        } else if (p.output_tensor_type && cat == Category::Output) {
            to = *p.output_tensor_type;
        } else if (is_quantized(base) && !p.pure) {
            if (p.output_tensor_type && s.tied_embeddings && cat == Category::TokenEmbd) {
                to = *p.output_tensor_type;  // the tied embedding is the output matrix
            } else {
                to = mix_type(s, base, cat, t.name, ncols);
            }
        }
        tp.wanted = to;
        if (ncols % traits(to).block_size != 0) {
            to = fallback_type(to, ncols);
            tp.fallback = true;
        }
        tp.to = to;
    }
    return plan;
}

QuantizeResult quantize_model(const std::string& in_path, const std::string& out_path, const QuantizeParams& p) {
    const auto t0 = std::chrono::steady_clock::now();
    auto log = [&p](const std::string& line) {
        if (p.log) p.log(line);
    };
    const gguf::File in = gguf::File::open(in_path);

    Imatrix im;
    const bool has_imatrix = !p.imatrix_path.empty();
    if (has_imatrix) {
        im = Imatrix::load(p.imatrix_path);
        for (const auto& [name, e] : im.entries) {
            for (double v : e.sum2)
                if (!std::isfinite(v)) throw std::runtime_error(p.imatrix_path + ": imatrix entry '" + name + "' holds a non-finite value");
        }
        std::string ds = im.datasets.empty() ? "unknown" : im.datasets.back();
        log("loaded imatrix with " + std::to_string(im.entries.size()) + " entries from " + p.imatrix_path + " (dataset " + ds + ", " +
            std::to_string(im.chunk_count) + " chunks)");
    }

    const std::vector<TensorPlan> plan = plan_quantization(in, p, has_imatrix);
    const auto& tensors = in.tensors();
    QuantizeResult res;
    res.n_tensors = static_cast<int>(tensors.size());
    for (size_t i = 0; i < plan.size(); ++i) {
        const TensorPlan& tp = plan[i];
        res.bytes_in += tensors[i].n_bytes;
        res.n_elements += static_cast<uint64_t>(tensors[i].n_elements());
        const int64_t nrows = tensors[i].n_elements() / tp.shape[0];
        res.bytes_out += static_cast<uint64_t>(nrows) * row_size(tp.to, tp.shape[0]);
        if (tp.fallback) ++res.n_fallback;
        if (tp.to == tp.from) continue;
        ++res.n_converted;
        if (is_quantized(tp.from) && !p.allow_requantize)
            throw std::runtime_error(in_path + ": tensor '" + tp.name + "' is " + std::string(type_name(tp.from)) +
                                     "; requantizing is disabled (use --allow-requantize)");
        if (!has_reference(tp.to)) throw std::runtime_error("tensor '" + tp.name + "': kiln cannot quantize to " + std::string(type_name(tp.to)));
        if (tp.from != Type::F32 && !has_reference(tp.from))
            throw std::runtime_error(in_path + ": tensor '" + tp.name + "': kiln cannot dequantize " + std::string(type_name(tp.from)));
    }

    const int n_threads = p.n_threads > 0 ? p.n_threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    const size_t n = tensors.size();
    auto line_head = [&](size_t i) {
        char buf[256];
        std::snprintf(buf, sizeof buf, "[%4zu/%4zu] %-36s - %s, type = %6s, ", i + 1, n, tensors[i].name.c_str(),
                      shape_str(tensors[i].shape).c_str(), std::string(type_name(tensors[i].type)).c_str());
        return std::string(buf);
    };
    auto size_tail = [&](size_t i) {
        const TensorPlan& tp = plan[i];
        char buf[256];
        const int64_t nrows = tensors[i].n_elements() / tp.shape[0];
        const uint64_t out_bytes = static_cast<uint64_t>(nrows) * row_size(tp.to, tp.shape[0]);
        if (tp.to == tp.from) {
            std::snprintf(buf, sizeof buf, "size = %8.3f MiB", mib(out_bytes));
        } else {
            std::string fb;
            if (tp.fallback)
                fb = " (fallback: " + std::to_string(tp.shape[0]) + " columns do not fit " + std::string(type_name(tp.wanted)) + " blocks)";
            std::snprintf(buf, sizeof buf, "converting to %s%s .. size = %8.2f MiB -> %8.2f MiB", std::string(type_name(tp.to)).c_str(),
                          fb.c_str(), mib(tensors[i].n_bytes), mib(out_bytes));
        }
        return std::string(buf);
    };

    auto finish = [&] {
        res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        char buf[512];
        const double ne = res.n_elements ? static_cast<double>(res.n_elements) : 1.0;
        std::snprintf(buf, sizeof buf, "model size  = %8.2f MiB (%.2f BPW)", mib(res.bytes_in), static_cast<double>(res.bytes_in) * 8.0 / ne);
        log(buf);
        std::snprintf(buf, sizeof buf, "quant size  = %8.2f MiB (%.2f BPW), ratio %.3f", mib(res.bytes_out),
                      static_cast<double>(res.bytes_out) * 8.0 / ne, static_cast<double>(res.bytes_out) / static_cast<double>(std::max<uint64_t>(1, res.bytes_in)));
        log(buf);
        if (res.n_fallback > 0)
            log("warning: " + std::to_string(res.n_fallback) + " of " + std::to_string(res.n_tensors) + " tensor(s) required fallback quantization");
        std::snprintf(buf, sizeof buf, "%s %d tensors (%d converted) in %.2f s", p.dry_run ? "planned" : "quantized", res.n_tensors,
                      res.n_converted, res.seconds);
        log(buf);
    };

    if (p.dry_run) {
        for (size_t i = 0; i < n; ++i) log(line_head(i) + size_tail(i));
        finish();
        return res;
    }

    gguf::Writer w;
    for (const gguf::KeyValue& kv : in.metadata()) {
        if (kv.key.rfind("split.", 0) == 0) continue;  // the output is one file
        w.set(kv.key, kv.value);
    }
    w.set("general.quantization_version", gguf::Value::u32(2));
    w.set("general.file_type", gguf::Value::u32(static_cast<uint32_t>(p.ftype)));

    for (size_t i = 0; i < n; ++i) {
        const gguf::TensorInfo& ti = tensors[i];
        const TensorPlan& tp = plan[i];
        std::vector<float> importance;
        if (has_imatrix && tp.to != tp.from && is_quantized(tp.to)) {
            importance = im.importance(ti.name);
            const int64_t n_mat = ti.n_elements() / (ti.shape[0] * (ti.shape.size() > 1 ? ti.shape[1] : 1));
            if (importance.empty()) {
                log("note: no imatrix entry for " + ti.name);
            } else if (static_cast<int64_t>(importance.size()) != ti.shape[0] * n_mat) {
                // Embedding tables are never multiplied as matrices, so llama.cpp ignores a mismatch there.
                if (category_of(ti.name) != Category::TokenEmbd)
                    throw std::runtime_error(p.imatrix_path + ": imatrix entry for '" + ti.name + "' has " + std::to_string(importance.size()) +
                                             " values, the tensor needs " + std::to_string(ti.shape[0] * n_mat));
                importance.clear();
            }
        }
        w.add_tensor(ti.name, tp.to, ti.shape, [&, i, importance = std::move(importance)](std::span<uint8_t> out) {
            if (p.progress && !p.progress(static_cast<float>(i) / static_cast<float>(n))) throw Cancelled("cancelled");
            const auto src = in.tensor_data(ti);
            if (tp.to == tp.from) {
                std::memcpy(out.data(), src.data(), src.size());
                log(line_head(i) + size_tail(i));
                return;
            }
            const int64_t ncols = ti.shape[0];
            const int64_t nrows = ti.n_elements() / ncols;
            // F32 input is used in place (GGUF data is aligned); anything else is converted first.
            std::vector<float> f32;
            const float* x = reinterpret_cast<const float*>(src.data());
            if (tp.from != Type::F32) {
                f32.resize(static_cast<size_t>(ti.n_elements()));
                const size_t in_row = row_size(tp.from, ncols);
                parallel_rows(nrows, n_threads, [&](int64_t r0, int64_t r1) {
                    for (int64_t r = r0; r < r1; ++r)
                        dequantize_row(tp.from, src.data() + static_cast<size_t>(r) * in_row, f32.data() + r * ncols, ncols);
                });
                x = f32.data();
            }
            // Each matrix of a 3-D (expert) tensor has its own importance row.
            const int64_t rows_per_mat = ti.shape.size() > 1 ? ti.shape[1] : 1;
            const size_t out_row = row_size(tp.to, ncols);
            parallel_rows(nrows, n_threads, [&](int64_t r0, int64_t r1) {
                // Quantize in runs that stay within one matrix.
                for (int64_t r = r0; r < r1;) {
                    const int64_t mat = r / rows_per_mat;
                    const int64_t end = std::min(r1, (mat + 1) * rows_per_mat);
                    const float* imp = importance.empty() ? nullptr : importance.data() + mat * ncols;
                    quantize(tp.to, x + r * ncols, out.data() + static_cast<size_t>(r) * out_row, end - r, ncols, imp);
                    r = end;
                }
            });
            log(line_head(i) + size_tail(i));
        });
    }
    try {
        w.write(out_path);
    } catch (const Cancelled&) {
        throw std::runtime_error(out_path + ": cancelled; nothing was written");
    }
    if (p.progress) p.progress(1.0f);
    finish();
    return res;
}

}  // namespace kiln
