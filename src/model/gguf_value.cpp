// GGUF metadata values: type names, checked conversions and rendering.
#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>

#include "model/gguf.h"

namespace kiln::gguf {
namespace {

// Names are the ones the GGUF specification and the Python `gguf` package use,
// lower-cased, so tools and tests can compare them as text.
constexpr std::string_view kTypeNames[] = {
    "uint8", "int8", "uint16", "int16", "uint32", "int32", "float32",
    "bool", "string", "array", "uint64", "int64", "float64",
};

bool is_unsigned_type(ValueType t) {
    return t == ValueType::UINT8 || t == ValueType::UINT16 || t == ValueType::UINT32 || t == ValueType::UINT64;
}

bool is_signed_type(ValueType t) {
    return t == ValueType::INT8 || t == ValueType::INT16 || t == ValueType::INT32 || t == ValueType::INT64;
}

[[noreturn]] void mismatch(std::string_view what, std::string_view expected, const Value& v) {
    throw Error(std::string(what) + ": expected " + std::string(expected) + ", found " +
                std::string(value_type_name(v.type)));
}

// A Value is an aggregate, so a caller can pair a type tag with the wrong
// variant alternative; report that instead of letting std::get throw
// std::bad_variant_access, which is not a gguf::Error.
[[noreturn]] void bad_representation(std::string_view what, const Value& v) {
    throw Error(std::string(what) + ": value of type " + std::string(value_type_name(v.type)) +
                " holds a mismatched representation");
}

// Shortest text that reads back to the same number: FLOAT32 values are
// printed as float so 0.1f shows as "0.1", not "0.10000000149011612".
// Non-finite values use the spellings Python's json module (and float())
// accept, so rendered arrays stay machine-readable.
void append_float(std::string& out, double x, bool is_f32) {
    if (std::isnan(x)) {
        out += "NaN";
        return;
    }
    if (std::isinf(x)) {
        out += x < 0 ? "-Infinity" : "Infinity";
        return;
    }
    char buf[64];
    std::to_chars_result r = is_f32 ? std::to_chars(buf, buf + sizeof buf, static_cast<float>(x))
                                    : std::to_chars(buf, buf + sizeof buf, x);
    std::string_view s(buf, static_cast<size_t>(r.ptr - buf));
    out += s;
    // Keep floats recognisable as floats ("1.0", not "1") for readers of the text.
    if (s.find_first_of(".eE") == std::string_view::npos) out += ".0";
}

// Length of the valid UTF-8 sequence starting at s[i], or 0 if it is not one.
size_t utf8_sequence_length(std::string_view s, size_t i) {
    const auto b0 = static_cast<unsigned char>(s[i]);
    size_t n;
    uint32_t cp;
    if (b0 < 0x80) return 1;
    if ((b0 & 0xE0) == 0xC0) { n = 2; cp = b0 & 0x1F; }
    else if ((b0 & 0xF0) == 0xE0) { n = 3; cp = b0 & 0x0F; }
    else if ((b0 & 0xF8) == 0xF0) { n = 4; cp = b0 & 0x07; }
    else return 0;
    if (i + n > s.size()) return 0;
    for (size_t k = 1; k < n; ++k) {
        const auto b = static_cast<unsigned char>(s[i + k]);
        if ((b & 0xC0) != 0x80) return 0;
        cp = (cp << 6) | (b & 0x3F);
    }
    // Reject overlong forms, surrogates and values past U+10FFFF.
    if ((n == 2 && cp < 0x80) || (n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000)) return 0;
    if ((cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF) return 0;
    return n;
}


// Escapes a string the way JSON does, so the output of `kiln-gguf info` can be
// parsed back; bytes that are not valid UTF-8 (which JSON cannot express) are
// written as \xNN.
std::string quote_string(std::string_view s) {
    std::string out;
    out.reserve(s.size() + 2);
    out += '"';
    for (size_t i = 0; i < s.size();) {
        const auto c = static_cast<unsigned char>(s[i]);
        char buf[8];
        switch (c) {
            case '"': out += "\\\""; ++i; continue;
            case '\\': out += "\\\\"; ++i; continue;
            case '\n': out += "\\n"; ++i; continue;
            case '\r': out += "\\r"; ++i; continue;
            case '\t': out += "\\t"; ++i; continue;
            default: break;
        }
        if (c < 0x20 || c == 0x7F) {
            std::snprintf(buf, sizeof buf, "\\u%04x", c);
            out += buf;
            ++i;
            continue;
        }
        const size_t n = utf8_sequence_length(s, i);
        if (n == 0) {
            std::snprintf(buf, sizeof buf, "\\x%02x", c);
            out += buf;
            ++i;
            continue;
        }
        // U+0085, U+2028 and U+2029 count as line breaks for many readers
        // (Python's str.splitlines among them); escape them so one value
        // stays on one line of output.
        const std::string_view seq = s.substr(i, n);
        if (seq == "\xc2\x85" || seq == "\xe2\x80\xa8" || seq == "\xe2\x80\xa9") {
            out += seq.size() == 2 ? "\\u0085" : (seq[2] == '\xa8' ? "\\u2028" : "\\u2029");
        } else {
            out.append(seq);
        }
        i += n;
    }
    out += '"';
    return out;
}

}  // namespace

std::string_view value_type_name(ValueType t) {
    const auto i = static_cast<uint32_t>(t);
    if (i < std::size(kTypeNames)) return kTypeNames[i];
    return "unknown";
}

bool Value::is_integer() const { return is_unsigned_type(type) || is_signed_type(type); }

bool Value::is_float() const { return type == ValueType::FLOAT32 || type == ValueType::FLOAT64; }

uint64_t Value::as_u64(std::string_view what) const {
    if (!is_integer()) mismatch(what, "an integer", *this);
    if (const auto* u = std::get_if<uint64_t>(&v)) return *u;
    if (const auto* i = std::get_if<int64_t>(&v)) {
        if (*i < 0)
            throw Error(std::string(what) + ": expected a non-negative integer, found " + std::to_string(*i));
        return static_cast<uint64_t>(*i);
    }
    bad_representation(what, *this);
}

int64_t Value::as_i64(std::string_view what) const {
    if (!is_integer()) mismatch(what, "an integer", *this);
    if (const auto* i = std::get_if<int64_t>(&v)) return *i;
    if (const auto* u = std::get_if<uint64_t>(&v)) {
        if (*u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
            throw Error(std::string(what) + ": value " + std::to_string(*u) + " does not fit int64");
        return static_cast<int64_t>(*u);
    }
    bad_representation(what, *this);
}

// Integers are accepted too: a float hyperparameter written as an integer
// (e.g. rope.freq_base = 10000) means the same number.
double Value::as_f64(std::string_view what) const {
    if (is_float()) {
        if (const auto* d = std::get_if<double>(&v)) return *d;
        bad_representation(what, *this);
    }
    if (is_integer()) {
        if (const auto* u = std::get_if<uint64_t>(&v)) return static_cast<double>(*u);
        if (const auto* i = std::get_if<int64_t>(&v)) return static_cast<double>(*i);
        bad_representation(what, *this);
    }
    mismatch(what, "a number", *this);
}

bool Value::as_bool(std::string_view what) const {
    if (type != ValueType::BOOL) mismatch(what, "bool", *this);
    if (const auto* b = std::get_if<bool>(&v)) return *b;
    bad_representation(what, *this);
}

const std::string& Value::as_string(std::string_view what) const {
    if (type != ValueType::STRING) mismatch(what, "string", *this);
    if (const auto* s = std::get_if<std::string>(&v)) return *s;
    bad_representation(what, *this);
}

const Array& Value::as_array(std::string_view what) const {
    if (type != ValueType::ARRAY) mismatch(what, "array", *this);
    if (const auto* a = std::get_if<Array>(&v)) return *a;
    bad_representation(what, *this);
}

std::string Value::to_string(size_t max_items) const {
    std::string out;
    switch (type) {
        case ValueType::UINT8: case ValueType::UINT16: case ValueType::UINT32: case ValueType::UINT64:
        case ValueType::INT8: case ValueType::INT16: case ValueType::INT32: case ValueType::INT64:
            if (const auto* u = std::get_if<uint64_t>(&v)) return std::to_string(*u);
            if (const auto* i = std::get_if<int64_t>(&v)) return std::to_string(*i);
            break;
        case ValueType::FLOAT32: case ValueType::FLOAT64:
            if (const auto* d = std::get_if<double>(&v)) {
                append_float(out, *d, type == ValueType::FLOAT32);
                return out;
            }
            break;
        case ValueType::BOOL:
            if (const auto* b = std::get_if<bool>(&v)) return *b ? "true" : "false";
            break;
        case ValueType::STRING:
            if (const auto* s = std::get_if<std::string>(&v)) return quote_string(*s);
            break;
        case ValueType::ARRAY:
            if (const auto* a = std::get_if<Array>(&v)) {
                out += '[';
                const size_t shown = a->items.size() <= max_items ? a->items.size() : max_items;
                for (size_t i = 0; i < shown; ++i) {
                    if (i) out += ", ";
                    out += a->items[i].to_string(max_items);
                }
                if (shown < a->items.size()) {
                    if (shown) out += ", ";
                    out += "... (" + std::to_string(a->items.size()) + " items)";
                }
                out += ']';
                return out;
            }
            break;
    }
    return "<invalid " + std::string(value_type_name(type)) + ">";
}

}  // namespace kiln::gguf
