// Importance matrices: per weight matrix, the mean of squared activations per
// input column, gathered by running a model on calibration text
// (kiln-imatrix) and used by the quantizers to weight their errors
// (kiln-quantize --imatrix).
//
// Two file formats, as llama.cpp's tools read them:
//  - GGUF (current llama.cpp): general.type = "imatrix", imatrix.datasets
//    (string array), imatrix.chunk_count, imatrix.chunk_size (u32), and per
//    weight W the F32 tensors "W.in_sum2" [n_per_row, n_mat] (sums of squared
//    activations), "W.counts" [1, n_mat] (activation rows summed per matrix)
//    and optionally "W.in_sum" [n_per_row, n_mat] (sums of activations).
//  - legacy .dat: int32 n_entries; per entry int32 name length, name bytes,
//    int32 ncall, int32 nval, float[nval] (mean * ncall); then optionally
//    int32 last chunk, int32 dataset length, dataset bytes. Little-endian.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace kiln {

struct Tensor;

struct ImatrixEntry {
    int64_t n_per_row = 0;
    std::vector<double> sum2;    // [n_mat * n_per_row] sums of x^2
    std::vector<double> sum;     // [n_mat * n_per_row] sums of x (empty when read from .dat)
    std::vector<double> counts;  // [n_mat] activation rows summed

    int64_t n_mat() const { return static_cast<int64_t>(counts.size()); }
};

class Imatrix {
public:
    std::map<std::string, ImatrixEntry> entries;  // by weight name ("blk.0.attn_q.weight")
    std::vector<std::string> datasets;
    uint32_t chunk_count = 0;
    uint32_t chunk_size = 0;

    // Reads either format (GGUF by its magic, otherwise legacy .dat). Throws std::runtime_error
    // naming the file and what is wrong.
    static Imatrix load(const std::string& path);
    // Writes the GGUF format (atomically: temporary file, then rename).
    void save_gguf(const std::string& path) const;
    // Writes the legacy .dat format (means scaled by the chunk count, as llama.cpp does).
    void save_legacy(const std::string& path) const;

    // Mean squared activation per column of every matrix of `name` ([n_mat * n_per_row]), or
    // empty if the tensor has no entry. Matrices never seen get 1 (no preference).
    std::vector<float> importance(const std::string& name) const;

    // Adds the activations of a matrix product: node is a MulMat whose src[0] is the named weight
    // and src[1] holds F32 activation rows [ne0 = n_per_row, rows...] in host memory.
    void accumulate(const Tensor& node);
};

}  // namespace kiln
