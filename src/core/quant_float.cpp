// F16 and BF16 "quantization": plain rounding conversions (importance weights do not apply).
#include "core/float_convert.h"
#include "core/quant_ref.h"

namespace kiln::ref {

void quantize_row_f16(const float* x, fp16_t* y, int64_t n, const float*) {
    for (int64_t i = 0; i < n; ++i) y[i] = fp32_to_fp16(x[i]);
}
void dequantize_row_f16(const fp16_t* x, float* y, int64_t n) {
    for (int64_t i = 0; i < n; ++i) y[i] = fp16_to_fp32(x[i]);
}
void quantize_row_bf16(const float* x, bf16_t* y, int64_t n, const float*) {
    for (int64_t i = 0; i < n; ++i) y[i] = fp32_to_bf16(x[i]);
}
void dequantize_row_bf16(const bf16_t* x, float* y, int64_t n) {
    for (int64_t i = 0; i < n; ++i) y[i] = bf16_to_fp32(x[i]);
}

}  // namespace kiln::ref
