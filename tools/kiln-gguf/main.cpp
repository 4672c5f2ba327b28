// kiln-gguf: inspect GGUF files and extract tensors as float32.
//
//   kiln-gguf info FILE [--no-mmap] [--full]
//   kiln-gguf dequant FILE TENSOR OUT
//
// The `info` output is meant for people first, but keeps a fixed shape so
// scripts (and kiln's cross-check against the Python gguf package) can parse
// it: header lines "name: value", metadata lines "key: type = value" with
// strings JSON-escaped, and a whitespace-separated tensor table.
#include <algorithm>
#include <bit>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <exception>
#include <fstream>
#include <map>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "core/quant.h"
#include "core/types.h"
#include "model/gguf.h"
#include "../common/utf8_args.h"

namespace {

using kiln::gguf::Value;
using kiln::gguf::ValueType;

constexpr const char* kUsage =
    "usage: kiln-gguf <command> [options]\n"
    "\n"
    "commands:\n"
    "  info FILE [--no-mmap] [--full]   print the header, metadata and tensor table\n"
    "      --no-mmap   read the file into memory instead of mapping it\n"
    "      --full      print every array item and whole strings (no summarising)\n"
    "  dequant FILE TENSOR OUT          write TENSOR as raw little-endian float32 to OUT\n"
    "  help                             show this text\n";

// Errors the user caused on the command line (as opposed to file errors).
struct UsageError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

std::string human_bytes(uint64_t n) {
    static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double x = static_cast<double>(n);
    size_t u = 0;
    while (x >= 1024.0 && u + 1 < std::size(kUnits)) {
        x /= 1024.0;
        ++u;
    }
    char buf[32];
    if (u == 0) std::snprintf(buf, sizeof buf, "%" PRIu64 " B", n);
    else std::snprintf(buf, sizeof buf, "%.2f %s", x, kUnits[u]);
    return buf;
}

std::string human_count(uint64_t n) {
    char buf[32];
    if (n >= 1000000000ULL) std::snprintf(buf, sizeof buf, "%.2f B", static_cast<double>(n) / 1e9);
    else if (n >= 1000000ULL) std::snprintf(buf, sizeof buf, "%.2f M", static_cast<double>(n) / 1e6);
    else if (n >= 1000ULL) std::snprintf(buf, sizeof buf, "%.2f K", static_cast<double>(n) / 1e3);
    else std::snprintf(buf, sizeof buf, "%" PRIu64, n);
    return buf;
}

// "array[string,32000]" for arrays, the plain type name otherwise.
std::string type_label(const Value& v) {
    if (v.type != ValueType::ARRAY) return std::string(kiln::gguf::value_type_name(v.type));
    const auto& a = v.as_array("value");
    return "array[" + std::string(kiln::gguf::value_type_name(a.elem_type)) + "," + std::to_string(a.items.size()) + "]";
}

// Long strings (chat templates run to kilobytes) are cut at a UTF-8 boundary
// unless --full; the cut is marked outside the quotes so the quoted part still
// parses as a JSON string.
std::string render_value(const Value& v, bool full) {
    constexpr size_t kMaxItems = 8;
    constexpr size_t kMaxStringBytes = 120;
    if (full) return v.to_string(static_cast<size_t>(-1));
    if (v.type == ValueType::STRING) {
        const std::string& s = v.as_string("value");
        if (s.size() > kMaxStringBytes) {
            size_t cut = kMaxStringBytes;
            while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;
            return Value::str(s.substr(0, cut)).to_string() + "... (" + std::to_string(s.size()) + " bytes)";
        }
    }
    return v.to_string(kMaxItems);
}

// Keys and tensor names are plain identifiers in practice; anything with
// whitespace, control bytes or a ':' would break the line format, so quote it.
std::string render_name(const std::string& s) {
    bool plain = !s.empty();
    for (unsigned char c : s)
        if (c <= 0x20 || c == 0x7F || c == ':' || c == '"') plain = false;
    return plain ? s : Value::str(s).to_string();
}

std::string shape_text(const std::vector<int64_t>& shape) {
    std::string s;
    for (size_t i = 0; i < shape.size(); ++i) {
        if (i) s += 'x';
        s += std::to_string(shape[i]);
    }
    return s;
}

int cmd_info(const std::vector<std::string>& args) {
    std::string path;
    kiln::gguf::OpenOptions opts;
    bool full = false;
    for (const std::string& a : args) {
        if (a == "--no-mmap") opts.use_mmap = false;
        else if (a == "--full") full = true;
        else if (a.starts_with("-")) throw UsageError("info: unknown option '" + a + "'");
        else if (path.empty()) path = a;
        else throw UsageError("info: unexpected argument '" + a + "'");
    }
    if (path.empty()) throw UsageError("info: missing FILE");

    const auto f = kiln::gguf::File::open(path, opts);
    const auto& kv = f.metadata();
    const auto& tensors = f.tensors();

    std::printf("file:          %s\n", path.c_str());
    std::printf("version:       %u\n", f.version());
    std::printf("file size:     %" PRIu64 " bytes (%s)\n", f.file_size(), human_bytes(f.file_size()).c_str());
    std::printf("alignment:     %u\n", f.alignment());
    std::printf("metadata keys: %zu\n", kv.size());
    std::printf("tensors:       %zu\n", tensors.size());
    std::printf("data offset:   %" PRIu64 "\n", f.data_offset());
    std::printf("loaded by:     %s\n", f.is_mmapped() ? "mmap" : "read");

    std::printf("\nmetadata:\n");
    for (const auto& e : kv)
        std::printf("  %s: %s = %s\n", render_name(e.key).c_str(), type_label(e.value).c_str(),
                    render_value(e.value, full).c_str());

    // Column widths from the data, so long names do not break the table.
    size_t name_w = 4, shape_w = 5;
    for (const auto& t : tensors) {
        name_w = std::max(name_w, render_name(t.name).size());
        shape_w = std::max(shape_w, shape_text(t.shape).size());
    }
    std::printf("\ntensors (offsets relative to the data section at byte %" PRIu64 "):\n", f.data_offset());
    if (tensors.empty()) std::printf("  (none)\n");
    else
        std::printf("  %5s  %-*s  %-7s  %-*s  %14s  %14s\n", "#", static_cast<int>(name_w), "name", "type",
                    static_cast<int>(shape_w), "shape", "bytes", "offset");
    uint64_t total_bytes = 0, total_params = 0;
    struct PerType {
        size_t count = 0;
        uint64_t bytes = 0;
        uint64_t params = 0;
    };
    std::map<std::string, PerType> per_type;
    for (size_t i = 0; i < tensors.size(); ++i) {
        const auto& t = tensors[i];
        const std::string tname(kiln::type_name(t.type));
        std::printf("  %5zu  %-*s  %-7s  %-*s  %14" PRIu64 "  %14" PRIu64 "\n", i, static_cast<int>(name_w),
                    render_name(t.name).c_str(), tname.c_str(), static_cast<int>(shape_w), shape_text(t.shape).c_str(),
                    t.n_bytes, t.offset);
        const auto n = static_cast<uint64_t>(t.n_elements());
        total_bytes += t.n_bytes;
        total_params += n;
        auto& pt = per_type[tname];
        ++pt.count;
        pt.bytes += t.n_bytes;
        pt.params += n;
    }

    std::printf("\ntotals:\n");
    std::printf("  tensors:         %zu\n", tensors.size());
    std::printf("  tensor bytes:    %" PRIu64 " (%s)\n", total_bytes, human_bytes(total_bytes).c_str());
    std::printf("  parameters:      %" PRIu64 " (%s)\n", total_params, human_count(total_params).c_str());
    if (total_params)
        std::printf("  bits per weight: %.4f\n", 8.0 * static_cast<double>(total_bytes) / static_cast<double>(total_params));
    else
        std::printf("  bits per weight: n/a\n");
    for (const auto& [name, pt] : per_type)
        std::printf("  type %-9s %5zu tensors, %14" PRIu64 " bytes, %.4f bits per weight\n", (name + ":").c_str(),
                    pt.count, pt.bytes, 8.0 * static_cast<double>(pt.bytes) / static_cast<double>(pt.params));
    return 0;
}

int cmd_dequant(const std::vector<std::string>& args) {
    std::vector<std::string> pos;
    for (const std::string& a : args) {
        if (a.starts_with("-")) throw UsageError("dequant: unknown option '" + a + "'");
        pos.push_back(a);
    }
    if (pos.size() != 3) throw UsageError("dequant: expected FILE TENSOR OUT");
    const std::string& path = pos[0];
    const std::string& name = pos[1];
    const std::string& out_path = pos[2];

    const auto f = kiln::gguf::File::open(path);
    const auto* t = f.find_tensor(name);
    if (!t) throw std::runtime_error(path + ": no tensor named '" + name + "'");
    if (!kiln::has_reference(t->type))
        throw std::runtime_error(path + ": tensor '" + name + "' has type " + std::string(kiln::type_name(t->type)) +
                                 ", which kiln cannot dequantize (no reference implementation for it yet)");

    const auto data = f.tensor_data(*t);
    const int64_t ne0 = t->shape[0];
    const int64_t rows = t->n_elements() / ne0;
    const size_t in_row = kiln::row_size(t->type, ne0);

    std::ofstream out(kiln_tools::utf8_path(out_path), std::ios::binary | std::ios::trunc);
    if (!out) throw std::runtime_error(out_path + ": cannot create: " + std::strerror(errno));
    try {
        std::vector<float> row(static_cast<size_t>(ne0));
        std::vector<uint32_t> le(std::endian::native == std::endian::little ? 0 : row.size());
        for (int64_t r = 0; r < rows; ++r) {
            kiln::dequantize_row(t->type, data.data() + static_cast<size_t>(r) * in_row, row.data(), ne0);
            const char* bytes = reinterpret_cast<const char*>(row.data());
            if constexpr (std::endian::native != std::endian::little) {
                // The output format is little-endian whatever the host is.
                for (size_t i = 0; i < row.size(); ++i) {
                    const uint32_t b = std::bit_cast<uint32_t>(row[i]);
                    le[i] = ((b & 0xFF) << 24) | ((b & 0xFF00) << 8) | ((b >> 8) & 0xFF00) | (b >> 24);
                }
                bytes = reinterpret_cast<const char*>(le.data());
            }
            out.write(bytes, static_cast<std::streamsize>(row.size() * sizeof(float)));
            if (!out) throw std::runtime_error(out_path + ": write failed: " + std::strerror(errno));
        }
        out.close();
        if (out.fail()) throw std::runtime_error(out_path + ": write failed: " + std::strerror(errno));
    } catch (...) {
        // Leave no truncated output behind that could pass for a result.
        out.close();
        std::remove(out_path.c_str());
        throw;
    }
    std::fprintf(stderr, "kiln-gguf: wrote %" PRId64 " floats (%s, %s) of '%s' to %s\n", t->n_elements(),
                 std::string(kiln::type_name(t->type)).c_str(), shape_text(t->shape).c_str(), name.c_str(),
                 out_path.c_str());
    return 0;
}

int run(int argc, char** argv) {
    if (argc < 2) throw UsageError("missing command");
    const std::vector<std::string> all = kiln_tools::utf8_args(argc, argv);  // UTF-8 on Windows too
    const std::string cmd = all[1];
    const std::vector<std::string> args(all.begin() + 2, all.end());
    for (const std::string& a : args) {
        if (a == "-h" || a == "--help") {
            std::fputs(kUsage, stdout);
            return 0;
        }
    }
    if (cmd == "info") return cmd_info(args);
    if (cmd == "dequant") return cmd_dequant(args);
    if (cmd == "help" || cmd == "-h" || cmd == "--help") {
        std::fputs(kUsage, stdout);
        return 0;
    }
    throw UsageError("unknown command '" + cmd + "'");
}

}  // namespace

int main(int argc, char** argv) {
    try {
        return run(argc, argv);
    } catch (const UsageError& e) {
        std::fprintf(stderr, "kiln-gguf: %s\n\n%s", e.what(), kUsage);
        return 1;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "kiln-gguf: %s\n", e.what());
        return 1;
    } catch (...) {
        std::fprintf(stderr, "kiln-gguf: unknown error\n");
        return 1;
    }
}
