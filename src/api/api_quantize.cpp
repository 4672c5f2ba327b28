// C API: model quantization and importance-matrix collection.
#include <string>

#include "api/api_internal.h"
#include "core/tensor.h"
#include "model/imatrix.h"
#include "model/quantize.h"

using kiln::api::guarded;

struct kiln_imatrix {
    kiln_context* ctx = nullptr;
    kiln::Imatrix im;
};

namespace {

std::optional<kiln::Type> type_param(int32_t id, const char* what) {
    if (id < 0) return std::nullopt;
    const auto tr = kiln::type_traits(static_cast<uint32_t>(id));
    if (!tr) throw std::invalid_argument(std::string(what) + ": unknown type id " + std::to_string(id));
    return tr->type;
}

}  // namespace

extern "C" {

kiln_quantize_params kiln_quantize_default_params(void) {
    kiln_quantize_params p{};
    p.ftype = "Q8_0";
    p.output_tensor_type = -1;
    p.token_embedding_type = -1;
    return p;
}

const char* kiln_quantize_ftype_name(int32_t i) {
    static const std::vector<std::string_view> names = kiln::file_type_names();  // immutable after init
    if (i < 0 || static_cast<size_t>(i) >= names.size()) return nullptr;
    return names[static_cast<size_t>(i)].data();  // the table's literals are NUL-terminated
}

int32_t kiln_model_quantize(const char* in_path, const char* out_path, const kiln_quantize_params* params,
                            kiln_quantize_result* result) {
    return guarded(
        [&]() -> int32_t {
            if (!in_path || !out_path || !params || !params->ftype) throw std::invalid_argument("kiln_model_quantize: null argument");
            const auto ft = kiln::file_type_from_name(params->ftype);
            if (!ft) throw std::invalid_argument(std::string("unknown quantization type '") + params->ftype + "'");
            kiln::QuantizeParams p{
                .ftype = *ft,
                .n_threads = params->n_threads,
                .output_tensor_type = type_param(params->output_tensor_type, "output tensor type"),
                .token_embedding_type = type_param(params->token_embedding_type, "token embedding type"),
                .allow_requantize = params->allow_requantize,
                .leave_output_tensor = params->leave_output_tensor,
                .pure = params->pure,
                .dry_run = params->dry_run,
                .imatrix_path = params->imatrix_file ? params->imatrix_file : "",
                .log = nullptr,
                .progress = nullptr,
            };
            if (params->log) {
                p.log = [cb = params->log, ud = params->user_data](const std::string& line) { cb(line.c_str(), ud); };
            }
            if (params->progress) {
                p.progress = [cb = params->progress, ud = params->user_data](float f) { return cb(f, ud); };
            }
            const kiln::QuantizeResult r = kiln::quantize_model(in_path, out_path, p);
            if (result) {
                *result = kiln_quantize_result{
                    .bytes_in = r.bytes_in,
                    .bytes_out = r.bytes_out,
                    .n_elements = r.n_elements,
                    .n_tensors = r.n_tensors,
                    .n_converted = r.n_converted,
                    .n_fallback = r.n_fallback,
                    .seconds = r.seconds,
                };
            }
            return 0;
        },
        int32_t{-1});
}

kiln_imatrix* kiln_imatrix_new(kiln_context* ctx, bool process_output) {
    return guarded(
        [&]() -> kiln_imatrix* {
            if (!ctx) throw std::invalid_argument("kiln_imatrix_new: null context");
            auto im = std::make_unique<kiln_imatrix>();
            im->ctx = ctx;
            kiln::Imatrix* data = &im->im;
            ctx->ctx->set_observer(kiln::Scheduler::Observer{
                .wants =
                    [process_output](const kiln::Tensor& n) {
                        if (n.op != kiln::Op::MulMat || !n.src[0] || !n.src[1]) return false;
                        const std::string& w = n.src[0]->name;
                        // As llama.cpp: the layers' weights (and the output matrix on request), batches of 16+ rows.
                        if (!(w.rfind("blk.", 0) == 0 || (process_output && w == "output.weight"))) return false;
                        return n.src[1]->ne[1] >= 16 && n.src[1]->type == kiln::Type::F32;
                    },
                .observe = [data](const kiln::Tensor& n) { data->accumulate(n); },
            });
            return im.release();
        },
        static_cast<kiln_imatrix*>(nullptr));
}

void kiln_imatrix_free(kiln_imatrix* im) {
    if (!im) return;
    if (im->ctx && im->ctx->ctx) im->ctx->ctx->set_observer({});
    delete im;
}

int32_t kiln_imatrix_n_entries(const kiln_imatrix* im) { return im ? static_cast<int32_t>(im->im.entries.size()) : 0; }

int32_t kiln_imatrix_save(const kiln_imatrix* im, const char* path, const char* dataset, int32_t chunk_count, int32_t chunk_size,
                          bool legacy) {
    return guarded(
        [&]() -> int32_t {
            if (!im || !path) throw std::invalid_argument("kiln_imatrix_save: null argument");
            kiln::Imatrix copy = im->im;
            copy.datasets.clear();
            if (dataset) copy.datasets.emplace_back(dataset);
            copy.chunk_count = static_cast<uint32_t>(std::max(0, chunk_count));
            copy.chunk_size = static_cast<uint32_t>(std::max(0, chunk_size));
            if (legacy) {
                copy.save_legacy(path);
            } else {
                copy.save_gguf(path);
            }
            return 0;
        },
        int32_t{-1});
}

}  // extern "C"
