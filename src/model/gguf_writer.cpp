// The GGUF writer: validates what it is given when it is given (so the error
// points at the caller's mistake, not at write time), then writes a v3 file
// to path + ".tmp" and renames it over path, so a crash or a failing
// producer never leaves a half-written model under the real name.
#include <algorithm>
#include <bit>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <system_error>
#include <utility>

#include "model/gguf.h"

namespace kiln::gguf {
namespace {

// Mirrors the reader's limit, so everything we write can be read back.
constexpr int kMaxArrayDepth = 8;
// llama.cpp (GGML_MAX_NAME = 64, including the terminating NUL) refuses
// longer tensor names; refusing them here keeps our files loadable there.
constexpr size_t kMaxTensorName = 63;

[[noreturn]] void fail(const std::string& what) { throw Error("gguf writer: " + what); }

bool is_power_of_two(uint64_t x) { return x != 0 && (x & (x - 1)) == 0; }

bool valid_value_type(ValueType t) { return static_cast<uint32_t>(t) <= static_cast<uint32_t>(ValueType::FLOAT64); }

// Integer payload of a value, accepting either variant alternative (a caller
// may build Value{UINT32, int64_t{5}} by hand), range-checked for its width.
struct IntRange {
    bool is_signed;
    int64_t min;
    uint64_t max;
};

std::optional<IntRange> int_range(ValueType t) {
    switch (t) {
        case ValueType::UINT8: return IntRange{false, 0, 0xFF};
        case ValueType::UINT16: return IntRange{false, 0, 0xFFFF};
        case ValueType::UINT32: return IntRange{false, 0, 0xFFFFFFFF};
        case ValueType::UINT64: return IntRange{false, 0, std::numeric_limits<uint64_t>::max()};
        case ValueType::INT8: return IntRange{true, -128, 127};
        case ValueType::INT16: return IntRange{true, -32768, 32767};
        case ValueType::INT32: return IntRange{true, std::numeric_limits<int32_t>::min(), 0x7FFFFFFF};
        case ValueType::INT64:
            return IntRange{true, std::numeric_limits<int64_t>::min(),
                            static_cast<uint64_t>(std::numeric_limits<int64_t>::max())};
        default: return std::nullopt;
    }
}

// Returns the value's bits as they go on disk (two's complement for signed).
uint64_t checked_int_bits(const Value& v, const IntRange& r, const std::string& what) {
    const std::string tn(value_type_name(v.type));
    if (const auto* u = std::get_if<uint64_t>(&v.v)) {
        if (*u > r.max) fail(what + ": value " + std::to_string(*u) + " does not fit " + tn);
        return *u;
    }
    if (const auto* i = std::get_if<int64_t>(&v.v)) {
        if (*i < r.min || (*i >= 0 && static_cast<uint64_t>(*i) > r.max))
            fail(what + ": value " + std::to_string(*i) + " does not fit " + tn);
        return static_cast<uint64_t>(*i);
    }
    fail(what + ": a " + tn + " value must hold an integer");
}

void check_value(const Value& v, const std::string& what, int depth) {
    if (!valid_value_type(v.type)) fail(what + ": value type id " + std::to_string(static_cast<uint32_t>(v.type)) + " is unknown");
    if (const auto r = int_range(v.type)) {
        checked_int_bits(v, *r, what);
        return;
    }
    const std::string tn(value_type_name(v.type));
    switch (v.type) {
        case ValueType::FLOAT32: case ValueType::FLOAT64:
            if (!std::holds_alternative<double>(v.v)) fail(what + ": a " + tn + " value must hold a double");
            return;
        case ValueType::BOOL:
            if (!std::holds_alternative<bool>(v.v)) fail(what + ": a bool value must hold a bool");
            return;
        case ValueType::STRING:
            if (!std::holds_alternative<std::string>(v.v)) fail(what + ": a string value must hold a string");
            return;
        case ValueType::ARRAY: {
            const auto* a = std::get_if<Array>(&v.v);
            if (!a) fail(what + ": an array value must hold an Array");
            if (depth >= kMaxArrayDepth) fail(what + ": arrays nested more than " + std::to_string(kMaxArrayDepth) + " deep");
            if (!valid_value_type(a->elem_type))
                fail(what + ": array element type id " + std::to_string(static_cast<uint32_t>(a->elem_type)) + " is unknown");
            for (size_t i = 0; i < a->items.size(); ++i) {
                const Value& item = a->items[i];
                if (item.type != a->elem_type)
                    fail(what + ": item " + std::to_string(i) + " has type " + std::string(value_type_name(item.type)) +
                         " in an array of " + std::string(value_type_name(a->elem_type)));
                check_value(item, what + "[" + std::to_string(i) + "]", depth + 1);
            }
            return;
        }
        default: return;
    }
}

// Validates a tensor's type and shape, returning its traits and byte size.
uint64_t tensor_bytes(const std::string& name, Type type, const std::vector<int64_t>& shape) {
    const std::string what = "tensor '" + name + "'";
    const auto tr = type_traits(static_cast<uint32_t>(type));
    if (!tr) fail(what + ": type id " + std::to_string(static_cast<uint32_t>(type)) + " is unknown");
    if (shape.empty() || shape.size() > static_cast<size_t>(kMaxDims))
        fail(what + ": " + std::to_string(shape.size()) + " dimensions, expected 1 to " + std::to_string(kMaxDims));
    int64_t n = 1;
    for (size_t d = 0; d < shape.size(); ++d) {
        if (shape[d] < 1) fail(what + ": dimension " + std::to_string(d) + " is " + std::to_string(shape[d]) + ", expected at least 1");
        if (n > std::numeric_limits<int64_t>::max() / shape[d]) fail(what + ": the element count overflows 64 bits");
        n *= shape[d];
    }
    if (shape[0] % tr->block_size != 0)
        fail(what + ": row length " + std::to_string(shape[0]) + " is not a multiple of the " + std::string(tr->name) +
             " block size " + std::to_string(tr->block_size));
    const auto blocks = static_cast<uint64_t>(n / tr->block_size);
    if (blocks > std::numeric_limits<uint64_t>::max() / tr->type_size) fail(what + ": the byte size overflows 64 bits");
    return blocks * tr->type_size;
}

void check_new_tensor_name(const std::string& name, bool taken) {
    if (name.empty()) fail("tensor names must not be empty");
    if (name.size() > kMaxTensorName)
        fail("tensor '" + name + "': the name is " + std::to_string(name.size()) + " bytes, at most " +
             std::to_string(kMaxTensorName) + " are allowed (llama.cpp's limit)");
    if (taken) fail("tensor '" + name + "' was added twice");
}

template <typename Pending>
bool has_tensor(const std::vector<Pending>& tensors, const std::string& name) {
    for (const auto& t : tensors)
        if (t.info.name == name) return true;
    return false;
}

// Little-endian serialisation, independent of the host byte order.
class Buffer {
public:
    template <typename T>
    void put(T v) {
        static_assert(std::is_unsigned_v<T>);
        for (size_t i = 0; i < sizeof(T); ++i) bytes.push_back(static_cast<uint8_t>(v >> (8 * i)));
    }
    void put_string(std::string_view s) {
        put<uint64_t>(s.size());
        bytes.insert(bytes.end(), s.begin(), s.end());
    }
    void put_value(const Value& v) {
        if (const auto r = int_range(v.type)) {
            const uint64_t bits = checked_int_bits(v, *r, "value");
            switch (v.type) {
                case ValueType::UINT8: case ValueType::INT8: put(static_cast<uint8_t>(bits)); break;
                case ValueType::UINT16: case ValueType::INT16: put(static_cast<uint16_t>(bits)); break;
                case ValueType::UINT32: case ValueType::INT32: put(static_cast<uint32_t>(bits)); break;
                default: put(bits); break;
            }
            return;
        }
        switch (v.type) {
            case ValueType::FLOAT32: put(std::bit_cast<uint32_t>(static_cast<float>(std::get<double>(v.v)))); break;
            case ValueType::FLOAT64: put(std::bit_cast<uint64_t>(std::get<double>(v.v))); break;
            case ValueType::BOOL: put(static_cast<uint8_t>(std::get<bool>(v.v) ? 1 : 0)); break;
            case ValueType::STRING: put_string(std::get<std::string>(v.v)); break;
            case ValueType::ARRAY: {
                const Array& a = std::get<Array>(v.v);
                put(static_cast<uint32_t>(a.elem_type));
                put<uint64_t>(a.items.size());
                for (const Value& item : a.items) put_value(item);
                break;
            }
            default: break;
        }
    }

    std::vector<uint8_t> bytes;
};

// Paths are UTF-8; building the filesystem::path from char8_t makes that
// explicit, which matters on Windows where a char path means the ANSI code page.
std::filesystem::path utf8_path(const std::string& s) {
    return std::filesystem::path(std::u8string(reinterpret_cast<const char8_t*>(s.data()), s.size()));
}

// Removes the temporary file unless the write completed.
class TmpGuard {
public:
    explicit TmpGuard(std::filesystem::path p) : path_(std::move(p)) {}
    TmpGuard(const TmpGuard&) = delete;
    TmpGuard& operator=(const TmpGuard&) = delete;
    ~TmpGuard() {
        if (!committed_) {
            std::error_code ec;
            std::filesystem::remove(path_, ec);
        }
    }
    void commit() { committed_ = true; }

private:
    std::filesystem::path path_;
    bool committed_ = false;
};

}  // namespace

void Writer::set(std::string key, Value value) {
    if (key.empty()) fail("metadata keys must not be empty");
    const std::string what = "metadata key '" + key + "'";
    check_value(value, what, 0);
    if (key == "general.alignment") {
        if (value.type != ValueType::UINT32) fail(what + ": must be uint32, not " + std::string(value_type_name(value.type)));
        const uint64_t a = value.as_u64(what);
        if (!is_power_of_two(a)) fail(what + ": " + std::to_string(a) + " is not a non-zero power of two");
        alignment_ = static_cast<uint32_t>(a);
    }
    for (KeyValue& kv : kv_) {
        if (kv.key == key) {
            kv.value = std::move(value);
            return;
        }
    }
    kv_.push_back(KeyValue{std::move(key), std::move(value)});
}

void Writer::set_alignment(uint32_t alignment) {
    if (!is_power_of_two(alignment)) fail("alignment " + std::to_string(alignment) + " is not a non-zero power of two");
    if (alignment == kDefaultAlignment) {
        // The default needs no key; readers assume 32 when it is absent.
        alignment_ = alignment;
        std::erase_if(kv_, [](const KeyValue& kv) { return kv.key == "general.alignment"; });
        return;
    }
    set("general.alignment", Value::u32(alignment));
}

void Writer::add_tensor(std::string name, Type type, std::vector<int64_t> shape, std::span<const uint8_t> data) {
    check_new_tensor_name(name, has_tensor(tensors_, name));
    const uint64_t n_bytes = tensor_bytes(name, type, shape);
    if (data.size() != n_bytes)
        fail("tensor '" + name + "': " + std::to_string(data.size()) + " bytes of data given, its type and shape need " +
             std::to_string(n_bytes));
    PendingTensor t;
    t.info.name = std::move(name);
    t.info.type = type;
    t.info.shape = std::move(shape);
    t.info.n_bytes = n_bytes;
    t.data.assign(data.begin(), data.end());
    tensors_.push_back(std::move(t));
}

void Writer::add_tensor(std::string name, Type type, std::vector<int64_t> shape, Producer producer) {
    check_new_tensor_name(name, has_tensor(tensors_, name));
    if (!producer) fail("tensor '" + name + "': the producer is empty");
    const uint64_t n_bytes = tensor_bytes(name, type, shape);
    // The producer fills a buffer of n_bytes at write time.
    if (n_bytes > std::numeric_limits<size_t>::max()) fail("tensor '" + name + "': too large for this machine");
    PendingTensor t;
    t.info.name = std::move(name);
    t.info.type = type;
    t.info.shape = std::move(shape);
    t.info.n_bytes = n_bytes;
    t.producer = std::move(producer);
    tensors_.push_back(std::move(t));
}

void Writer::write(const std::string& path) const {
    // Data offsets: each tensor starts at the next multiple of the alignment.
    std::vector<uint64_t> offsets;
    offsets.reserve(tensors_.size());
    uint64_t cur = 0;
    for (const PendingTensor& t : tensors_) {
        const uint64_t off = (cur + alignment_ - 1) / alignment_ * alignment_;
        if (off < cur || t.info.n_bytes > std::numeric_limits<uint64_t>::max() - off)
            fail(path + ": the tensors' total size overflows 64 bits");
        offsets.push_back(off);
        cur = off + t.info.n_bytes;
    }

    Buffer h;
    h.put<uint32_t>(kMagic);
    h.put<uint32_t>(3);
    h.put<uint64_t>(tensors_.size());
    h.put<uint64_t>(kv_.size());
    for (const KeyValue& kv : kv_) {
        h.put_string(kv.key);
        h.put(static_cast<uint32_t>(kv.value.type));
        h.put_value(kv.value);
    }
    for (size_t i = 0; i < tensors_.size(); ++i) {
        const TensorInfo& info = tensors_[i].info;
        h.put_string(info.name);
        h.put(static_cast<uint32_t>(info.shape.size()));
        for (int64_t d : info.shape) h.put(static_cast<uint64_t>(d));
        h.put(static_cast<uint32_t>(info.type));
        h.put(offsets[i]);
    }

    const std::filesystem::path final_path = utf8_path(path);
    const std::filesystem::path tmp_path = utf8_path(path + ".tmp");
    TmpGuard guard(tmp_path);
    {
        std::ofstream out(tmp_path, std::ios::binary | std::ios::trunc);
        if (!out) fail(path + ".tmp: cannot create: " + std::error_code(errno, std::generic_category()).message());
        auto write_bytes = [&](const void* p, size_t n) {
            out.write(static_cast<const char*>(p), static_cast<std::streamsize>(n));
            if (!out) fail(path + ".tmp: write failed: " + std::error_code(errno, std::generic_category()).message());
        };
        const std::vector<uint8_t> zeros(alignment_, 0);
        uint64_t pos = 0;  // bytes written so far
        auto pad_to = [&](uint64_t target) {
            while (pos < target) {
                const size_t n = static_cast<size_t>(std::min<uint64_t>(target - pos, zeros.size()));
                write_bytes(zeros.data(), n);
                pos += n;
            }
        };
        write_bytes(h.bytes.data(), h.bytes.size());
        pos = h.bytes.size();
        const uint64_t data_start = (pos + alignment_ - 1) / alignment_ * alignment_;
        pad_to(data_start);

        std::vector<uint8_t> scratch;
        for (size_t i = 0; i < tensors_.size(); ++i) {
            const PendingTensor& t = tensors_[i];
            pad_to(data_start + offsets[i]);
            if (t.producer) {
                // Zero-filled so a producer that writes only part of it still
                // yields deterministic bytes.
                scratch.assign(static_cast<size_t>(t.info.n_bytes), 0);
                t.producer(std::span<uint8_t>(scratch));
                write_bytes(scratch.data(), scratch.size());
            } else {
                write_bytes(t.data.data(), t.data.size());
            }
            pos += t.info.n_bytes;
        }
        // Pad the end too, as the Python gguf writer does, so the data section
        // is a whole number of alignment units.
        pad_to((pos + alignment_ - 1) / alignment_ * alignment_);
        out.flush();
        if (!out) fail(path + ".tmp: write failed: " + std::error_code(errno, std::generic_category()).message());
        out.close();
        if (out.fail()) fail(path + ".tmp: close failed: " + std::error_code(errno, std::generic_category()).message());
    }
    std::error_code ec;
    std::filesystem::rename(tmp_path, final_path, ec);
    if (ec) fail(path + ": cannot rename the temporary file into place: " + ec.message());
    guard.commit();
}

}  // namespace kiln::gguf
