// GGUF v2/v3 files: a validating reader (mmap by default, plain read as
// fallback) and a writer. Every reader failure is a kiln::gguf::Error whose
// message names the file, the byte offset and what is wrong.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "core/types.h"

namespace kiln::gguf {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" little-endian
constexpr uint32_t kDefaultAlignment = 32;
constexpr int kMaxDims = 4;

class Error : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

enum class ValueType : uint32_t {
    UINT8 = 0, INT8 = 1, UINT16 = 2, INT16 = 3, UINT32 = 4, INT32 = 5, FLOAT32 = 6,
    BOOL = 7, STRING = 8, ARRAY = 9, UINT64 = 10, INT64 = 11, FLOAT64 = 12,
};
std::string_view value_type_name(ValueType t);

struct Value;
// A homogeneous array; elem_type may itself be ARRAY (nested arrays).
struct Array {
    ValueType elem_type = ValueType::UINT8;
    std::vector<Value> items;
};

struct Value {
    ValueType type = ValueType::UINT8;
    std::variant<uint64_t, int64_t, double, bool, std::string, Array> v;  // integers widened, floats as double

    static Value u8(uint8_t x) { return {ValueType::UINT8, uint64_t{x}}; }
    static Value i8(int8_t x) { return {ValueType::INT8, int64_t{x}}; }
    static Value u16(uint16_t x) { return {ValueType::UINT16, uint64_t{x}}; }
    static Value i16(int16_t x) { return {ValueType::INT16, int64_t{x}}; }
    static Value u32(uint32_t x) { return {ValueType::UINT32, uint64_t{x}}; }
    static Value i32(int32_t x) { return {ValueType::INT32, int64_t{x}}; }
    static Value u64(uint64_t x) { return {ValueType::UINT64, x}; }
    static Value i64(int64_t x) { return {ValueType::INT64, x}; }
    static Value f32(float x) { return {ValueType::FLOAT32, double{x}}; }
    static Value f64(double x) { return {ValueType::FLOAT64, x}; }
    static Value boolean(bool x) { return {ValueType::BOOL, x}; }
    static Value str(std::string x) { return {ValueType::STRING, std::move(x)}; }
    static Value array(ValueType elem, std::vector<Value> items) { return {ValueType::ARRAY, Array{elem, std::move(items)}}; }

    bool is_integer() const;  // any of the 8 integer types
    bool is_float() const;    // FLOAT32 / FLOAT64
    // Checked conversions; throw Error naming `what` (usually the key) on a type mismatch or out-of-range value.
    uint64_t as_u64(std::string_view what) const;
    int64_t as_i64(std::string_view what) const;
    double as_f64(std::string_view what) const;
    bool as_bool(std::string_view what) const;
    const std::string& as_string(std::string_view what) const;
    const Array& as_array(std::string_view what) const;
    // Human-readable rendering; arrays longer than max_items are summarised.
    std::string to_string(size_t max_items = 8) const;
};

struct KeyValue {
    std::string key;
    Value value;
};

struct TensorInfo {
    std::string name;
    std::vector<int64_t> shape;  // ne[0] (contiguous, row length) first, as GGUF stores it
    Type type = Type::F32;
    uint64_t offset = 0;         // relative to the start of the data section
    uint64_t n_bytes = 0;        // computed from shape and type
    int64_t n_elements() const;
};

struct OpenOptions {
    bool use_mmap = true;   // false: read the whole file into memory
};

class File {
public:
    // Opens and validates a file. Throws Error.
    static File open(const std::string& path, OpenOptions opts = {});
    // Parses a file image already in memory (copied); `name` is used in error messages.
    static File from_memory(const void* data, size_t size, std::string name = "<memory>");

    File(File&&) noexcept;
    File& operator=(File&&) noexcept;
    ~File();

    const std::string& path() const;
    uint32_t version() const;
    uint32_t alignment() const;
    uint64_t data_offset() const;  // absolute offset of the data section
    uint64_t file_size() const;
    bool is_mmapped() const;

    const std::vector<KeyValue>& metadata() const;
    const Value* find(std::string_view key) const;  // null if absent
    // Typed lookups: the fallback if the key is absent; Error naming the key if the type does not fit.
    std::optional<std::string> get_string(std::string_view key) const;
    std::optional<uint64_t> get_u64(std::string_view key) const;
    std::optional<int64_t> get_i64(std::string_view key) const;
    std::optional<double> get_f64(std::string_view key) const;
    std::optional<bool> get_bool(std::string_view key) const;
    const Array* get_array(std::string_view key) const;

    const std::vector<TensorInfo>& tensors() const;
    const TensorInfo* find_tensor(std::string_view name) const;  // null if absent
    // The tensor's bytes inside the mapped/loaded file.
    std::span<const uint8_t> tensor_data(const TensorInfo& t) const;

private:
    struct Impl;
    explicit File(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_;
};

// Writes GGUF v3. Metadata keeps insertion order; setting a key twice replaces it.
class Writer {
public:
    void set(std::string key, Value value);
    void set_alignment(uint32_t alignment);  // also written as general.alignment
    // Adds a tensor; data must hold n_bytes of the (type, shape) and is copied.
    void add_tensor(std::string name, Type type, std::vector<int64_t> shape, std::span<const uint8_t> data);
    // Adds a tensor whose bytes are produced at write time (avoids holding large data twice).
    using Producer = std::function<void(std::span<uint8_t> out)>;
    void add_tensor(std::string name, Type type, std::vector<int64_t> shape, Producer producer);
    // Writes the file (to path + ".tmp", then renames). Throws Error.
    void write(const std::string& path) const;

private:
    struct PendingTensor {
        TensorInfo info;
        std::vector<uint8_t> data;
        Producer producer;
    };
    std::vector<KeyValue> kv_;
    std::vector<PendingTensor> tensors_;
    uint32_t alignment_ = kDefaultAlignment;
};

}  // namespace kiln::gguf
