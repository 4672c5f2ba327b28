// A loaded model: the GGUF file (memory-mapped by default), its
// hyper-parameters, its architecture, and the weight tensors, which point
// straight into the mapping.
#pragma once

#include <deque>
#include <functional>
#include <memory>
#include <string>

#include "model/arch.h"
#include "model/gguf.h"
#include "model/hparams.h"
#include "model/tokenizer/tokenizer.h"
#include "model/weights.h"

namespace kiln {

struct ModelParams {
    int n_gpu_layers = 0;    // layers to offload (no GPU backend yet: all layers run on the CPU)
    bool use_mmap = true;
    bool use_mlock = false;  // lock the weights in RAM
    // Repack matrix weights at load into the interleaved layouts of the CPU GEMM kernels
    // (lossless; only for types the selected instruction set accelerates). The packed copy
    // replaces the mapped pages, which are released, so the weights are not resident twice.
    bool repack = true;
    // Called with the fraction loaded (0..1); returning false cancels the load.
    std::function<bool(float)> progress;
};

class Model {
public:
    // Loads and validates a model. Throws std::runtime_error (or gguf::Error) naming the file and
    // what is wrong: not GGUF, truncated, unknown architecture, missing or mis-shaped tensor.
    static std::unique_ptr<Model> load(const std::string& path, const ModelParams& params = {});

    const std::string& path() const { return file_.path(); }
    const gguf::File& file() const { return file_; }
    const HParams& hparams() const { return hp_; }
    const Architecture& arch() const { return *arch_; }
    const ModelWeights& weights() const { return w_; }
    // The tokenizer from tokenizer.ggml.*; throws if the file has none.
    const Tokenizer& tokenizer() const;
    bool has_tokenizer() const { return tokenizer_ != nullptr; }
    size_t weights_bytes() const { return weights_bytes_; }
    int64_t n_params() const { return n_params_; }
    double load_ms() const { return load_ms_; }
    // Bytes of weights repacked at load (0 if none).
    size_t repacked_bytes() const { return packed_bytes_; }
    // A one-line description such as "gemma3 270M Q4_K - Medium".
    std::string description() const;

private:
    explicit Model(gguf::File f) : file_(std::move(f)) {}
    void repack_weights(const ModelParams& params);
    gguf::File file_;
    HParams hp_;
    const Architecture* arch_ = nullptr;
    ModelWeights w_;
    std::unique_ptr<Tokenizer> tokenizer_;
    std::deque<Tensor> tensors_;  // weight tensors (stable addresses)
    struct AlignedFree {
        void operator()(uint8_t* p) const;
    };
    std::unique_ptr<uint8_t, AlignedFree> packed_;  // repacked weights (ModelParams::repack)
    size_t packed_bytes_ = 0;
    size_t weights_bytes_ = 0;
    int64_t n_params_ = 0;
    double load_ms_ = 0;
};

}  // namespace kiln
