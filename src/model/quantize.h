// Model quantization (kiln-quantize): rewrites a GGUF model with its weight
// matrices in another type. Named mixes ("file types": Q4_K_M, Q3_K_S, ...)
// pick a type per tensor by the rules llama.cpp's llama-quant.cpp applies, so
// files match llama.cpp's in tensor types and size:
//  - 2-D+ tensors whose name ends in "weight" are quantized, except norms,
//    MoE router inputs (ffn_gate_inp) and a few small special tensors;
//    1-D tensors keep their type.
//  - output.weight (or token_embd.weight when the embeddings are tied) gets
//    Q6_K unless the mix's type is Q8_0 (Q8_0 if its rows do not fit Q6_K).
//  - K-quant mixes raise attn_v / ffn_down / attn_output by layer (see
//    quantize.cpp), Q4_0/Q5_0 with an imatrix raise the first ffn_down layers.
//  - a type whose block does not divide a tensor's rows falls back
//    (Q2_K/Q3_K -> Q4_0, Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0, else F16).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/types.h"

namespace kiln {

namespace gguf {
class File;
}

// llama.cpp's llama_ftype ids (written as general.file_type).
enum class FileType : uint32_t {
    F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q8_0 = 7, Q5_0 = 8, Q5_1 = 9, Q2_K = 10,
    Q3_K_S = 11, Q3_K_M = 12, Q3_K_L = 13, Q4_K_S = 14, Q4_K_M = 15, Q5_K_S = 16, Q5_K_M = 17,
    Q6_K = 18, IQ4_NL = 25, BF16 = 32,
};

// "Q4_K_M" -> FileType (case-insensitive); nullopt for a name kiln cannot write.
std::optional<FileType> file_type_from_name(std::string_view name);
std::string_view file_type_name(FileType ft);
// The mix's base tensor type (Q4_K for Q4_K_M, ...).
Type file_type_default(FileType ft);
// All names file_type_from_name accepts, in the order the help lists them.
std::vector<std::string_view> file_type_names();

struct QuantizeParams {
    FileType ftype = FileType::Q8_0;
    int n_threads = 0;                        // 0: hardware threads
    std::optional<Type> output_tensor_type;   // overrides the mix for output.weight
    std::optional<Type> token_embedding_type; // overrides the mix for token_embd.weight
    bool allow_requantize = false;            // accept quantized input tensors (dequantized first)
    bool leave_output_tensor = false;         // keep output.weight as it is
    bool pure = false;                        // every quantized tensor gets the mix's base type
    bool dry_run = false;                     // plan and report sizes, write nothing
    std::string imatrix_path;                 // importance matrix (GGUF or legacy .dat), "" for none
    std::function<void(const std::string& line)> log;  // progress and per-tensor lines (null: silent)
    std::function<bool(float progress)> progress;      // false cancels (nothing is left behind)
};

// The type chosen for one tensor.
struct TensorPlan {
    std::string name;
    std::vector<int64_t> shape;
    Type from = Type::F32;
    Type to = Type::F32;
    bool fallback = false;  // the mix's type did not fit the row length
    Type wanted = Type::F32;  // the mix's type before the fallback
};

// Chooses every tensor's type (no data is read). Throws std::runtime_error naming the file.
std::vector<TensorPlan> plan_quantization(const gguf::File& in, const QuantizeParams& params, bool has_imatrix);

struct QuantizeResult {
    uint64_t bytes_in = 0;   // tensor data of the input
    uint64_t bytes_out = 0;  // tensor data of the output
    uint64_t n_elements = 0;
    int n_tensors = 0;
    int n_converted = 0;     // tensors whose type changed
    int n_fallback = 0;
    double seconds = 0;
};

// Quantizes in_path into out_path (written to out_path + ".tmp", then renamed; nothing is left
// behind on failure or cancellation). Throws std::runtime_error naming the file and tensor.
QuantizeResult quantize_model(const std::string& in_path, const std::string& out_path, const QuantizeParams& params);

}  // namespace kiln
