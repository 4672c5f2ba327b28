#include "output.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace kiln_bench {

namespace {

constexpr double kMiB = 1024.0 * 1024.0;
constexpr double kGiB = 1024.0 * kMiB;

std::string fmt(const char* f, double v) {
    char buf[64];
    std::snprintf(buf, sizeof buf, f, v);
    return buf;
}

// A field's value: a number, a string, or absent (not measured / not applicable). An absent
// value keeps its field's kind, which the SQL table's column types come from.
struct Value {
    enum class Kind { Bool, Int, Real, Text } kind = Kind::Real;
    bool absent = false;
    long long i = 0;
    double d = 0;
    std::string s;
    static Value none(Kind k) { return {k, true, 0, 0, {}}; }
    static Value boolean(bool v) { return {Kind::Bool, false, v ? 1 : 0, 0, {}}; }
    static Value integer(long long v) { return {Kind::Int, false, v, 0, {}}; }
    static Value real(double v) { return std::isfinite(v) ? Value{Kind::Real, false, 0, v, {}} : none(Kind::Real); }
    static Value text(std::string v) { return {Kind::Text, false, 0, 0, std::move(v)}; }
};
const Value kNoReal = Value::none(Value::Kind::Real), kNoInt = Value::none(Value::Kind::Int), kNoText = Value::none(Value::Kind::Text);

const Bandwidth* bandwidth_for(const Report& rep, const Result& r) {
    const auto it = rep.bandwidth.find(r.test.placement());
    return it == rep.bandwidth.end() ? nullptr : &it->second;
}

const ComputePeak* peak_for(const Report& rep, const Result& r) {
    const auto it = rep.peak.find(r.test.placement());
    return it == rep.peak.end() ? nullptr : &it->second;
}

// The probe a prompt row is judged against (null: a generation row, no --peak, or no such probe).
const PeakProbe* row_peak(const Report& rep, const Result& r) {
    const ComputePeak* cp = peak_for(rep, r);
    if (!cp || r.test.kind != TestKind::Prompt) return nullptr;
    // Rows per product: the prompt cut into batches and micro-batches.
    const int64_t rows = std::min({r.test.n_prompt, r.test.n_batch > 0 ? r.test.n_batch : r.test.n_prompt, r.test.n_ubatch > 0 ? r.test.n_ubatch : r.test.n_prompt});
    const PeakProbe* p = prompt_peak(*cp, r.model.weight_class, r.test.precision, rows);
    return p && p->total_gops > 0 ? p : nullptr;
}

// What a generation row's "% bw" is judged against: its own probes (taken just before and after the
// test) where it has them, else the run's probe; 0: neither.
double row_bandwidth(const Report& rep, const Result& r) {
    if (r.row_bandwidth_gibs > 0) return r.row_bandwidth_gibs;
    const Bandwidth* bw = bandwidth_for(rep, r);
    return bw ? bw->best_gibs : 0;
}

// Every field of a row, in output order (CSV columns, JSON keys).
std::vector<std::pair<const char*, Value>> fields(const Report& rep, const Result& r) {
    const bool gen = r.test.decodes();
    const Bandwidth* bw = bandwidth_for(rep, r);
    const double row_bw = gen ? row_bandwidth(rep, r) : 0;
    const double wkv = static_cast<double>(r.model.size + r.kv_bytes);
    auto gen_only = [&](double v) { return gen ? Value::real(v) : kNoReal; };
    const bool ops = r.test.kind == TestKind::Prompt && r.model.matmul_weights > 0;
    const PeakProbe* pk = ops ? row_peak(rep, r) : nullptr;
    return {
        // llama-bench's fields first, in its order (scripts/compare-llama-bench.py joins rows of two
        // builds on them), with kiln's own among them where they belong. The GPU settings are what
        // this CPU engine does: nothing offloaded, no split, attention always flash-style.
        {"build_commit", Value::text(rep.build_commit)},
        {"build_number", Value::integer(rep.build_number)},
        {"cpu_info", Value::text(rep.cpu_info)},
        {"gpu_info", Value::text("")},
        {"backends", Value::text("CPU")},
        {"kernels", rep.kernels.empty() ? kNoText : Value::text(rep.kernels)},
        {"model_filename", Value::text(r.model.filename)},
        {"model_type", Value::text(r.model.type)},
        {"model_size", Value::integer(static_cast<long long>(r.model.size))},
        {"model_n_params", Value::integer(static_cast<long long>(r.model.n_params))},
        {"n_batch", Value::integer(r.test.n_batch)},
        {"n_ubatch", Value::integer(r.test.n_ubatch)},
        {"n_threads", Value::integer(r.n_threads)},
        {"cpu_mask", Value::text(r.test.cpu_mask)},
        {"cpu_strict", Value::boolean(r.test.cpu_strict)},
        {"poll", Value::integer(r.test.poll)},
        {"type_k", Value::text(r.test.type_k)},
        {"type_v", Value::text(r.test.type_v)},
        {"n_gpu_layers", Value::integer(0)},
        {"split_mode", Value::text("none")},
        {"main_gpu", Value::integer(0)},
        {"no_kv_offload", Value::boolean(false)},
        {"flash_attn", Value::boolean(true)},
        {"tensor_split", Value::text("0.00")},
        {"tensor_buft_overrides", Value::text("none")},
        {"use_mmap", Value::boolean(r.test.use_mmap)},
        {"embeddings", Value::boolean(false)},
        {"no_op_offload", Value::integer(0)},
        {"precision", Value::text(r.test.precision)},
        {"n_ctx", Value::integer(r.n_ctx)},
        {"n_prompt", Value::integer(r.test.n_prompt)},
        {"n_gen", Value::integer(r.test.n_gen)},
        {"n_depth", Value::integer(r.test.n_depth)},
        {"n_parallel", Value::integer(r.test.n_parallel)},
        {"test", Value::text(r.test.name())},
        {"test_time", Value::text(r.test_time)},
        {"repetitions", Value::integer(static_cast<long long>(r.samples_ns.size()))},
        {"avg_ns", Value::integer(std::llround(r.avg_ns()))},
        {"stddev_ns", Value::integer(std::llround(r.stddev_ns()))},
        {"avg_ts", Value::real(r.avg_ts())},
        {"stddev_ts", Value::real(r.stddev_ts())},
        {"avg_ts_per_seq", Value::real(r.avg_ts_per_seq())},
        {"weight_bytes_per_token", gen_only(r.weight_bytes_per_token)},
        {"kv_bytes_per_token", gen_only(r.kv_bytes_per_token)},
        {"bytes_per_token", gen_only(r.bytes_per_token())},
        {"effective_gibs", gen_only(r.effective_gibs())},
        {"bandwidth_gibs", bw ? Value::real(bw->best_gibs) : kNoReal},
        {"bandwidth_median_gibs", bw ? Value::real(bw->median_gibs) : kNoReal},
        {"bandwidth_plain_gibs", bw ? Value::real(bw->plain_best_gibs) : kNoReal},
        {"row_bandwidth_gibs", gen && r.row_bandwidth_gibs > 0 ? Value::real(r.row_bandwidth_gibs) : kNoReal},
        {"bandwidth_pct", row_bw > 0 ? Value::real(100.0 * r.effective_gibs() / row_bw) : kNoReal},
        {"matmul_ops_per_token", r.model.matmul_weights ? Value::real(r.model.matmul_ops_per_token()) : kNoReal},
        {"ops_per_token", ops ? Value::real(r.ops_per_token) : kNoReal},
        {"gops", ops ? Value::real(r.gops()) : kNoReal},
        {"peak_kind", pk ? Value::text(peak_kind_name(pk->kind)) : kNoText},
        {"peak_instruction", pk ? Value::text(pk->instruction) : kNoText},
        {"peak_gops", pk ? Value::real(pk->total_gops) : kNoReal},
        {"pct_peak", pk ? Value::real(100.0 * r.gops() / pk->total_gops) : kNoReal},
        {"kv_bytes", Value::integer(static_cast<long long>(r.kv_bytes))},
        {"compute_bytes", Value::integer(static_cast<long long>(r.compute_bytes))},
        {"peak_rss_bytes", r.peak_rss ? Value::integer(static_cast<long long>(r.peak_rss)) : kNoInt},
        {"peak_rss_over_weights_kv", r.peak_rss && wkv > 0 ? Value::real(static_cast<double>(r.peak_rss) / wkv) : kNoReal},
        {"peak_rss_per_test", Value::boolean(r.peak_rss_per_test)},
    };
}

// ---- JSON ----

std::string json_string(const std::string& s) {
    std::string o = "\"";
    for (unsigned char c : s) {
        switch (c) {
            case '"': o += "\\\""; break;
            case '\\': o += "\\\\"; break;
            case '\n': o += "\\n"; break;
            case '\r': o += "\\r"; break;
            case '\t': o += "\\t"; break;
            default:
                if (c < 0x20) {
                    char buf[8];
                    std::snprintf(buf, sizeof buf, "\\u%04x", c);
                    o += buf;
                } else {
                    o += static_cast<char>(c);
                }
        }
    }
    return o + "\"";
}

std::string json_value(const Value& v) {
    if (v.absent) return "null";
    switch (v.kind) {
        case Value::Kind::Bool: return v.i ? "true" : "false";
        case Value::Kind::Int: return std::to_string(v.i);
        case Value::Kind::Real: return fmt("%.17g", v.d);
        case Value::Kind::Text: return json_string(v.s);
    }
    return "null";
}

std::string json_array(const std::vector<double>& v) {
    std::string o = "[";
    for (size_t i = 0; i < v.size(); ++i) o += (i ? ", " : "") + fmt("%.17g", v[i]);
    return o + "]";
}

// The whole probe of the row's thread count (every instruction, per thread and per run).
std::string json_peak(const ComputePeak* cp) {
    if (!cp) return "null";
    std::string o = "{\"threads\": " + std::to_string(cp->threads.threads) + ", \"cpu_mask\": " + json_string(cp->threads.cpu_mask) +
                    ", \"cpu_strict\": " + (cp->threads.cpu_strict ? "true" : "false") + ", \"seconds\": " + fmt("%.17g", cp->seconds) +
                    ", \"repetitions\": " + std::to_string(cp->repetitions) + ", \"probes\": {";
    for (size_t i = 0; i < cp->probes.size(); ++i) {
        const PeakProbe& p = cp->probes[i];
        o += std::string(i ? ", " : "") + "\"" + peak_kind_name(p.kind) + "\": {\"instruction\": " + json_string(p.instruction) +
             ", \"ops_per_instruction\": " + fmt("%.17g", p.ops_per_instruction) + ", \"gops\": " + fmt("%.17g", p.total_gops) +
             ", \"thread_gops\": " + json_array(p.thread_gops) + ", \"runs_gops\": " + json_array(p.runs_gops) + "}";
    }
    return o + "}}";
}

// One row's JSON object: every field, the compute peak, the samples and the profile; pretty:
// one key per line (the JSON array), else all on one line (JSON Lines).
std::string json_row(const Report& rep, const Result& r, bool pretty) {
    const char* nl = pretty ? "\n    " : " ";
    std::string o = pretty ? "  {" : "{";
    auto key = [&](const char* name, const std::string& value) {
        o += (o.size() > 3 ? std::string(",") : std::string()) + nl + "\"" + name + "\": " + value;
    };
    for (const auto& [name, v] : fields(rep, r)) key(name, json_value(v));
    std::vector<double> ns = r.samples_ns;
    for (double& x : ns) x = std::round(x);
    key("compute_peak", json_peak(peak_for(rep, r)));
    key("samples_ns", json_array(ns));
    key("samples_ts", json_array(r.samples_ts()));
    if (!r.profile.empty()) {
        key("profile_tokens", std::to_string(r.profile_tokens));
        std::string ops = "[";
        for (size_t i = 0; i < r.profile.size(); ++i) {
            const OpTimeRow& p = r.profile[i];
            char buf[256];
            std::snprintf(buf, sizeof buf, "\"calls\": %lld, \"op_ms\": %.6f, \"op_max_ms\": %.6f, \"wait_ms\": %.6f, \"weight_bytes\": %llu}",
                          static_cast<long long>(p.calls), p.op_ms, p.op_max_ms, p.wait_ms, static_cast<unsigned long long>(p.weight_bytes));
            ops += std::string(i ? "," : "") + (pretty ? "\n      " : " ") + "{\"op\": " + json_string(p.name) + ", " + buf;
        }
        key("profile", ops + (pretty ? "\n    ]" : "]"));
    }
    return o + (pretty ? "\n  }" : "}");
}

void print_json(FILE* out, const Report& rep) {
    std::fprintf(out, "[");
    for (size_t k = 0; k < rep.results.size(); ++k) std::fprintf(out, "%s\n%s", k ? "," : "", json_row(rep, rep.results[k], true).c_str());
    std::fprintf(out, "%s]\n", rep.results.empty() ? "" : "\n");
}

// JSON Lines (llama-bench's jsonl): one object per test and line.
void print_jsonl(FILE* out, const Report& rep) {
    for (const Result& r : rep.results) std::fprintf(out, "%s\n", json_row(rep, r, false).c_str());
}

// ---- CSV ----

// s between quotes q, the quotes inside doubled (CSV fields, SQL string literals).
std::string quoted(const std::string& s, char q) {
    std::string o(1, q);
    for (char c : s) {
        o += c;
        if (c == q) o += c;
    }
    return o + q;
}

std::string csv_value(const Value& v) {
    if (v.absent) return "";
    switch (v.kind) {
        case Value::Kind::Bool: return v.i ? "true" : "false";
        case Value::Kind::Int: return std::to_string(v.i);
        case Value::Kind::Real: return fmt("%.10g", v.d);
        case Value::Kind::Text: return quoted(v.s, '"');  // RFC 4180: every text field quoted
    }
    return "";
}

void print_csv(FILE* out, const Report& rep) {
    // The header comes from a row's field names; with no results there is still a header.
    const Result empty{};
    const auto names = fields(rep, rep.results.empty() ? empty : rep.results.front());
    for (size_t i = 0; i < names.size(); ++i) std::fprintf(out, "%s%s", i ? "," : "", names[i].first);
    std::fprintf(out, "\n");
    for (const Result& r : rep.results) {
        const auto f = fields(rep, r);
        for (size_t i = 0; i < f.size(); ++i) std::fprintf(out, "%s%s", i ? "," : "", csv_value(f[i].second).c_str());
        std::fprintf(out, "\n");
    }
}

// ---- SQL ----
// As llama-bench's sql output: a CREATE TABLE for table `llama_bench` (if it does not exist yet), then an
// INSERT per row, e.g. `kiln-bench ... -o sql | sqlite3 results.sqlite`. Column types follow the
// fields (TEXT, INTEGER, REAL; booleans INTEGER 0 / 1); absent values are NULL.

const char* sql_type(Value::Kind k) {
    switch (k) {
        case Value::Kind::Bool:
        case Value::Kind::Int: return "INTEGER";
        case Value::Kind::Real: return "REAL";
        case Value::Kind::Text: return "TEXT";
    }
    return "TEXT";
}

std::string sql_value(const Value& v) {
    if (v.absent) return "NULL";
    switch (v.kind) {
        case Value::Kind::Bool:
        case Value::Kind::Int: return std::to_string(v.i);
        case Value::Kind::Real: return fmt("%.17g", v.d);
        case Value::Kind::Text: return quoted(v.s, '\'');  // a string literal
    }
    return "NULL";
}

void print_sql(FILE* out, const Report& rep) {
    const Result empty{};
    const auto cols = fields(rep, rep.results.empty() ? empty : rep.results.front());
    std::fprintf(out, "CREATE TABLE IF NOT EXISTS llama_bench (\n");
    for (size_t i = 0; i < cols.size(); ++i) std::fprintf(out, "  %s %s%s\n", cols[i].first, sql_type(cols[i].second.kind), i + 1 < cols.size() ? "," : "");
    std::fprintf(out, ");\n\n");
    std::string names;
    for (size_t i = 0; i < cols.size(); ++i) names += std::string(i ? ", " : "") + cols[i].first;
    for (const Result& r : rep.results) {
        const auto f = fields(rep, r);
        std::string values;
        for (size_t i = 0; i < f.size(); ++i) values += (i ? ", " : "") + sql_value(f[i].second);
        std::fprintf(out, "INSERT INTO llama_bench (%s) VALUES (%s);\n", names.c_str(), values.c_str());
    }
}

// ---- Markdown ----

struct Column {
    std::string title;
    bool right;  // numbers are right-aligned, as in llama-bench
    std::string (*cell)(const Report&, const Result&);
};

std::string size_text(uint64_t bytes) {
    const double b = static_cast<double>(bytes);
    return b >= kGiB ? fmt("%.2f GiB", b / kGiB) : fmt("%.2f MiB", b / kMiB);
}

std::string params_text(uint64_t n) {
    const double p = static_cast<double>(n);
    return p >= 1e9 ? fmt("%.2f B", p / 1e9) : fmt("%.2f M", p / 1e6);
}

std::string pm(double avg, double sd) { return fmt("%.2f", avg) + " ± " + fmt("%.2f", sd); }

struct Head {
    std::string title;
    bool right;  // right-aligned (numbers)
};

// A markdown table: cols' titles and alignment (Column or Head), then the rows of cells.
template <class Col>
void print_table(FILE* out, const std::vector<Col>& cols, const std::vector<std::vector<std::string>>& cells) {
    // Widths in characters, not bytes ("±" is two bytes in UTF-8).
    auto width = [](const std::string& s) {
        size_t n = 0;
        for (unsigned char c : s) n += (c & 0xC0) != 0x80;
        return n;
    };
    std::vector<size_t> w(cols.size());
    for (size_t i = 0; i < cols.size(); ++i) {
        w[i] = std::max<size_t>(width(cols[i].title), 3);
        for (const auto& row : cells) w[i] = std::max(w[i], width(row[i]));
    }
    auto pad = [&](const std::string& s, size_t i) {
        const std::string fill(w[i] - width(s), ' ');
        return cols[i].right ? fill + s : s + fill;
    };
    std::string line = "|";
    for (size_t i = 0; i < cols.size(); ++i) line += " " + pad(cols[i].title, i) + " |";
    std::fprintf(out, "%s\n|", line.c_str());
    for (size_t i = 0; i < cols.size(); ++i) {
        std::fprintf(out, " %s%s |", std::string(w[i] - 1, '-').c_str(), cols[i].right ? ":" : "-");
    }
    std::fprintf(out, "\n");
    for (const auto& row : cells) {
        line = "|";
        for (size_t i = 0; i < cols.size(); ++i) line += " " + pad(row[i], i) + " |";
        std::fprintf(out, "%s\n", line.c_str());
    }
}

// --profile: one table per test, per timed token (a prompt's tokens, each sequence's tokens in batched tests).
void print_profiles(FILE* out, const Report& rep) {
    for (const Result& r : rep.results) {
        if (r.profile.empty() || r.profile_tokens <= 0) continue;
        const double tokens = static_cast<double>(r.profile_tokens);
        double total = 0;
        for (const OpTimeRow& o : r.profile) total += o.op_ms + o.wait_ms;
        std::fprintf(out, "\nprofile: %s, %s, %d threads: time per token by op (mean over threads; wait: at the barrier after the op)\n\n",
                     r.model.type.c_str(), r.test.name().c_str(), r.n_threads);
        std::vector<std::vector<std::string>> cells;
        for (const OpTimeRow& o : r.profile) {
            const double us = 1e3 * o.op_ms / tokens;
            cells.push_back({o.name, fmt("%.2f", static_cast<double>(o.calls) / tokens), fmt("%.1f", us),
                             fmt("%.1f", 1e3 * o.op_max_ms / tokens), fmt("%.1f", 1e3 * o.wait_ms / tokens),
                             fmt("%.1f", total > 0 ? 100.0 * (o.op_ms + o.wait_ms) / total : 0.0),
                             o.weight_bytes && o.op_max_ms > 0 ? fmt("%.2f", static_cast<double>(o.weight_bytes) / kGiB / (o.op_max_ms * 1e-3))
                                                               : std::string()});
        }
        cells.push_back({"total", "", fmt("%.1f", 1e3 * total / tokens), "", "", "100.0", ""});
        print_table<Head>(out,
                    {{"op", false}, {"calls/token", true}, {"us/token", true}, {"max thread us", true}, {"wait us", true}, {"% time", true},
                     {"weights GiB/s", true}},
                    cells);
    }
}

void print_markdown(FILE* out, const Report& rep) {
    for (const auto& [placement, bw] : rep.bandwidth) {
        std::fprintf(out,
                     "bandwidth: %s, %s loads, %zu passes of each of %d read patterns over %zu MiB: best %.2f GiB/s (%s), "
                     "median %.2f GiB/s; plain loads best %.2f GiB/s\n\n",
                     placement.describe().c_str(), bw.loads, bw.passes_gibs.size(), bw.n_patterns, bw.bytes >> 20, bw.best_gibs, bw.pattern, bw.median_gibs,
                     bw.plain_best_gibs);
    }
    for (const auto& [placement, cp] : rep.peak) {
        std::fprintf(out, "peak: %s, best of %d x %.2f s: %s\n\n", placement.describe().c_str(), cp.repetitions, cp.seconds,
                     describe_compute_peak(cp).c_str());
    }
    const auto& rs = rep.results;
    auto any = [&](auto pred) { return std::any_of(rs.begin(), rs.end(), pred); };
    // A setting gets a column when it varies or differs from llama-bench's default, as llama-bench does.
    auto shown = [&](auto get, auto def) {
        return any([&](const Result& r) { return get(r) != def || get(r) != get(rs.front()); });
    };
    std::vector<Column> cols = {
        {"model", false, [](const Report&, const Result& r) { return r.model.type; }},
        {"size", true, [](const Report&, const Result& r) { return size_text(r.model.size); }},
        {"params", true, [](const Report&, const Result& r) { return params_text(r.model.n_params); }},
        {"threads", true, [](const Report&, const Result& r) { return std::to_string(r.n_threads); }},
    };
    if (!rs.empty()) {
        if (shown([](const Result& r) { return r.test.cpu_mask; }, std::string("0x0")))
            cols.push_back({"cpu_mask", true, [](const Report&, const Result& r) { return r.test.cpu_mask; }});
        if (shown([](const Result& r) { return r.test.cpu_strict; }, false))
            cols.push_back({"cpu_strict", true, [](const Report&, const Result& r) { return std::string(r.test.cpu_strict ? "1" : "0"); }});
        if (shown([](const Result& r) { return r.test.poll; }, 50))
            cols.push_back({"poll", true, [](const Report&, const Result& r) { return std::to_string(r.test.poll); }});
        if (shown([](const Result& r) { return r.test.n_batch; }, 2048))
            cols.push_back({"n_batch", true, [](const Report&, const Result& r) { return std::to_string(r.test.n_batch); }});
        if (shown([](const Result& r) { return r.test.n_ubatch; }, 512))
            cols.push_back({"n_ubatch", true, [](const Report&, const Result& r) { return std::to_string(r.test.n_ubatch); }});
        if (shown([](const Result& r) { return r.test.type_k; }, std::string("f16")))
            cols.push_back({"type_k", false, [](const Report&, const Result& r) { return r.test.type_k; }});
        if (shown([](const Result& r) { return r.test.type_v; }, std::string("f16")))
            cols.push_back({"type_v", false, [](const Report&, const Result& r) { return r.test.type_v; }});
        if (shown([](const Result& r) { return r.test.precision; }, std::string("auto")))
            cols.push_back({"precision", false, [](const Report&, const Result& r) { return r.test.precision; }});
        if (shown([](const Result& r) { return r.test.use_mmap; }, true))
            cols.push_back({"mmap", true, [](const Report&, const Result& r) { return std::string(r.test.use_mmap ? "1" : "0"); }});
    }
    cols.push_back({"test", true, [](const Report&, const Result& r) { return r.test.name(); }});
    cols.push_back({"t/s", true, [](const Report&, const Result& r) { return pm(r.avg_ts(), r.stddev_ts()); }});
    const bool gen = any([](const Result& r) { return r.test.decodes(); });
    if (any([](const Result& r) { return r.test.n_parallel > 1; })) {
        cols.push_back({"t/s per seq", true, [](const Report&, const Result& r) {
                            return r.test.kind == TestKind::Parallel ? fmt("%.2f", r.avg_ts_per_seq()) : std::string();
                        }});
    }
    if (gen) {
        cols.push_back({"MiB/token", true, [](const Report&, const Result& r) {
                            return r.test.decodes() ? fmt("%.1f", r.bytes_per_token() / kMiB) : std::string();
                        }});
        cols.push_back({"GiB/s", true, [](const Report&, const Result& r) {
                            return r.test.decodes() ? fmt("%.2f", r.effective_gibs()) : std::string();
                        }});
        if (any([](const Result& r) { return r.row_bandwidth_gibs > 0; })) {
            cols.push_back({"probe GiB/s", true, [](const Report&, const Result& r) {
                                return !r.test.decodes() || r.row_bandwidth_gibs <= 0 ? std::string()
                                                                                                     : fmt("%.2f", r.row_bandwidth_gibs);
                            }});
        }
        if (!rep.bandwidth.empty()) {
            cols.push_back({"% bw", true, [](const Report& p, const Result& r) {
                                const double bw = row_bandwidth(p, r);
                                if (!r.test.decodes() || bw <= 0) return std::string();
                                return fmt("%.1f", 100.0 * r.effective_gibs() / bw);
                            }});
        }
    }
    if (!rep.peak.empty() && any([](const Result& r) { return r.test.kind == TestKind::Prompt; })) {
        // Prompt rows only: generation is bound by memory, not compute (see "% bw").
        cols.push_back({"GOPS", true, [](const Report&, const Result& r) {
                            return r.test.kind == TestKind::Prompt && r.model.matmul_weights ? fmt("%.1f", r.gops()) : std::string();
                        }});
        cols.push_back({"% peak", true, [](const Report& p, const Result& r) {
                            const PeakProbe* pk = row_peak(p, r);
                            if (!pk || !r.model.matmul_weights) return std::string();
                            return fmt("%.1f", 100.0 * r.gops() / pk->total_gops) + " " + peak_kind_name(pk->kind);
                        }});
    }
    if (rep.mem_columns) {
        cols.push_back({"KV MiB", true, [](const Report&, const Result& r) { return fmt("%.1f", static_cast<double>(r.kv_bytes) / kMiB); }});
        cols.push_back({"compute MiB", true, [](const Report&, const Result& r) {
                            return fmt("%.1f", static_cast<double>(r.compute_bytes) / kMiB);
                        }});
        cols.push_back({"peak RSS MiB", true, [](const Report&, const Result& r) {
                            return r.peak_rss ? fmt("%.1f", static_cast<double>(r.peak_rss) / kMiB) : std::string("?");
                        }});
        cols.push_back({"RSS/(W+KV)", true, [](const Report&, const Result& r) {
                            const double wkv = static_cast<double>(r.model.size + r.kv_bytes);
                            return r.peak_rss && wkv > 0 ? fmt("%.3f", static_cast<double>(r.peak_rss) / wkv) : std::string("?");
                        }});
    }

    std::vector<std::vector<std::string>> cells;
    for (const Result& r : rs) {
        std::vector<std::string> row;
        for (const Column& c : cols) row.push_back(c.cell(rep, r));
        cells.push_back(std::move(row));
    }
    print_table(out, cols, cells);
    // As llama-bench's closing "build: <commit> (<number>)" line, with the machine.
    std::fprintf(out, "\nbuild: %s, CPU: %s, kernels: %s\n", rep.build_commit.c_str(), rep.cpu_info.c_str(),
                 rep.kernels.empty() ? "none" : rep.kernels.c_str());
    print_profiles(out, rep);
}

}  // namespace

void print_report(FILE* out, OutputFormat format, const Report& report) {
    switch (format) {
        case OutputFormat::Markdown: print_markdown(out, report); break;
        case OutputFormat::Csv: print_csv(out, report); break;
        case OutputFormat::Json: print_json(out, report); break;
        case OutputFormat::Jsonl: print_jsonl(out, report); break;
        case OutputFormat::Sql: print_sql(out, report); break;
        case OutputFormat::None: break;
    }
    std::fflush(out);
}

}  // namespace kiln_bench
