// libFuzzer target for the GGUF reader: any byte string must parse or throw
// kiln::gguf::Error; anything else (a crash, a sanitizer report, another
// exception, a hang, a huge allocation) is a bug.
//
// Beyond "does not crash", a file the reader accepts must be one the writer
// accepts too (every key, value and tensor), so the two agree on the format.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "model/gguf.h"

namespace {

// Reads every item of a value, recursively, through the public accessors.
size_t touch(const kiln::gguf::Value& v) {
    size_t n = 1;
    using kiln::gguf::ValueType;
    try {
        switch (v.type) {
            case ValueType::STRING: n += v.as_string("v").size(); break;
            case ValueType::BOOL: n += v.as_bool("v"); break;
            case ValueType::ARRAY:
                for (const auto& item : v.as_array("v").items) n += touch(item);
                break;
            default:
                n += static_cast<size_t>(v.as_f64("v") != 0.0);
                if (v.is_integer()) {
                    // One of these throws for out-of-range values; both must be Errors.
                    try { n += static_cast<size_t>(v.as_u64("v")); } catch (const kiln::gguf::Error&) {}
                    try { n += static_cast<size_t>(v.as_i64("v")); } catch (const kiln::gguf::Error&) {}
                }
                break;
        }
    } catch (const kiln::gguf::Error&) {
        std::abort();  // the reader produced a value whose accessors disagree with its type
    }
    return n;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    try {
        const auto f = kiln::gguf::File::from_memory(data, size, "fuzz.gguf");
        volatile size_t sink = f.version() + f.alignment() + f.data_offset() + f.file_size();
        kiln::gguf::Writer w;
        for (const auto& kv : f.metadata()) {
            sink = sink + touch(kv.value) + kv.value.to_string(4).size();
            if (f.find(kv.key) != &kv.value) std::abort();
            if (!kv.key.empty()) w.set(kv.key, kv.value);  // throws Error (caught below, then abort) if they disagree
        }
        for (const auto& t : f.tensors()) {
            if (f.find_tensor(t.name) != &t) std::abort();
            const auto bytes = f.tensor_data(t);
            if (bytes.size() != t.n_bytes || t.n_elements() <= 0) std::abort();
            sink = sink + bytes.front() + bytes.back();
            if (!t.name.empty() && t.name.size() <= 63) w.add_tensor(t.name, t.type, t.shape, bytes);
        }
        (void)sink;
    } catch (const kiln::gguf::Error& e) {
        // Parse errors must say where; writer errors after a successful parse are bugs.
        if (std::string(e.what()).find("fuzz.gguf: at byte ") != 0) std::abort();
    }
    return 0;
}
