#include "model/imatrix.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <span>
#include <stdexcept>
#include <system_error>

#include "core/tensor.h"
#include "model/gguf.h"

namespace kiln {
namespace {

constexpr std::string_view kSum2 = ".in_sum2";
constexpr std::string_view kSum = ".in_sum";
constexpr std::string_view kCounts = ".counts";

[[noreturn]] void fail(const std::string& path, const std::string& what) {
    throw std::runtime_error(path + ": imatrix: " + what);
}

bool ends_with(std::string_view s, std::string_view suffix) {
    return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

std::vector<float> read_f32(const gguf::File& f, const gguf::TensorInfo& t) {
    if (t.type != Type::F32) fail(f.path(), "tensor '" + t.name + "' is " + std::string(type_name(t.type)) + ", expected f32");
    const auto bytes = f.tensor_data(t);
    std::vector<float> out(static_cast<size_t>(t.n_elements()));
    std::memcpy(out.data(), bytes.data(), out.size() * sizeof(float));
    return out;
}

Imatrix load_gguf(const std::string& path) {
    const gguf::File f = gguf::File::open(path);
    Imatrix im;
    if (const auto type = f.get_string("general.type"); type && *type != "imatrix")
        fail(path, "general.type is '" + *type + "', expected 'imatrix'");
    if (const gguf::Array* ds = f.get_array("imatrix.datasets")) {
        for (const gguf::Value& v : ds->items) im.datasets.push_back(v.as_string("imatrix.datasets"));
    }
    im.chunk_count = static_cast<uint32_t>(f.get_u64("imatrix.chunk_count").value_or(0));
    im.chunk_size = static_cast<uint32_t>(f.get_u64("imatrix.chunk_size").value_or(0));
    for (const gguf::TensorInfo& t : f.tensors()) {
        if (!ends_with(t.name, kSum2)) continue;
        const std::string name = t.name.substr(0, t.name.size() - kSum2.size());
        const gguf::TensorInfo* counts = f.find_tensor(name + std::string(kCounts));
        if (!counts) fail(path, "tensor '" + t.name + "' has no matching '" + name + std::string(kCounts) + "'");
        const int64_t n_per_row = t.shape[0];
        const int64_t n_mat = t.n_elements() / n_per_row;
        if (counts->n_elements() != n_mat)
            fail(path, "'" + counts->name + "' has " + std::to_string(counts->n_elements()) + " values for " + std::to_string(n_mat) +
                           " matrices");
        ImatrixEntry e;
        e.n_per_row = n_per_row;
        for (float v : read_f32(f, t)) e.sum2.push_back(v);
        for (float v : read_f32(f, *counts)) e.counts.push_back(v);
        if (const gguf::TensorInfo* s = f.find_tensor(name + std::string(kSum)); s && s->n_elements() == t.n_elements()) {
            for (float v : read_f32(f, *s)) e.sum.push_back(v);
        }
        im.entries.emplace(name, std::move(e));
    }
    if (im.entries.empty()) fail(path, "no '*.in_sum2' tensors");
    return im;
}

class LegacyReader {
public:
    LegacyReader(const std::string& path, std::vector<char> data) : path_(path), data_(std::move(data)) {}
    bool at_end() const { return pos_ == data_.size(); }
    int32_t i32(const char* what) {
        int32_t v;
        bytes(&v, sizeof v, what);
        return v;
    }
    void bytes(void* dst, size_t n, const char* what) {
        if (data_.size() - pos_ < n) fail(path_, std::string("truncated at byte ") + std::to_string(pos_) + " reading " + what);
        std::memcpy(dst, data_.data() + pos_, n);
        pos_ += n;
    }

private:
    std::string path_;
    std::vector<char> data_;
    size_t pos_ = 0;
};

Imatrix load_legacy(const std::string& path, std::vector<char> data) {
    LegacyReader r(path, std::move(data));
    Imatrix im;
    const int32_t n_entries = r.i32("the entry count");
    if (n_entries < 1) fail(path, "legacy file with " + std::to_string(n_entries) + " entries");
    for (int32_t i = 0; i < n_entries; ++i) {
        const int32_t len = r.i32("a name length");
        if (len < 1 || len > 4096) fail(path, "entry " + std::to_string(i) + ": name length " + std::to_string(len));
        std::string name(static_cast<size_t>(len), '\0');
        r.bytes(name.data(), name.size(), "a name");
        const int32_t ncall = r.i32("ncall");
        const int32_t nval = r.i32("nval");
        if (nval < 1) fail(path, "entry '" + name + "': " + std::to_string(nval) + " values");
        std::vector<float> v(static_cast<size_t>(nval));
        r.bytes(v.data(), v.size() * sizeof(float), "values");
        // Stored values are mean * ncall: keep them as sums over ncall "rows".
        ImatrixEntry e;
        e.n_per_row = nval;
        e.sum2.assign(v.begin(), v.end());
        e.counts.assign(1, ncall > 0 ? ncall : 1);
        im.entries.emplace(std::move(name), std::move(e));
    }
    if (!r.at_end()) {
        im.chunk_count = static_cast<uint32_t>(r.i32("the chunk count"));
        if (!r.at_end()) {
            const int32_t len = r.i32("the dataset name length");
            if (len < 0 || len > 1 << 20) fail(path, "dataset name length " + std::to_string(len));
            std::string ds(static_cast<size_t>(len), '\0');
            r.bytes(ds.data(), ds.size(), "the dataset name");
            im.datasets.push_back(std::move(ds));
        }
    }
    return im;
}

}  // namespace

Imatrix Imatrix::load(const std::string& path) {
    std::ifstream in(std::filesystem::path(path), std::ios::binary);
    if (!in) fail(path, "cannot open: " + std::error_code(errno, std::generic_category()).message());
    std::vector<char> data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    uint32_t magic = 0;
    if (data.size() >= 4) std::memcpy(&magic, data.data(), 4);
    if (magic == gguf::kMagic) return load_gguf(path);
    return load_legacy(path, std::move(data));
}

void Imatrix::save_gguf(const std::string& path) const {
    gguf::Writer w;
    w.set("general.type", gguf::Value::str("imatrix"));
    std::vector<gguf::Value> ds;
    for (const std::string& d : datasets) ds.push_back(gguf::Value::str(d));
    w.set("imatrix.datasets", gguf::Value::array(gguf::ValueType::STRING, std::move(ds)));
    w.set("imatrix.chunk_count", gguf::Value::u32(chunk_count));
    w.set("imatrix.chunk_size", gguf::Value::u32(chunk_size));
    auto add = [&w](const std::string& name, const std::vector<double>& v, std::vector<int64_t> shape) {
        std::vector<uint8_t> bytes(v.size() * sizeof(float));
        for (size_t i = 0; i < v.size(); ++i) {
            const float f = static_cast<float>(v[i]);
            std::memcpy(bytes.data() + i * sizeof(float), &f, sizeof f);
        }
        w.add_tensor(name, Type::F32, std::move(shape), std::span<const uint8_t>(bytes));
    };
    for (const auto& [name, e] : entries) {  // std::map: sorted names, as llama.cpp writes them
        if (e.counts.empty()) continue;
        add(name + std::string(kSum2), e.sum2, {e.n_per_row, e.n_mat()});
        add(name + std::string(kCounts), e.counts, {1, e.n_mat()});
        if (!e.sum.empty()) add(name + std::string(kSum), e.sum, {e.n_per_row, e.n_mat()});
    }
    w.write(path);
}

void Imatrix::save_legacy(const std::string& path) const {
    const std::string tmp = path + ".tmp";
    {
        std::ofstream out(std::filesystem::path(tmp), std::ios::binary | std::ios::trunc);
        if (!out) fail(tmp, "cannot create: " + std::error_code(errno, std::generic_category()).message());
        auto put = [&out](const void* p, size_t n) { out.write(static_cast<const char*>(p), static_cast<std::streamsize>(n)); };
        auto put_i32 = [&put](int32_t v) { put(&v, sizeof v); };
        put_i32(static_cast<int32_t>(entries.size()));
        const double cs = chunk_size > 0 ? chunk_size : 1;
        for (const auto& [name, e] : entries) {
            put_i32(static_cast<int32_t>(name.size()));
            put(name.data(), name.size());
            double max_count = 0;
            for (double c : e.counts) max_count = std::max(max_count, c);
            const auto ncall = static_cast<int32_t>(std::max(1.0, std::ceil(max_count / cs)));
            put_i32(ncall);
            put_i32(static_cast<int32_t>(e.sum2.size()));
            for (size_t i = 0; i < e.sum2.size(); ++i) {
                const double c = e.counts[i / static_cast<size_t>(e.n_per_row)];
                const auto v = static_cast<float>(c > 0 ? e.sum2[i] / c * ncall : 1.0 * ncall);
                put(&v, sizeof v);
            }
        }
        put_i32(static_cast<int32_t>(chunk_count));
        const std::string ds = datasets.empty() ? std::string() : datasets.back();
        put_i32(static_cast<int32_t>(ds.size()));
        put(ds.data(), ds.size());
        if (!out.flush()) fail(tmp, "write failed");
    }
    std::error_code ec;
    std::filesystem::rename(tmp, path, ec);
    if (ec) {
        std::filesystem::remove(tmp, ec);
        fail(path, "cannot rename the temporary file into place");
    }
}

std::vector<float> Imatrix::importance(const std::string& name) const {
    const auto it = entries.find(name);
    if (it == entries.end()) return {};
    const ImatrixEntry& e = it->second;
    std::vector<float> out(e.sum2.size(), 1.0f);
    for (size_t i = 0; i < e.sum2.size(); ++i) {
        const double c = e.counts[i / static_cast<size_t>(e.n_per_row)];
        if (c > 0) out[i] = static_cast<float>(e.sum2[i] / c);
    }
    return out;
}

void Imatrix::accumulate(const Tensor& node) {
    const Tensor& w = *node.src[0];
    const Tensor& x = *node.src[1];
    if (x.type != Type::F32) throw std::runtime_error("imatrix: activations of '" + w.name + "' are not F32");
    const int64_t n = x.ne[0];
    ImatrixEntry& e = entries[w.name];
    if (e.counts.empty()) {
        e.n_per_row = n;
        e.sum2.assign(static_cast<size_t>(n), 0.0);
        e.sum.assign(static_cast<size_t>(n), 0.0);
        e.counts.assign(1, 0.0);
    } else if (e.n_per_row != n || e.n_mat() != 1) {
        throw std::runtime_error("imatrix: '" + w.name + "': activation rows of " + std::to_string(n) + " after " +
                                 std::to_string(e.n_per_row));
    }
    // x: [n, ne1, ne2, ne3], rows may be strided (views).
    for (int64_t i3 = 0; i3 < x.ne[3]; ++i3) {
        for (int64_t i2 = 0; i2 < x.ne[2]; ++i2) {
            for (int64_t i1 = 0; i1 < x.ne[1]; ++i1) {
                const auto* row = reinterpret_cast<const float*>(x.row(i1, i2, i3));
                for (int64_t j = 0; j < n; ++j) {
                    const double v = row[j];
                    e.sum[static_cast<size_t>(j)] += v;
                    e.sum2[static_cast<size_t>(j)] += v * v;
                }
            }
        }
    }
    e.counts[0] += static_cast<double>(x.nrows());
}

}  // namespace kiln
