// The C API (include/kiln.h), part 1: version, errors, element types and
// quantization. The API layer converts exceptions into return codes and a
// per-thread error message.
#include <stdexcept>
#include <string>

#include "api/api_internal.h"
#include "core/quant.h"
#include "core/types.h"

namespace {
// Per-thread, so concurrent callers never see each other's messages.
thread_local std::string t_last_error;
}  // namespace

namespace kiln::api {
void set_last_error(std::string msg) { t_last_error = std::move(msg); }
void clear_last_error() { t_last_error.clear(); }
}  // namespace kiln::api

using kiln::api::guarded;

extern "C" {

const char* kiln_version(void) { return "0.1.0"; }

const char* kiln_last_error(void) { return t_last_error.c_str(); }

const char* kiln_type_name(int32_t type) {
    const auto tr = kiln::type_traits(static_cast<uint32_t>(type));
    return tr && type >= 0 ? tr->name.data() : nullptr;  // names are string literals: NUL-terminated
}

int32_t kiln_type_from_name(const char* name) {
    if (!name) return -1;
    const auto t = kiln::type_from_name(name);
    return t ? static_cast<int32_t>(*t) : -1;
}

int64_t kiln_type_block_size(int32_t type) {
    const auto tr = kiln::type_traits(static_cast<uint32_t>(type));
    return tr && type >= 0 ? tr->block_size : -1;
}

size_t kiln_type_size(int32_t type) {
    const auto tr = kiln::type_traits(static_cast<uint32_t>(type));
    return tr && type >= 0 ? tr->type_size : 0;
}

size_t kiln_row_size(int32_t type, int64_t n) {
    const auto tr = kiln::type_traits(static_cast<uint32_t>(type));
    if (!tr || type < 0 || n < 0 || n % tr->block_size != 0) return 0;
    return kiln::row_size(tr->type, n);
}

int kiln_type_has_reference(int32_t type) {
    const auto tr = kiln::type_traits(static_cast<uint32_t>(type));
    return tr && type >= 0 && kiln::has_reference(tr->type) ? 1 : 0;
}

size_t kiln_quantize(int32_t type, const float* src, void* dst, int64_t nrows, int64_t n_per_row,
                     const float* importance) {
    return guarded(
        [&]() -> size_t {
            const auto tr = kiln::type_traits(static_cast<uint32_t>(type));
            if (!tr || type < 0) throw std::invalid_argument("kiln_quantize: unknown type id " + std::to_string(type));
            if (!src || !dst || nrows < 0) throw std::invalid_argument("kiln_quantize: null buffer or negative row count");
            return kiln::quantize(tr->type, src, dst, nrows, n_per_row, importance);
        },
        size_t{0});
}

int kiln_dequantize(int32_t type, const void* src, float* dst, int64_t n) {
    return guarded(
        [&]() -> int {
            const auto tr = kiln::type_traits(static_cast<uint32_t>(type));
            if (!tr || type < 0) throw std::invalid_argument("kiln_dequantize: unknown type id " + std::to_string(type));
            if (!src || !dst) throw std::invalid_argument("kiln_dequantize: null buffer");
            kiln::dequantize_row(tr->type, src, dst, n);
            return 0;
        },
        -1);
}

}  // extern "C"
