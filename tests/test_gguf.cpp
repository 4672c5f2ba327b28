// GGUF reader and writer: round trips, the shared test files, and hostile
// input. Corrupt files are built byte by byte with RawGguf (independent of
// the Writer), so each test knows the exact offset its error must name.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "model/gguf.h"

namespace {

namespace fs = std::filesystem;
using kiln::Type;
using kiln::gguf::Array;
using kiln::gguf::Error;
using kiln::gguf::File;
using kiln::gguf::KeyValue;
using kiln::gguf::OpenOptions;
using kiln::gguf::TensorInfo;
using kiln::gguf::Value;
using kiln::gguf::ValueType;
using kiln::gguf::Writer;

// ---------------------------------------------------------------------------
// Helpers

// A scratch directory per test, removed afterwards.
class TempDir {
public:
    TempDir() {
        const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
        path_ = fs::temp_directory_path() /
                ("kiln_test_gguf_" + std::string(info->test_suite_name()) + "_" + info->name() + "_" +
                 std::to_string(std::random_device{}()));
        fs::create_directories(path_);
    }
    ~TempDir() {
        std::error_code ec;
        fs::remove_all(path_, ec);
    }
    std::string file(const std::string& name) const { return (path_ / name).string(); }
    const fs::path& path() const { return path_; }

private:
    fs::path path_;
};

std::vector<uint8_t> read_bytes(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Deep equality; floats compare by value with NaN equal to NaN.
bool same(const Value& a, const Value& b) {
    if (a.type != b.type || a.v.index() != b.v.index()) return false;
    if (a.type == ValueType::ARRAY) {
        const Array& x = std::get<Array>(a.v);
        const Array& y = std::get<Array>(b.v);
        if (x.elem_type != y.elem_type || x.items.size() != y.items.size()) return false;
        for (size_t i = 0; i < x.items.size(); ++i)
            if (!same(x.items[i], y.items[i])) return false;
        return true;
    }
    if (a.is_float()) {
        const double x = std::get<double>(a.v), y = std::get<double>(b.v);
        return x == y || (std::isnan(x) && std::isnan(y));
    }
    if (const auto* u = std::get_if<uint64_t>(&a.v)) return *u == std::get<uint64_t>(b.v);
    if (const auto* i = std::get_if<int64_t>(&a.v)) return *i == std::get<int64_t>(b.v);
    if (const auto* x = std::get_if<bool>(&a.v)) return *x == std::get<bool>(b.v);
    if (const auto* s = std::get_if<std::string>(&a.v)) return *s == std::get<std::string>(b.v);
    return false;
}

void expect_same_file(const File& a, const File& b) {
    EXPECT_EQ(a.version(), b.version());
    EXPECT_EQ(a.alignment(), b.alignment());
    EXPECT_EQ(a.data_offset(), b.data_offset());
    EXPECT_EQ(a.file_size(), b.file_size());
    ASSERT_EQ(a.metadata().size(), b.metadata().size());
    for (size_t i = 0; i < a.metadata().size(); ++i) {
        EXPECT_EQ(a.metadata()[i].key, b.metadata()[i].key);
        EXPECT_TRUE(same(a.metadata()[i].value, b.metadata()[i].value)) << a.metadata()[i].key;
    }
    ASSERT_EQ(a.tensors().size(), b.tensors().size());
    for (size_t i = 0; i < a.tensors().size(); ++i) {
        const TensorInfo& x = a.tensors()[i];
        const TensorInfo& y = b.tensors()[i];
        EXPECT_EQ(x.name, y.name);
        EXPECT_EQ(x.shape, y.shape);
        EXPECT_EQ(x.type, y.type);
        EXPECT_EQ(x.offset, y.offset);
        EXPECT_EQ(x.n_bytes, y.n_bytes);
        const auto dx = a.tensor_data(x);
        const auto dy = b.tensor_data(y);
        ASSERT_EQ(dx.size(), dy.size());
        EXPECT_TRUE(std::equal(dx.begin(), dx.end(), dy.begin())) << x.name;
    }
}

// Builds GGUF bytes field by field, so tests can write anything, valid or not.
struct RawGguf {
    std::vector<uint8_t> b;

    uint64_t pos() const { return b.size(); }
    RawGguf& u8(uint8_t v) { b.push_back(v); return *this; }
    RawGguf& u32(uint32_t v) {
        for (int i = 0; i < 4; ++i) b.push_back(static_cast<uint8_t>(v >> (8 * i)));
        return *this;
    }
    RawGguf& u64(uint64_t v) {
        for (int i = 0; i < 8; ++i) b.push_back(static_cast<uint8_t>(v >> (8 * i)));
        return *this;
    }
    RawGguf& str(std::string_view s) {
        u64(s.size());
        b.insert(b.end(), s.begin(), s.end());
        return *this;
    }
    RawGguf& header(uint64_t n_tensors, uint64_t n_kv, uint32_t version = 3) {
        return u32(kiln::gguf::kMagic).u32(version).u64(n_tensors).u64(n_kv);
    }
    RawGguf& kv_u32(std::string_view key, uint32_t v) { return str(key).u32(4).u32(v); }
    RawGguf& kv_str(std::string_view key, std::string_view v) { return str(key).u32(8).str(v); }
    RawGguf& tensor(std::string_view name, std::vector<uint64_t> dims, uint32_t type, uint64_t offset) {
        str(name).u32(static_cast<uint32_t>(dims.size()));
        for (uint64_t d : dims) u64(d);
        return u32(type).u64(offset);
    }
    RawGguf& pad(uint64_t align) {
        while (b.size() % align) b.push_back(0);
        return *this;
    }
    RawGguf& zeros(size_t n) {
        b.insert(b.end(), n, 0);
        return *this;
    }
    void patch_u32(uint64_t at, uint32_t v) {
        for (int i = 0; i < 4; ++i) b[at + i] = static_cast<uint8_t>(v >> (8 * i));
    }
    void patch_u64(uint64_t at, uint64_t v) {
        for (int i = 0; i < 8; ++i) b[at + i] = static_cast<uint8_t>(v >> (8 * i));
    }
};

// The error message for parsing bytes, or "" if they parse.
std::string parse_error(const std::vector<uint8_t>& bytes) {
    try {
        File f = File::from_memory(bytes.data(), bytes.size(), "t.gguf");
        return "";
    } catch (const Error& e) {
        return e.what();
    }
}

// Expects an Error that names the file, the exact byte offset and `what`.
void expect_error(const std::vector<uint8_t>& bytes, uint64_t at, const std::string& what) {
    const std::string msg = parse_error(bytes);
    ASSERT_FALSE(msg.empty()) << "parsed, expected: " << what;
    EXPECT_NE(msg.find("t.gguf: at byte " + std::to_string(at) + ": "), std::string::npos) << msg;
    EXPECT_NE(msg.find(what), std::string::npos) << msg;
}

std::vector<uint8_t> iota_bytes(size_t n, uint8_t start = 0) {
    std::vector<uint8_t> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(start + i * 7);
    return v;
}

// One of each value type, arrays of each, string arrays, nested arrays,
// empty containers, and boundary values.
std::vector<KeyValue> every_value_type() {
    std::vector<KeyValue> kv;
    auto add = [&](std::string k, Value v) { kv.push_back({std::move(k), std::move(v)}); };
    add("t.u8", Value::u8(255));
    add("t.i8", Value::i8(-128));
    add("t.u16", Value::u16(65535));
    add("t.i16", Value::i16(-32768));
    add("t.u32", Value::u32(4294967295u));
    add("t.i32", Value::i32(std::numeric_limits<int32_t>::min()));
    add("t.u64", Value::u64(std::numeric_limits<uint64_t>::max()));
    add("t.i64", Value::i64(std::numeric_limits<int64_t>::min()));
    add("t.f32", Value::f32(0.1f));
    add("t.f32.inf", Value::f32(-std::numeric_limits<float>::infinity()));
    add("t.f32.nan", Value::f32(std::numeric_limits<float>::quiet_NaN()));
    add("t.f64", Value::f64(3.141592653589793));
    add("t.bool.true", Value::boolean(true));
    add("t.bool.false", Value::boolean(false));
    add("t.str", Value::str("hello, \"world\"\n\xe4\xb8\xad\xe6\x96\x87"));
    add("t.str.empty", Value::str(""));
    add("t.str.nul", Value::str(std::string("a\0b", 3)));
    add("t.arr.u8", Value::array(ValueType::UINT8, {Value::u8(1), Value::u8(2), Value::u8(255)}));
    add("t.arr.i8", Value::array(ValueType::INT8, {Value::i8(-1), Value::i8(127)}));
    add("t.arr.u16", Value::array(ValueType::UINT16, {Value::u16(1)}));
    add("t.arr.i16", Value::array(ValueType::INT16, {Value::i16(-2)}));
    add("t.arr.u32", Value::array(ValueType::UINT32, {Value::u32(7), Value::u32(8)}));
    add("t.arr.i32", Value::array(ValueType::INT32, {Value::i32(-7)}));
    add("t.arr.u64", Value::array(ValueType::UINT64, {Value::u64(1ull << 63)}));
    add("t.arr.i64", Value::array(ValueType::INT64, {Value::i64(-(1ll << 62))}));
    add("t.arr.f32", Value::array(ValueType::FLOAT32, {Value::f32(1.5f), Value::f32(-0.0f)}));
    add("t.arr.f64", Value::array(ValueType::FLOAT64, {Value::f64(1e300)}));
    add("t.arr.bool", Value::array(ValueType::BOOL, {Value::boolean(true), Value::boolean(false)}));
    add("t.arr.str", Value::array(ValueType::STRING, {Value::str("<pad>"), Value::str(""), Value::str("\xf0\x9f\x98\x80")}));
    add("t.arr.empty", Value::array(ValueType::FLOAT32, {}));
    add("t.arr.nested",
        Value::array(ValueType::ARRAY, {Value::array(ValueType::INT32, {Value::i32(1), Value::i32(2)}),
                                        Value::array(ValueType::STRING, {Value::str("x")}),
                                        Value::array(ValueType::ARRAY, {Value::array(ValueType::BOOL, {})})}));
    return kv;
}

// ---------------------------------------------------------------------------
// Round trips

TEST(GgufRoundTrip, EveryValueTypeAndTensors) {
    TempDir dir;
    const std::string path = dir.file("rt.gguf");
    Writer w;
    const auto kv = every_value_type();
    for (const auto& e : kv) w.set(e.key, e.value);

    const auto f32 = iota_bytes(4 * 3 * 5 * 4);
    const auto q8 = iota_bytes(34 * 2, 3);
    const auto f16 = iota_bytes(2 * 7, 5);
    w.add_tensor("a.f32", Type::F32, {4, 3, 5}, std::span<const uint8_t>(f32));
    w.add_tensor("b.q8_0", Type::Q8_0, {32, 2}, std::span<const uint8_t>(q8));
    w.add_tensor("c.f16", Type::F16, {7}, std::span<const uint8_t>(f16));
    w.add_tensor("d.q4_K", Type::Q4_K, {256, 1, 1, 2}, [](std::span<uint8_t> out) {
        ASSERT_EQ(out.size(), 2u * 144u);
        for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<uint8_t>(i);
    });
    w.write(path);
    EXPECT_FALSE(fs::exists(path + ".tmp"));

    for (bool mmap : {true, false}) {
        SCOPED_TRACE(mmap ? "mmap" : "read");
        const File f = File::open(path, OpenOptions{mmap});
        EXPECT_EQ(f.is_mmapped(), mmap);
        EXPECT_EQ(f.version(), 3u);
        EXPECT_EQ(f.alignment(), 32u);
        EXPECT_EQ(f.data_offset() % 32, 0u);
        EXPECT_EQ(f.find("general.alignment"), nullptr);  // not written for the default
        ASSERT_EQ(f.metadata().size(), kv.size());
        for (size_t i = 0; i < kv.size(); ++i) {
            EXPECT_EQ(f.metadata()[i].key, kv[i].key);  // insertion order
            EXPECT_TRUE(same(f.metadata()[i].value, kv[i].value)) << kv[i].key << " = " << f.metadata()[i].value.to_string();
        }
        ASSERT_EQ(f.tensors().size(), 4u);
        const TensorInfo* a = f.find_tensor("a.f32");
        ASSERT_NE(a, nullptr);
        EXPECT_EQ(a->shape, (std::vector<int64_t>{4, 3, 5}));
        EXPECT_EQ(a->n_elements(), 60);
        const auto da = f.tensor_data(*a);
        EXPECT_TRUE(std::equal(da.begin(), da.end(), f32.begin(), f32.end()));
        const auto db = f.tensor_data(*f.find_tensor("b.q8_0"));
        EXPECT_TRUE(std::equal(db.begin(), db.end(), q8.begin(), q8.end()));
        const auto dc = f.tensor_data(*f.find_tensor("c.f16"));
        EXPECT_TRUE(std::equal(dc.begin(), dc.end(), f16.begin(), f16.end()));
        const TensorInfo* d = f.find_tensor("d.q4_K");
        ASSERT_NE(d, nullptr);
        EXPECT_EQ(d->type, Type::Q4_K);
        EXPECT_EQ(d->n_bytes, 288u);
        const auto dd = f.tensor_data(*d);
        for (size_t i = 0; i < dd.size(); ++i) ASSERT_EQ(dd[i], static_cast<uint8_t>(i));
        for (const auto& t : f.tensors()) EXPECT_EQ(t.offset % 32, 0u) << t.name;
        EXPECT_EQ(f.find_tensor("missing"), nullptr);
    }
}

TEST(GgufRoundTrip, MatchesIndependentEncoding) {
    // The writer's bytes must equal a hand-built file: guards the field order
    // and padding rules against a reader and writer that agree on a mistake.
    TempDir dir;
    Writer w;
    w.set("general.architecture", Value::str("test"));
    w.set("n", Value::u32(7));
    const auto data = iota_bytes(16);
    w.add_tensor("w", Type::F32, {2, 2}, std::span<const uint8_t>(data));
    w.write(dir.file("x.gguf"));

    RawGguf r;
    r.header(1, 2).kv_str("general.architecture", "test").kv_u32("n", 7).tensor("w", {2, 2}, 0, 0).pad(32);
    r.b.insert(r.b.end(), data.begin(), data.end());
    r.pad(32);
    EXPECT_EQ(read_bytes(dir.file("x.gguf")), r.b);
}

TEST(GgufRoundTrip, CustomAlignmentAndReplacedKeys) {
    TempDir dir;
    const std::string path = dir.file("a.gguf");
    Writer w;
    w.set("first", Value::u32(1));
    w.set("second", Value::str("two"));
    w.set("first", Value::str("replaced"));  // keeps its place
    w.set_alignment(64);
    const auto data = iota_bytes(18);
    w.add_tensor("q", Type::Q4_0, {32}, std::span<const uint8_t>(data));
    w.add_tensor("r", Type::Q4_0, {32}, std::span<const uint8_t>(data));
    w.write(path);

    const File f = File::open(path);
    EXPECT_EQ(f.alignment(), 64u);
    EXPECT_EQ(f.data_offset() % 64, 0u);
    ASSERT_EQ(f.metadata().size(), 3u);
    EXPECT_EQ(f.metadata()[0].key, "first");
    EXPECT_EQ(f.get_string("first"), "replaced");
    EXPECT_EQ(f.metadata()[1].key, "second");
    EXPECT_EQ(f.metadata()[2].key, "general.alignment");
    EXPECT_EQ(f.find("general.alignment")->type, ValueType::UINT32);
    EXPECT_EQ(f.get_u64("general.alignment"), 64u);
    EXPECT_EQ(f.tensors()[1].offset, 64u);

    // Back to the default: the key goes away. (A new file: Windows cannot replace
    // a.gguf while f still maps it.)
    Writer w2;
    w2.set_alignment(64);
    w2.set_alignment(32);
    const std::string path2 = dir.file("b.gguf");
    w2.write(path2);
    const File g = File::open(path2);
    EXPECT_EQ(g.find("general.alignment"), nullptr);
    EXPECT_EQ(g.alignment(), 32u);
}

TEST(GgufRoundTrip, ProducerSeesZeroedBuffer) {
    TempDir dir;
    Writer w;
    bool called = false;
    w.add_tensor("p", Type::Q6_K, {512, 3}, [&](std::span<uint8_t> out) {
        called = true;
        EXPECT_EQ(out.size(), 6u * 210u);
        EXPECT_TRUE(std::all_of(out.begin(), out.end(), [](uint8_t b) { return b == 0; }));
        out[0] = 42;
    });
    w.write(dir.file("p.gguf"));
    EXPECT_TRUE(called);
    const File f = File::open(dir.file("p.gguf"));
    EXPECT_EQ(f.tensor_data(f.tensors()[0])[0], 42);
}

TEST(GgufRoundTrip, Version2IsRead) {
    TempDir dir;
    Writer w;
    w.set("k", Value::i64(-5));
    w.write(dir.file("v.gguf"));
    auto bytes = read_bytes(dir.file("v.gguf"));
    bytes[4] = 2;
    const File f = File::from_memory(bytes.data(), bytes.size());
    EXPECT_EQ(f.version(), 2u);
    EXPECT_EQ(f.get_i64("k"), -5);
}

TEST(GgufRoundTrip, EmptyFileAndNoTensors) {
    TempDir dir;
    Writer w;
    w.write(dir.file("e.gguf"));
    const File f = File::open(dir.file("e.gguf"));
    EXPECT_TRUE(f.metadata().empty());
    EXPECT_TRUE(f.tensors().empty());
    EXPECT_EQ(f.data_offset(), 32u);
}

TEST(GgufRoundTrip, NestingUpToTheLimit) {
    TempDir dir;
    // 8 levels of arrays is the limit both sides accept.
    Value v = Value::array(ValueType::UINT8, {Value::u8(9)});
    for (int i = 1; i < 8; ++i) v = Value::array(ValueType::ARRAY, {v});
    Writer w;
    w.set("deep", v);
    w.write(dir.file("d.gguf"));
    const File f = File::open(dir.file("d.gguf"));
    EXPECT_TRUE(same(*f.find("deep"), v));

    Value too_deep = Value::array(ValueType::ARRAY, {v});
    EXPECT_THROW(w.set("deeper", too_deep), Error);
}

// ---------------------------------------------------------------------------
// Values and typed lookups

TEST(GgufValue, CheckedConversions) {
    EXPECT_EQ(Value::u8(5).as_u64("k"), 5u);
    EXPECT_EQ(Value::i32(5).as_u64("k"), 5u);
    EXPECT_THROW(Value::i32(-1).as_u64("k"), Error);
    EXPECT_EQ(Value::u32(7).as_i64("k"), 7);
    EXPECT_THROW(Value::u64(std::numeric_limits<uint64_t>::max()).as_i64("k"), Error);
    EXPECT_DOUBLE_EQ(Value::f32(0.5f).as_f64("k"), 0.5);
    EXPECT_DOUBLE_EQ(Value::u32(10000).as_f64("k"), 10000.0);
    EXPECT_TRUE(Value::boolean(true).as_bool("k"));
    EXPECT_EQ(Value::str("s").as_string("k"), "s");
    EXPECT_EQ(Value::array(ValueType::UINT8, {}).as_array("k").items.size(), 0u);
    try {
        (void)Value::str("x").as_u64("llama.context_length");
        FAIL();
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("llama.context_length"), std::string::npos);
        EXPECT_NE(std::string(e.what()).find("string"), std::string::npos);
    }
    EXPECT_THROW(Value::u8(1).as_string("k"), Error);
    EXPECT_THROW(Value::u8(1).as_bool("k"), Error);
    EXPECT_THROW(Value::u8(1).as_array("k"), Error);
    EXPECT_THROW(Value::str("1").as_f64("k"), Error);
    // A hand-built value whose tag and payload disagree is an Error, not bad_variant_access.
    const Value odd{ValueType::STRING, uint64_t{1}};
    EXPECT_THROW((void)odd.as_string("k"), Error);
    EXPECT_TRUE(Value::i16(1).is_integer());
    EXPECT_FALSE(Value::boolean(true).is_integer());
    EXPECT_TRUE(Value::f64(1).is_float());
}

TEST(GgufValue, Rendering) {
    EXPECT_EQ(Value::u8(255).to_string(), "255");
    EXPECT_EQ(Value::i64(-3).to_string(), "-3");
    EXPECT_EQ(Value::f32(0.1f).to_string(), "0.1");
    EXPECT_EQ(Value::f32(1.0f).to_string(), "1.0");
    EXPECT_EQ(Value::f64(1e-5).to_string(), "1e-05");
    EXPECT_EQ(Value::f32(std::numeric_limits<float>::quiet_NaN()).to_string(), "NaN");
    EXPECT_EQ(Value::f64(-std::numeric_limits<double>::infinity()).to_string(), "-Infinity");
    EXPECT_EQ(Value::boolean(false).to_string(), "false");
    EXPECT_EQ(Value::str("a\"b\\c\n\x01").to_string(), "\"a\\\"b\\\\c\\n\\u0001\"");
    EXPECT_EQ(Value::str("\xe4\xb8\xad").to_string(), "\"\xe4\xb8\xad\"");
    EXPECT_EQ(Value::str("\xff").to_string(), "\"\\xff\"");
    // Characters that some readers take as line breaks stay escaped.
    EXPECT_EQ(Value::str("a\xe2\x80\xa8" "b\xc2\x85").to_string(), "\"a\\u2028b\\u0085\"");
    const Value long_arr = Value::array(ValueType::STRING, {Value::str("a"), Value::str("b"), Value::str("c")});
    EXPECT_EQ(long_arr.to_string(8), "[\"a\", \"b\", \"c\"]");
    EXPECT_EQ(long_arr.to_string(2), "[\"a\", \"b\", ... (3 items)]");
    EXPECT_EQ(kiln::gguf::value_type_name(ValueType::FLOAT32), "float32");
    EXPECT_EQ(kiln::gguf::value_type_name(static_cast<ValueType>(99)), "unknown");
}

TEST(GgufValue, TypedLookups) {
    RawGguf r;
    r.header(0, 3).kv_u32("n", 7).kv_str("s", "x").str("neg").u32(5).u32(static_cast<uint32_t>(-3));
    const File f = File::from_memory(r.b.data(), r.b.size(), "t.gguf");
    EXPECT_EQ(f.get_u64("n"), 7u);
    EXPECT_EQ(f.get_i64("neg"), -3);
    EXPECT_EQ(f.get_string("s"), "x");
    EXPECT_EQ(f.get_u64("absent"), std::nullopt);
    EXPECT_EQ(f.get_string("absent"), std::nullopt);
    EXPECT_EQ(f.get_bool("absent"), std::nullopt);
    EXPECT_EQ(f.get_f64("absent"), std::nullopt);
    EXPECT_EQ(f.get_array("absent"), nullptr);
    EXPECT_DOUBLE_EQ(*f.get_f64("n"), 7.0);
    try {
        (void)f.get_string("n");
        FAIL();
    } catch (const Error& e) {
        const std::string m = e.what();
        EXPECT_NE(m.find("t.gguf"), std::string::npos) << m;
        EXPECT_NE(m.find("'n'"), std::string::npos) << m;
    }
    EXPECT_THROW((void)f.get_u64("neg"), Error);
    EXPECT_THROW((void)f.get_bool("s"), Error);
    EXPECT_THROW((void)f.get_array("s"), Error);
}

TEST(GgufValue, TensorDataRechecksForeignInfo) {
    Writer w;
    TempDir dir;
    const auto data = iota_bytes(4);
    w.add_tensor("t", Type::F32, {1}, std::span<const uint8_t>(data));
    w.write(dir.file("t.gguf"));
    const File f = File::open(dir.file("t.gguf"));
    TensorInfo bogus = f.tensors()[0];
    bogus.offset = 1u << 20;
    EXPECT_THROW((void)f.tensor_data(bogus), Error);
    bogus.offset = 0;
    bogus.n_bytes = std::numeric_limits<uint64_t>::max();
    EXPECT_THROW((void)f.tensor_data(bogus), Error);
}

// ---------------------------------------------------------------------------
// Writer validation and atomicity

template <typename F>
std::string writer_error(F&& f) {
    try {
        f();
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

TEST(GgufWriter, RejectsBadInput) {
    const std::vector<uint8_t> none;
    const auto q40 = iota_bytes(18);
    auto has = [](const std::string& msg, const std::string& what) {
        EXPECT_NE(msg.find(what), std::string::npos) << "message: '" << msg << "', expected: " << what;
    };
    Writer w;
    has(writer_error([&] { w.add_tensor("x", Type::Q4_0, {30}, std::span<const uint8_t>(none)); }), "not a multiple of the q4_0 block size 32");
    has(writer_error([&] { w.add_tensor("x", Type::Q4_0, {32}, std::span<const uint8_t>(none)); }), "0 bytes of data given");
    has(writer_error([&] { w.add_tensor("x", Type::F32, {}, std::span<const uint8_t>(none)); }), "0 dimensions");
    has(writer_error([&] { w.add_tensor("x", Type::F32, {1, 1, 1, 1, 1}, std::span<const uint8_t>(none)); }), "5 dimensions");
    has(writer_error([&] { w.add_tensor("x", Type::F32, {4, 0}, std::span<const uint8_t>(none)); }), "dimension 1 is 0");
    has(writer_error([&] { w.add_tensor("x", Type::F32, {-4}, std::span<const uint8_t>(none)); }), "dimension 0 is -4");
    has(writer_error([&] { w.add_tensor("x", Type::F32, {1ll << 40, 1ll << 40}, std::span<const uint8_t>(none)); }), "overflows");
    has(writer_error([&] { w.add_tensor("x", static_cast<Type>(99), {1}, std::span<const uint8_t>(none)); }), "type id 99 is unknown");
    has(writer_error([&] { w.add_tensor("", Type::Q4_0, {32}, std::span<const uint8_t>(q40)); }), "must not be empty");
    has(writer_error([&] { w.add_tensor(std::string(64, 'n'), Type::Q4_0, {32}, std::span<const uint8_t>(q40)); }), "at most 63");
    has(writer_error([&] { w.add_tensor("x", Type::Q4_0, {32}, kiln::gguf::Writer::Producer{}); }), "producer is empty");
    w.add_tensor("x", Type::Q4_0, {32}, std::span<const uint8_t>(q40));
    has(writer_error([&] { w.add_tensor("x", Type::Q4_0, {32}, std::span<const uint8_t>(q40)); }), "added twice");

    has(writer_error([&] { w.set_alignment(0); }), "not a non-zero power of two");
    has(writer_error([&] { w.set_alignment(48); }), "not a non-zero power of two");
    has(writer_error([&] { w.set("general.alignment", Value::u64(64)); }), "must be uint32");
    has(writer_error([&] { w.set("general.alignment", Value::u32(3)); }), "not a non-zero power of two");
    has(writer_error([&] { w.set("", Value::u32(3)); }), "must not be empty");
    has(writer_error([&] { w.set("k", Value{ValueType::UINT8, uint64_t{300}}); }), "does not fit uint8");
    has(writer_error([&] { w.set("k", Value{ValueType::INT8, int64_t{-200}}); }), "does not fit int8");
    has(writer_error([&] { w.set("k", Value{ValueType::STRING, uint64_t{1}}); }), "must hold a string");
    has(writer_error([&] { w.set("k", Value{static_cast<ValueType>(13), uint64_t{1}}); }), "value type id 13 is unknown");
    has(writer_error([&] { w.set("k", Value::array(ValueType::UINT8, {Value::u16(1)})); }), "item 0 has type uint16");
    has(writer_error([&] { w.set("k", Value::array(static_cast<ValueType>(77), {})); }), "element type id 77");

    // A valid general.alignment set directly changes the layout too.
    TempDir dir;
    w.set("general.alignment", Value::u32(128));
    w.write(dir.file("ok.gguf"));
    const File f = File::open(dir.file("ok.gguf"));
    EXPECT_EQ(f.alignment(), 128u);
    EXPECT_EQ(f.data_offset() % 128, 0u);
}

TEST(GgufWriter, AtomicReplaceAndCleanup) {
    TempDir dir;
    const std::string path = dir.file("m.gguf");
    {
        Writer w;
        w.set("v", Value::u32(1));
        w.write(path);
    }
    // A failing producer leaves the old file intact and no temporary behind.
    {
        Writer w;
        w.set("v", Value::u32(2));
        w.add_tensor("t", Type::F32, {4}, [](std::span<uint8_t>) { throw std::runtime_error("producer failed"); });
        EXPECT_THROW(w.write(path), std::runtime_error);
        EXPECT_FALSE(fs::exists(path + ".tmp"));
        EXPECT_EQ(File::open(path).get_u64("v"), 1u);
    }
    // A successful write replaces it.
    {
        Writer w;
        w.set("v", Value::u32(3));
        w.write(path);
        EXPECT_EQ(File::open(path).get_u64("v"), 3u);
        EXPECT_FALSE(fs::exists(path + ".tmp"));
    }
    // An unwritable destination is an Error.
    Writer w;
    const std::string msg = writer_error([&] { w.write(dir.file("no/such/dir/x.gguf")); });
    EXPECT_NE(msg.find("cannot create"), std::string::npos) << msg;
}

// ---------------------------------------------------------------------------
// The shared test files

std::vector<std::string> testdata_files() {
    std::vector<std::string> out;
    const fs::path root = KILN_TESTDATA_DIR;
    for (const char* sub : {"quant", "vocab"}) {
        std::error_code ec;
        for (const auto& e : fs::directory_iterator(root / sub, ec))
            if (e.path().extension() == ".gguf") out.push_back(e.path().string());
    }
    std::sort(out.begin(), out.end());
    return out;
}

TEST(GgufTestdata, EveryFileOpensWithAndWithoutMmap) {
    const auto files = testdata_files();
    ASSERT_GE(files.size(), 9u) << "test data missing under " << KILN_TESTDATA_DIR;
    for (const auto& path : files) {
        SCOPED_TRACE(path);
        const File mapped = File::open(path);
        const File read = File::open(path, OpenOptions{false});
        EXPECT_TRUE(mapped.is_mmapped());
        EXPECT_FALSE(read.is_mmapped());
        EXPECT_EQ(mapped.file_size(), fs::file_size(path));
        expect_same_file(mapped, read);
        const auto bytes = read_bytes(path);
        const File mem = File::from_memory(bytes.data(), bytes.size(), path);
        expect_same_file(mapped, mem);
        EXPECT_TRUE(mapped.version() == 2 || mapped.version() == 3);
        EXPECT_TRUE(mapped.get_string("general.architecture").has_value());
    }
}

TEST(GgufTestdata, KnownContents) {
    const std::string root = KILN_TESTDATA_DIR;
    const File v = File::open(root + "/vocab/ggml-vocab-llama-spm.gguf");
    EXPECT_EQ(v.version(), 3u);
    EXPECT_EQ(v.metadata().size(), 22u);
    EXPECT_TRUE(v.tensors().empty());
    // The file stops right after the header: the data section is empty.
    EXPECT_EQ(v.data_offset(), 723872u);
    EXPECT_EQ(v.file_size(), 723869u);
    const Array* tokens = v.get_array("tokenizer.ggml.tokens");
    ASSERT_NE(tokens, nullptr);
    EXPECT_EQ(tokens->elem_type, ValueType::STRING);
    ASSERT_EQ(tokens->items.size(), 32000u);
    EXPECT_EQ(tokens->items[1].as_string("t"), "<s>");
    EXPECT_EQ(v.get_array("tokenizer.ggml.scores")->items.size(), 32000u);
    EXPECT_EQ(v.get_bool("tokenizer.ggml.add_bos_token"), true);
    EXPECT_EQ(v.get_u64("llama.context_length"), 4096u);
    EXPECT_NEAR(*v.get_f64("llama.attention.layer_norm_rms_epsilon"), 1e-5, 1e-12);

    const File q = File::open(root + "/quant/quant-reference.gguf");
    EXPECT_EQ(q.data_offset(), 3584u);
    EXPECT_EQ(q.tensors().size(), 28u);
    const TensorInfo* input = q.find_tensor("input");
    ASSERT_NE(input, nullptr);
    EXPECT_EQ(input->type, Type::F32);
    EXPECT_EQ(input->shape, (std::vector<int64_t>{4096, 16}));
    EXPECT_EQ(input->n_bytes, 4096u * 16u * 4u);
    const TensorInfo* q4k = q.find_tensor("ref.q4_K");
    ASSERT_NE(q4k, nullptr);
    EXPECT_EQ(q4k->type, Type::Q4_K);
    EXPECT_EQ(q4k->n_bytes, 16u * 16u * 144u);
}

TEST(GgufTestdata, WriterReproducesAFile) {
    // Re-writing a real file's metadata and tensors through the Writer gives a
    // file the reader sees as identical.
    TempDir dir;
    const File q = File::open(std::string(KILN_TESTDATA_DIR) + "/quant/quant-reference.gguf");
    Writer w;
    for (const auto& kv : q.metadata()) w.set(kv.key, kv.value);
    for (const auto& t : q.tensors()) w.add_tensor(t.name, t.type, t.shape, q.tensor_data(t));
    w.write(dir.file("copy.gguf"));
    const File c = File::open(dir.file("copy.gguf"));
    expect_same_file(q, c);
    // The file came from the Python gguf writer; same layout rules, same bytes.
    EXPECT_TRUE(read_bytes(dir.file("copy.gguf")) == read_bytes(q.path()));
}

// ---------------------------------------------------------------------------
// Hostile input. Each case names the exact byte offset of the bad field.

// A small valid file: metadata with a string array and a nested array, an
// F32 tensor and a Q8_0 tensor.
RawGguf small_valid() {
    RawGguf r;
    r.header(2, 3).kv_str("general.architecture", "tiny");
    r.str("tokens").u32(9).u32(8).u64(2).str("a").str("bc");
    r.str("nested").u32(9).u32(9).u64(1).u32(4).u64(2).u32(1).u32(2);
    r.tensor("w", {4, 2}, 0, 0).tensor("q", {32}, 8, 32).pad(32);
    r.zeros(32 + 34).pad(32);
    return r;
}

TEST(GgufCorrupt, SmallValidFileParses) {
    const auto r = small_valid();
    const File f = File::from_memory(r.b.data(), r.b.size(), "t.gguf");
    EXPECT_EQ(f.tensors().size(), 2u);
    EXPECT_EQ(f.get_array("tokens")->items.size(), 2u);
    EXPECT_EQ(f.tensors()[1].n_bytes, 34u);
}

TEST(GgufCorrupt, EveryTruncationIsAPositionedError) {
    const auto full = small_valid().b;
    const File f = File::from_memory(full.data(), full.size());
    const auto& last = f.tensors().back();
    const uint64_t needed = f.data_offset() + last.offset + last.n_bytes;  // the padding after it is optional
    for (size_t n = 0; n < full.size(); ++n) {
        const std::vector<uint8_t> prefix(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(n));
        const std::string msg = parse_error(prefix);
        if (n < needed) {
            EXPECT_NE(msg.find("t.gguf: at byte "), std::string::npos) << "prefix " << n << ": '" << msg << "'";
        } else {
            EXPECT_EQ(msg, "") << "prefix " << n;
        }
    }
    EXPECT_NE(parse_error({}).find("t.gguf: at byte 0: unexpected end of file"), std::string::npos);
}

TEST(GgufCorrupt, HeaderFields) {
    auto r = small_valid();
    r.b[0] = 'X';
    expect_error(r.b, 0, "not a GGUF file");

    for (uint32_t version : {0u, 1u, 4u, 0x03000000u}) {
        r = small_valid();
        r.patch_u32(4, version);
        expect_error(r.b, 4, "GGUF version " + std::to_string(version) + " is not supported");
    }
    r = small_valid();
    r.patch_u32(4, 1);
    EXPECT_NE(parse_error(r.b).find("version 1 files"), std::string::npos);
    r.patch_u32(4, 0x03000000u);
    EXPECT_NE(parse_error(r.b).find("big-endian"), std::string::npos);

    r = small_valid();
    r.patch_u64(8, std::numeric_limits<uint64_t>::max());
    expect_error(r.b, 8, "tensor count 18446744073709551615 cannot fit");
    r = small_valid();
    r.patch_u64(16, uint64_t{1} << 40);
    expect_error(r.b, 16, "metadata key/value count 1099511627776 cannot fit");
    r = small_valid();
    r.patch_u64(8, 3);  // one more tensor info than there is: the data section is read as one
    EXPECT_NE(parse_error(r.b).find("t.gguf: at byte "), std::string::npos);
}

TEST(GgufCorrupt, MetadataFields) {
    // Huge key length.
    RawGguf r;
    r.header(0, 1).u64(uint64_t{1} << 62).zeros(16);
    expect_error(r.b, 24, "string length 4611686018427387904 exceeds");

    // Huge string value length.
    r = RawGguf();
    r.header(0, 1).str("k").u32(8);
    const uint64_t at = r.pos();
    r.u64(1000).zeros(8);
    expect_error(r.b, at, "metadata key 'k': string length 1000 exceeds the 8 bytes left");

    // Unknown value type.
    r = RawGguf();
    r.header(0, 1).str("k");
    r.u32(13).u32(0);
    expect_error(r.b, 33, "metadata key 'k': value type id 13 is unknown");

    // Unknown array element type.
    r = RawGguf();
    r.header(0, 1).str("k").u32(9);
    r.u32(0xFFFFFFFF).u64(0);
    expect_error(r.b, 37, "value type id 4294967295 is unknown");

    // Huge array count: checked against the bytes left before allocating.
    r = RawGguf();
    r.header(0, 1).str("k").u32(9).u32(8);
    r.u64(uint64_t{1} << 60).zeros(64);
    expect_error(r.b, 41, "array of 1152921504606846976 string values needs at least 8 bytes each");
    r = RawGguf();
    r.header(0, 1).str("k").u32(9).u32(9);
    r.u64(10).zeros(64);  // 10 nested arrays need 120 bytes
    expect_error(r.b, 41, "array of 10 array values");

    // A bool that is neither 0 nor 1.
    r = RawGguf();
    r.header(0, 1).str("k").u32(7).u8(2);
    expect_error(r.b, 37, "bool byte is 2");

    // Duplicate key.
    r = RawGguf();
    r.header(0, 2).kv_u32("k", 1);
    const uint64_t dup = r.pos();
    r.kv_u32("k", 2);
    expect_error(r.b, dup, "metadata key 'k' appears twice");

    // Arrays nested 9 deep.
    r = RawGguf();
    r.header(0, 1).str("k").u32(9);
    uint64_t ninth = 0;
    for (int i = 0; i < 9; ++i) {
        if (i == 8) ninth = r.pos();
        r.u32(9).u64(1);
    }
    r.u32(0).u64(0).zeros(16);
    EXPECT_NE(ninth, 0u);
    EXPECT_NE(parse_error(r.b).find("nested more than 8 deep"), std::string::npos) << parse_error(r.b);
}

TEST(GgufCorrupt, Alignment) {
    for (uint32_t a : {0u, 3u, 48u, 0x80000001u}) {
        RawGguf r;
        r.header(0, 1).str("general.alignment").u32(4);
        const uint64_t at = r.pos();
        r.u32(a);
        expect_error(r.b, at, "general.alignment is " + std::to_string(a) + ", not a non-zero power of two");
    }
    RawGguf r;
    r.header(0, 1).str("general.alignment");
    const uint64_t at = r.pos();
    r.u32(10).u64(64);
    expect_error(r.b, at, "general.alignment has type uint64, expected uint32");

    // A huge (valid) alignment pushes the data section past the end of the file.
    r = RawGguf();
    r.header(1, 1).kv_u32("general.alignment", 0x80000000u);
    const uint64_t off_at = r.pos() + 8 + 1 + 4 + 8 + 4;
    r.tensor("t", {1}, 0, 0).zeros(64);
    expect_error(r.b, off_at, "tensor 't': its 4 bytes at offset 0 run past the end of the data section");

    // Alignment 1 is a power of two: no padding at all.
    r = RawGguf();
    r.header(1, 1).kv_u32("general.alignment", 1).tensor("t", {1}, 0, 0).zeros(4);
    const File f = File::from_memory(r.b.data(), r.b.size());
    EXPECT_EQ(f.data_offset(), r.b.size() - 4);
}

// A file with one tensor info whose fields the test chooses.
struct OneTensor {
    RawGguf r;
    uint64_t name_at, dims_at, first_dim_at, type_at, offset_at;
    OneTensor(std::vector<uint64_t> dims, uint32_t type, uint64_t offset, size_t data_bytes = 64,
              uint32_t n_dims_override = 0) {
        r.header(1, 0);
        name_at = r.pos();
        r.str("blk.0.attn_q.weight");
        dims_at = r.pos();
        r.u32(n_dims_override ? n_dims_override : static_cast<uint32_t>(dims.size()));
        first_dim_at = r.pos();
        for (uint64_t d : dims) r.u64(d);
        type_at = r.pos();
        r.u32(type);
        offset_at = r.pos();
        r.u64(offset).pad(32).zeros(data_bytes);
    }
};

TEST(GgufCorrupt, TensorInfoFields) {
    {
        OneTensor t({32}, 99, 0);
        expect_error(t.r.b, t.type_at, "tensor 'blk.0.attn_q.weight': type id 99 is unknown");
        // Retired ids between known ones are unknown too.
        OneTensor t4({32}, 4, 0);
        expect_error(t4.r.b, t4.type_at, "type id 4 is unknown");
    }
    {
        OneTensor t({}, 0, 0);
        expect_error(t.r.b, t.dims_at, "n_dims is 0, expected 1 to 4");
        OneTensor t5({1, 1, 1, 1, 1}, 0, 0);
        expect_error(t5.r.b, t5.dims_at, "n_dims is 5");
        OneTensor huge({1}, 0, 0, 64, 0xFFFFFFFF);
        expect_error(huge.r.b, huge.dims_at, "n_dims is 4294967295");
    }
    {
        OneTensor t({4, 0}, 0, 0);
        expect_error(t.r.b, t.first_dim_at + 8, "dimension 1 is 0, expected at least 1");
        OneTensor n({static_cast<uint64_t>(-5)}, 0, 0);
        expect_error(n.r.b, n.first_dim_at, "dimension 0 is -5");
    }
    {
        OneTensor t({uint64_t{1} << 31, uint64_t{1} << 31, 4}, 0, 0);
        expect_error(t.r.b, t.first_dim_at + 16, "element count overflows 64 bits");
        // Elements and bytes fit 64 bits but not the file.
        OneTensor b({uint64_t{1} << 30, uint64_t{1} << 30, 2}, 26 /* i32 */, 0);
        expect_error(b.r.b, b.offset_at, "its 9223372036854775808 bytes at offset 0 run past the end");
        // Elements fit int64 but bytes do not fit uint64.
        OneTensor q({uint64_t{1} << 31, uint64_t{1} << 31}, 28 /* f64 */, 0);
        expect_error(q.r.b, q.dims_at, "byte size overflows 64 bits");
    }
    {
        OneTensor t({30}, 2 /* q4_0 */, 0);
        expect_error(t.r.b, t.dims_at, "row length 30 is not a multiple of the q4_0 block size 32");
    }
    {
        OneTensor t({4}, 0, 16);
        expect_error(t.r.b, t.offset_at, "offset 16 is not a multiple of the alignment 32");
        OneTensor o({4}, 0, 64);
        expect_error(o.r.b, o.offset_at, "its 16 bytes at offset 64 run past the end of the data section");
        OneTensor big({16}, 0, 32);  // 64 bytes at 32: 32 bytes over
        expect_error(big.r.b, big.offset_at, "run past the end");
        OneTensor wrap({4}, 0, std::numeric_limits<uint64_t>::max() - 31);
        expect_error(wrap.r.b, wrap.offset_at, "run past the end");
        OneTensor fits({16}, 0, 0);
        EXPECT_EQ(parse_error(fits.r.b), "");
    }
    {
        // Huge name length.
        RawGguf r;
        r.header(1, 0).u64(uint64_t{1} << 63).zeros(64);
        expect_error(r.b, 24, "the name of tensor #0: string length 9223372036854775808 exceeds");
    }
    {
        // Duplicate tensor names.
        RawGguf r;
        r.header(2, 0).tensor("t", {8}, 0, 0);
        const uint64_t at = r.pos();
        r.tensor("t", {8}, 0, 32).pad(32).zeros(64);
        expect_error(r.b, at, "tensor 't': the name appears twice");
    }
}

// Random corruption of a valid file must give a parse or an Error, nothing
// else (the fuzzer goes much further; this keeps a cheap check in ctest,
// where the sanitizer build runs it too).
TEST(GgufCorrupt, RandomMutations) {
    const auto base = small_valid().b;
    std::mt19937 rng(12345);
    for (int iter = 0; iter < 20000; ++iter) {
        auto b = base;
        const int edits = 1 + static_cast<int>(rng() % 4);
        for (int e = 0; e < edits; ++e) {
            const size_t at = rng() % b.size();
            switch (rng() % 4) {
                case 0: b[at] = static_cast<uint8_t>(rng()); break;
                case 1: b[at] ^= static_cast<uint8_t>(1u << (rng() % 8)); break;
                case 2: b[at] = 0xFF; break;
                default: b.resize(at); break;
            }
            if (b.empty()) break;
        }
        try {
            const File f = File::from_memory(b.data(), b.size(), "t.gguf");
            for (const auto& kv : f.metadata()) (void)kv.value.to_string();
            for (const auto& t : f.tensors()) (void)f.tensor_data(t);
        } catch (const Error& e) {
            ASSERT_NE(std::string(e.what()).find("t.gguf: at byte "), std::string::npos) << e.what();
        }
    }
}

TEST(GgufCorrupt, OpenErrorsNameThePath) {
    TempDir dir;
    try {
        (void)File::open(dir.file("missing.gguf"));
        FAIL();
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("missing.gguf: cannot open"), std::string::npos) << e.what();
    }
    for (bool mmap : {true, false}) {
        { std::ofstream(dir.file("empty.gguf"), std::ios::binary); }
        try {
            (void)File::open(dir.file("empty.gguf"), OpenOptions{mmap});
            FAIL();
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find("empty.gguf: at byte 0: unexpected end of file"), std::string::npos)
                << e.what();
        }
    }
    EXPECT_THROW((void)File::open(dir.path().string()), Error);  // a directory
}

}  // namespace
