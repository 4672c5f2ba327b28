"""kiln-bench on tiny synthetic models: every output format parses and carries its
fields, depth, batched and bandwidth modes run, and bad input is a clear error.

No timing is asserted (the machine is shared). The bytes a generated token reads
are checked against a count made here from the GGUF file with gguf-py (tensor
sizes, the sliding-window layers), independent of the engine's own accounting;
the t/s statistics against the per-repetition samples the tool reports; the
matmul operations per token (--peak's GOPS) against the file's 2-D tensors.
"""
import csv
import functools
import glob
import io
import json
import os
import re
import shutil
import sqlite3
import statistics
import subprocess

import gguf
import pytest

# llama-bench's fields (its JSON / CSV / SQL rows), which scripts/compare-llama-bench.py reads and
# joins two builds' rows on; every kiln-bench row carries them, with kiln's own beside them.
LLAMA_BENCH_FIELDS = [
    "build_commit", "build_number", "cpu_info", "gpu_info", "backends", "model_filename", "model_type", "model_size",
    "model_n_params", "n_batch", "n_ubatch", "n_threads", "cpu_mask", "cpu_strict", "poll", "type_k", "type_v",
    "n_gpu_layers", "split_mode", "main_gpu", "no_kv_offload", "flash_attn", "tensor_split", "tensor_buft_overrides",
    "use_mmap", "embeddings", "no_op_offload", "n_prompt", "n_gen", "n_depth", "test_time", "avg_ns", "stddev_ns",
    "avg_ts", "stddev_ts",
]
# The ones compare-llama-bench.py joins on (rows of two builds match when all are equal; NULL never is).
LLAMA_BENCH_KEYS = [
    "cpu_info", "gpu_info", "backends", "n_gpu_layers", "tensor_buft_overrides", "model_filename", "model_type",
    "n_batch", "n_ubatch", "embeddings", "cpu_mask", "cpu_strict", "poll", "n_threads", "type_k", "type_v",
    "use_mmap", "no_kv_offload", "split_mode", "main_gpu", "tensor_split", "flash_attn", "n_prompt", "n_gen", "n_depth",
]
FIELDS = set(LLAMA_BENCH_FIELDS) | {
    "kernels", "precision", "n_ctx", "n_parallel", "test", "repetitions",
    "avg_ts_per_seq", "weight_bytes_per_token", "kv_bytes_per_token",
    "bytes_per_token", "effective_gibs", "bandwidth_gibs", "bandwidth_median_gibs", "bandwidth_plain_gibs", "row_bandwidth_gibs", "bandwidth_pct",
    "kv_bytes",
    "compute_bytes", "peak_rss_bytes", "peak_rss_over_weights_kv", "peak_rss_per_test", "matmul_ops_per_token",
    "ops_per_token", "gops", "peak_kind", "peak_instruction", "peak_gops", "pct_peak",
}
JSON_ONLY = {"samples_ns", "samples_ts", "compute_peak"}


def bench(tool, *args, timeout=120):
    # One thread, one repetition, no warm-up: fast and gentle on a shared machine.
    res = subprocess.run([tool("kiln-bench"), "-t", "1", "-r", "1", *[str(a) for a in args]], capture_output=True,
                         text=True, timeout=timeout)
    assert "terminate called" not in res.stderr and "Sanitizer" not in res.stderr, res.stderr
    return res


def bench_json(tool, *args):
    res = bench(tool, "-o", "json", *args)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


class GgufFacts:
    """What a generated token must read, counted from the file itself."""

    def __init__(self, path):
        r = gguf.GGUFReader(path)
        arch = r.fields["general.architecture"].contents()

        def get(key, default=None):
            f = r.fields.get(f"{arch}.{key}")
            return default if f is None else f.contents()

        self.n_layer = get("block_count")
        n_head = get("attention.head_count")
        n_head_kv = get("attention.head_count_kv", n_head)
        head_dim = get("attention.key_length", get("embedding_length") // n_head)
        head_dim_v = get("attention.value_length", head_dim)
        self.window = get("attention.sliding_window", 0) if arch == "gemma3" else 0
        pattern = get("attention.sliding_window_pattern", 6)
        self.swa = [self.window > 0 and il % pattern < pattern - 1 for il in range(self.n_layer)]
        self.kv_row_f16 = 2 * n_head_kv * (head_dim + head_dim_v)  # K + V row of one cell, f16
        tensors = {t.name: t for t in r.tensors}
        emb = tensors["token_embd.weight"]
        tied = "output.weight" not in tensors
        self.weight_bytes = sum(int(t.n_bytes) for n, t in tensors.items() if n != "token_embd.weight")
        # The embedding lookup reads one row; a tied output projection reads the whole table.
        self.weight_bytes += int(emb.n_bytes) if tied else int(emb.n_bytes) // int(emb.shape[1])
        self.size = sum(int(t.n_bytes) for t in r.tensors)
        # Matrix-multiplied weights: the 2-D tensors, the embedding only as the tied output projection.
        self.tied = tied
        self.matmul_weights = sum(int(t.n_elements) for n, t in tensors.items()
                                  if len(t.shape) == 2 and (n != "token_embd.weight" or tied))
        self.output_weights = int((emb if tied else tensors["output.weight"]).n_elements)
        # Every layer's projections of one weight type (kiln-synth's models): q, k, v (gate, up)
        # then run as one product each on the CPU.
        self.uniform_type = len({t.tensor_type for n, t in tensors.items()
                                 if n.startswith("blk.") and len(t.shape) == 2}) == 1

    @staticmethod
    @functools.lru_cache(maxsize=None)
    def of(path):
        # gguf-py parses the 32000-token vocabulary in Python: read each file once.
        return GgufFacts(path)

    def kv_bytes(self, attended):
        return sum(self.kv_row_f16 * (min(attended, self.window) if swa else attended) for swa in self.swa)

    def gen_bytes_per_token(self, depth, n_gen, n_parallel=1):
        kv = statistics.fmean(self.kv_bytes(depth + i + 1) for i in range(n_gen))
        return self.weight_bytes / n_parallel + kv


@pytest.fixture(scope="module")
def models(synth_models):
    return {"llama": synth_models["llama-q4_K"], "gemma": synth_models["gemma3-q4_0"]}


def test_markdown_table(tool, models):
    res = bench(tool, "-m", models["llama"], "-p", "8,16", "-n", "4", "--mem")
    assert res.returncode == 0, res.stderr
    lines = [ln for ln in res.stdout.splitlines() if ln.startswith("|")]
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    for col in ("model", "size", "params", "threads", "test", "t/s", "MiB/token", "GiB/s", "KV MiB", "peak RSS MiB",
                "RSS/(W+KV)"):
        assert col in header, header
    assert re.fullmatch(r"\|( -+:? \|)+", lines[1]), lines[1]
    rows = [dict(zip(header, (c.strip() for c in ln.strip("|").split("|")))) for ln in lines[2:]]
    assert [r["test"] for r in rows] == ["pp8", "pp16", "tg4"]
    for r in rows:
        assert re.fullmatch(r"[0-9.]+ ± [0-9.]+", r["t/s"]), r
        assert r["threads"] == "1"
        assert r["model"].startswith("llama ")
    assert rows[0]["GiB/s"] == "" and rows[2]["GiB/s"] != ""
    # Progress goes to stderr, never into the table.
    assert "pp8" in res.stderr and "kiln-bench" not in res.stdout


def test_csv_rows_and_fields(tool, models):
    res = bench(tool, "-m", models["llama"], "-p", "8", "-n", "4", "-o", "csv")
    assert res.returncode == 0, res.stderr
    rows = list(csv.DictReader(io.StringIO(res.stdout)))
    assert set(rows[0].keys()) == FIELDS
    assert [r["test"] for r in rows] == ["pp8", "tg4"]
    assert rows[0]["bytes_per_token"] == "" and float(rows[1]["bytes_per_token"]) > 0
    assert int(rows[0]["n_prompt"]) == 8 and int(rows[1]["n_gen"]) == 4


def test_json_fields_statistics_and_bytes(tool, models):
    facts = GgufFacts.of(models["llama"])
    rows = bench_json(tool, "-m", models["llama"], "-p", "8", "-n", "4", "-r", "3", "-d", "0,16")
    assert [r["test"] for r in rows] == ["pp8", "tg4", "pp8 @ d16", "tg4 @ d16"]
    for r in rows:
        assert FIELDS | JSON_ONLY == set(r)
        assert r["repetitions"] == 3 and len(r["samples_ts"]) == 3
        n_tok = r["n_prompt"] or r["n_gen"]
        assert r["samples_ts"] == pytest.approx([1e9 * n_tok / ns for ns in r["samples_ns"]], rel=1e-6)
        assert r["avg_ts"] == pytest.approx(statistics.fmean(r["samples_ts"]), rel=1e-9)
        assert r["stddev_ts"] == pytest.approx(statistics.stdev(r["samples_ts"]), rel=1e-6, abs=1e-9)
        assert r["n_ctx"] >= r["n_depth"] + r["n_prompt"] + r["n_gen"]
        assert r["model_size"] == facts.size
        # Weights stay resident (mmap, pages touched at load), so the peak covers them.
        assert r["peak_rss_bytes"] > r["model_size"]
        assert r["kv_bytes"] >= facts.n_layer * facts.kv_row_f16 * (r["n_depth"] + r["n_prompt"] + r["n_gen"])
    for r in rows:
        if r["n_gen"]:
            assert r["bytes_per_token"] == pytest.approx(facts.gen_bytes_per_token(r["n_depth"], r["n_gen"]), rel=1e-9)
            assert r["effective_gibs"] == pytest.approx(r["bytes_per_token"] * r["avg_ts"] / 2**30, rel=1e-9)
        else:
            assert r["bytes_per_token"] is None and r["effective_gibs"] is None


def test_sliding_window_kv_bytes(tool, models):
    # gemma3 with a window of 8: at depth 32 the five local layers read 8 cells, the global one all.
    facts = GgufFacts.of(models["gemma"])
    assert any(facts.swa) and not all(facts.swa)
    (row,) = bench_json(tool, "-m", models["gemma"], "-p", "0", "-n", "3", "-d", "32")
    assert row["test"] == "tg3 @ d32"
    assert row["kv_bytes_per_token"] == pytest.approx(facts.gen_bytes_per_token(32, 3) - facts.weight_bytes, rel=1e-9)
    assert row["bytes_per_token"] == pytest.approx(facts.gen_bytes_per_token(32, 3), rel=1e-9)


def test_parallel_rows(tool, models):
    facts = GgufFacts.of(models["llama"])
    rows = bench_json(tool, "-m", models["llama"], "-p", "0", "-n", "3", "--parallel", "1,4", "--parallel-prompt", "5",
                      "-d", "0,8")
    par = [r for r in rows if r["n_parallel"] > 1 or r["test"].startswith("tg3 x")]
    assert [r["test"] for r in par] == ["tg3 x1", "tg3 x4", "tg3 x1 @ d8", "tg3 x4 @ d8"]
    for r in par:
        p = r["n_parallel"]
        assert r["avg_ts_per_seq"] == pytest.approx(r["avg_ts"] / p, rel=1e-9)
        assert r["samples_ts"][0] == pytest.approx(1e9 * 3 * p / r["samples_ns"][0], rel=1e-6)
        assert r["n_ctx"] >= p * (r["n_depth"] + 5 + 3)
        # Each step reads the weights once for all sequences, and each sequence its own K/V.
        assert r["bytes_per_token"] == pytest.approx(facts.gen_bytes_per_token(r["n_depth"] + 5, 3, p), rel=1e-9)


def test_jsonl_and_stderr_output(tool, models):
    # -o jsonl: one object per line with the JSON array's keys; -oe: the results again on stderr.
    res = bench(tool, "-m", models["llama"], "-p", "4", "-n", "2", "-o", "jsonl", "-oe", "json", "--profile")
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    rows = [json.loads(ln) for ln in lines]
    assert [r["test"] for r in rows] == ["pp4", "tg2"]
    for r in rows:
        assert FIELDS | JSON_ONLY | {"profile", "profile_tokens"} == set(r)
    err_json = json.loads(res.stderr[res.stderr.index("\n[") + 1:])
    assert [r["test"] for r in err_json] == ["pp4", "tg2"]
    assert [r["samples_ns"] for r in err_json] == [r["samples_ns"] for r in rows]
    assert [r["profile"] for r in err_json] == [r["profile"] for r in rows]


def test_sql_output_loads_into_sqlite(tool, models, tmp_path):
    # -o sql (llama-bench's): a CREATE TABLE and an INSERT per row, read here by SQLite and checked
    # against the same run's JSON on stderr. The file name has a quote, which the literals escape.
    model = tmp_path / "it's.gguf"
    shutil.copy(models["llama"], model)
    res = bench(tool, "-m", model, "-p", "8", "-n", "4", "-d", "0,16", "-o", "sql", "-oe", "json")
    assert res.returncode == 0, res.stderr
    err_json = json.loads(res.stderr[res.stderr.index("\n[") + 1:])
    db = sqlite3.connect(":memory:")
    db.executescript(res.stdout)
    db.executescript(res.stdout)  # CREATE TABLE IF NOT EXISTS: a second run appends
    types = {name: decl for _, name, decl, *_ in db.execute("PRAGMA table_info(llama_bench)")}
    assert set(types) == FIELDS
    assert types["model_filename"] == "TEXT" and types["n_prompt"] == "INTEGER" and types["avg_ts"] == "REAL"
    assert types["peak_rss_per_test"] == "INTEGER" and types["peak_kind"] == "TEXT" and types["bytes_per_token"] == "REAL"
    db.row_factory = sqlite3.Row
    rows = [dict(r) for r in db.execute("SELECT * FROM llama_bench ORDER BY rowid")]
    assert len(rows) == 2 * len(err_json) == 8
    for got, want in zip(rows, err_json + err_json):
        for name in FIELDS:
            w = want[name]
            if isinstance(w, bool):
                w = int(w)
            assert got[name] == (pytest.approx(w, rel=1e-15) if isinstance(w, float) else w), name
    assert rows[0]["model_filename"] == "it's.gguf" and rows[0]["bytes_per_token"] is None
    assert [r["test"] for r in rows[:4]] == ["pp8", "tg4", "pp8 @ d16", "tg4 @ d16"]


def test_rows_join_as_compare_llama_bench_reads_them(tool, models):
    # llama.cpp's scripts/compare-llama-bench.py: rows of a baseline and a compared build in one
    # SQLite table `llama_bench`, joined on its key fields, averaged per (n_prompt, n_gen, n_depth).
    # Two kiln-bench runs stand in for the two builds (the query's build_commit filters left out).
    db = sqlite3.connect(":memory:")
    for _ in range(2):
        res = bench(tool, "-m", models["llama"], "-p", "8", "-n", "4", "-d", "0,16", "-o", "sql")
        assert res.returncode == 0, res.stderr
        db.executescript(res.stdout)
    cols = [name for _, name, *_ in db.execute("PRAGMA table_info(llama_bench)")]
    # llama-bench's fields come in its order (kiln's own in between).
    assert [c for c in cols if c in LLAMA_BENCH_FIELDS] == LLAMA_BENCH_FIELDS
    equal = " AND ".join(f"tb.{k} = tc.{k}" for k in LLAMA_BENCH_KEYS) + " AND tb.rowid < tc.rowid"
    rows = db.execute(f"SELECT tb.n_prompt, tb.n_gen, tb.n_depth, AVG(tb.avg_ts), AVG(tc.avg_ts) FROM llama_bench tb "
                      f"JOIN llama_bench tc ON {equal} GROUP BY tb.n_gen, tb.n_prompt, tb.n_depth "
                      f"ORDER BY tb.n_gen, tb.n_prompt, tb.n_depth").fetchall()
    assert [r[:3] for r in rows] == [(8, 0, 0), (8, 0, 16), (0, 4, 0), (0, 4, 16)], rows
    assert all(r[3] > 0 and r[4] > 0 for r in rows)
    (row,) = db.execute("SELECT gpu_info, n_gpu_layers, split_mode, main_gpu, no_kv_offload, flash_attn, tensor_split, "
                        "tensor_buft_overrides, use_mmap, embeddings, no_op_offload FROM llama_bench LIMIT 1").fetchall()
    # What this CPU engine does: nothing offloaded or split, attention always flash-style, the file mapped.
    assert row == ("", 0, "none", 0, 0, 1, "0.00", "none", 1, 0, 0), row


def test_mmap_list_loads_the_model_for_each_value(tool, models):
    # llama-bench's -mmp takes a list: every test runs with the model mapped and read, the model
    # loaded once per value (outermost), the same logits-free timings otherwise.
    res = bench(tool, "-m", models["llama"], "-p", "4", "-n", "2", "-mmp", "0,1", "-o", "json")
    assert res.returncode == 0, res.stderr
    rows = json.loads(res.stdout)
    assert [(r["use_mmap"], r["test"]) for r in rows] == [(False, "pp4"), (False, "tg2"), (True, "pp4"), (True, "tg2")]
    assert res.stderr.count("(read, not mapped)") == 1 and res.stderr.count("M params") == 2, res.stderr
    md = bench(tool, "-m", models["llama"], "-p", "4", "-n", "0", "-mmp", "0").stdout
    header = [c.strip() for c in md.splitlines()[0].strip("|").split("|")]
    assert "mmap" in header and md.splitlines()[2].split("|")[header.index("mmap") + 1].strip() == "0", md


def cpuinfo_model_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "model name":
                    return value.strip()
    except OSError:
        pass
    return None


def test_build_and_machine_fields(tool, models):
    # Every row names the build and the machine: the commit is one of this repository's (checked
    # with git, which built it), the CPU the name Linux gives it, the kernels the ones KILN_CPU picks.
    rows = bench_json(tool, "-m", models["llama"], "-p", "4", "-n", "0")
    r = rows[0]
    assert r["backends"] == "CPU" and r["kernels"] in {"scalar", "avx2", "avx512", "neon"}
    commit = r["build_commit"]
    assert commit == "unknown" or re.fullmatch(r"[0-9a-f]{7,40}", commit), commit
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    if commit != "unknown" and shutil.which("git") and os.path.isdir(os.path.join(repo, ".git")):
        assert subprocess.run(["git", "-C", repo, "cat-file", "-e", f"{commit}^{{commit}}"]).returncode == 0, commit
        count = subprocess.run(["git", "-C", repo, "rev-list", "--count", commit], capture_output=True, text=True)
        if count.returncode == 0:  # a shallow clone counts what it has, as the build did
            assert r["build_number"] == int(count.stdout), (r["build_number"], count.stdout)
    else:
        assert r["build_number"] >= 0
    name = cpuinfo_model_name()
    assert r["cpu_info"] and r["cpu_info"] != "unknown"
    if name:  # x86 Linux: CPUID's brand string is what /proc/cpuinfo shows
        assert " ".join(r["cpu_info"].split()).startswith(" ".join(name.split())), (r["cpu_info"], name)
    res = bench(tool, "-m", models["llama"], "-p", "4", "-n", "0")
    assert res.returncode == 0, res.stderr
    assert f"build: {commit}, CPU: {r['cpu_info']}, kernels: {r['kernels']}" in res.stdout.splitlines()
    scalar = subprocess.run([tool("kiln-bench"), "-t", "1", "-r", "1", "-m", models["llama"], "-p", "4", "-n", "0", "-o", "json"],
                            capture_output=True, text=True, timeout=120, env={**os.environ, "KILN_CPU": "scalar"})
    assert scalar.returncode == 0, scalar.stderr
    assert json.loads(scalar.stdout)[0]["kernels"] == "scalar"
    assert f"kernels: scalar | AVX2 = " in scalar.stderr
    bogus = subprocess.run([tool("kiln-bench"), "-t", "1", "-r", "1", "-m", models["llama"], "-p", "4", "-n", "0"],
                           capture_output=True, text=True, timeout=120, env={**os.environ, "KILN_CPU": "bogus"})
    assert bogus.returncode != 0
    assert "kernels: none (KILN_CPU=bogus: unknown instruction set" in bogus.stderr, bogus.stderr


def test_llama_bench_flags_without_effect_are_accepted(tool, models):
    # Scripts written for llama-bench pass these; each is validated and changes nothing here.
    res = bench(tool, "-m", models["llama"], "-p", "4", "-n", "0", "-fa", "1", "-nkvo", "0", "-sm", "none", "-mg", "0",
                "-ts", "1", "-embd", "0", "--numa", "distribute", "--prio", "0", "--progress", "--delay", "0.01",
                "-ncmoe", "0,4", "-dev", "auto", "-dio", "0", "-ot", r"blk\.[0-9]+\.ffn_.*=CPU;attn=cpu;", "-nopo", "1",
                "--no-host", "0", "-o", "json")
    assert res.returncode == 0, res.stderr
    assert [r["test"] for r in json.loads(res.stdout)] == ["pp4"]


def test_output_none_and_device_list(tool, models):
    # -o none prints no results on stdout (with -oe they go to stderr only); --list-devices needs no model.
    res = bench(tool, "-m", models["llama"], "-p", "4", "-n", "0", "-o", "none", "-oe", "json")
    assert res.returncode == 0, res.stderr
    assert res.stdout == ""
    assert [r["test"] for r in json.loads(res.stderr[res.stderr.index("\n[") + 1:])] == ["pp4"]
    res = subprocess.run([tool("kiln-bench"), "--list-devices"], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("Available devices:\n") and "CPU" in res.stdout, res.stdout


def test_prompt_then_generation_rows(tool, models):
    # llama-bench's -pg: a prompt and the tokens generated after it, timed as one (t/s of both).
    rows = bench_json(tool, "-m", models["llama"], "-p", "0", "-n", "2", "-pg", "6,3", "--prompt-gen", "4,2", "-r", "2",
                      "-d", "0,5", "--bandwidth", "--bandwidth-mib", "64")
    assert [r["test"] for r in rows] == ["tg2", "pp6+tg3", "pp4+tg2", "tg2 @ d5", "pp6+tg3 @ d5", "pp4+tg2 @ d5"]
    for r in rows:
        if "+" not in r["test"]:
            continue
        n_tok = r["n_prompt"] + r["n_gen"]
        assert r["samples_ts"] == pytest.approx([1e9 * n_tok / ns for ns in r["samples_ns"]], rel=1e-6)
        assert r["n_ctx"] >= r["n_depth"] + n_tok
        # Neither a prompt row nor a generation row: no bytes per token, bandwidth share or GOPS.
        for key in ("bytes_per_token", "effective_gibs", "row_bandwidth_gibs", "bandwidth_pct", "ops_per_token", "gops"):
            assert r[key] is None, key


def test_bandwidth_probe_and_share(tool, models):
    # A 64 MiB buffer instead of the default 1 GiB keeps the test fast; the value is not checked.
    res = bench(tool, "-m", models["llama"], "-p", "0", "-n", "2", "--bandwidth", "--bandwidth-mib", "64", "-o", "json")
    assert res.returncode == 0, res.stderr
    (row,) = json.loads(res.stdout)
    assert row["bandwidth_gibs"] > 0 and row["bandwidth_median_gibs"] <= row["bandwidth_gibs"]
    # The best pass of any read pattern, plain loads among them.
    assert 0 < row["bandwidth_plain_gibs"] <= row["bandwidth_gibs"]
    # The generation row has its own probes (before and after the test), where the peak resident size
    # can be reset per test (Linux); its share is of those, else of the run's probe.
    if row["peak_rss_per_test"]:
        assert row["row_bandwidth_gibs"] > 0
        assert row["bandwidth_pct"] == pytest.approx(100 * row["effective_gibs"] / row["row_bandwidth_gibs"], rel=1e-9)
    else:
        assert row["row_bandwidth_gibs"] is None
        assert row["bandwidth_pct"] == pytest.approx(100 * row["effective_gibs"] / row["bandwidth_gibs"], rel=1e-9)
    assert re.search(r"read bandwidth, 1 threads .*64 MiB.*best [0-9.]+ GiB/s \(.+\), median [0-9.]+ GiB/s; plain loads best [0-9.]+ GiB/s",
                     res.stderr), res.stderr
    # Prompt rows have no probe of their own, and the markdown table shows the row's probe.
    res = bench(tool, "-m", models["llama"], "-p", "4", "-n", "2", "--bandwidth", "--bandwidth-mib", "64", "-o", "json")
    assert res.returncode == 0, res.stderr
    pp, tg = json.loads(res.stdout)
    assert pp["row_bandwidth_gibs"] is None and pp["bandwidth_pct"] is None
    assert tg["bandwidth_pct"] is not None
    res = bench(tool, "-m", models["llama"], "-p", "0", "-n", "2", "--bandwidth", "--bandwidth-mib", "64")
    assert res.returncode == 0, res.stderr
    header = next(ln for ln in res.stdout.splitlines() if ln.startswith("| model"))
    assert ("probe GiB/s" in header) == bool(row["peak_rss_per_test"]) and "% bw" in header


def cpu_flags():
    try:
        with open("/proc/cpuinfo") as f:
            return next((set(ln.split(":", 1)[1].split()) for ln in f if ln.startswith("flags")), set())
    except OSError:
        return set()


def test_compute_peak_and_prompt_share(tool, models, synth_models):
    q, f16 = models["llama"], synth_models["llama-f16"]
    gemma = models["gemma"]
    # -b 8: two chunks of the 16-token prompt, so two rows of each test go through the output projection.
    res = bench(tool, "-m", f"{q},{f16},{gemma}", "-p", "16", "-n", "0", "-b", "8", "--peak", "--peak-seconds", "0.02",
                "-o", "json")
    assert res.returncode == 0, res.stderr
    rows = json.loads(res.stdout)
    assert [r["model_filename"] for r in rows] == [p.rsplit("/", 1)[-1] for p in (q, f16, gemma)]
    peak = rows[0]["compute_peak"]
    assert peak["threads"] == 1 and peak["repetitions"] == 3 and peak["seconds"] == pytest.approx(0.02)
    probes = peak["probes"]
    flags = cpu_flags()
    # What this CPU must have had measured (Linux x86 only: elsewhere the flags are unknown here).
    expected = {"int8": "avx512_vnni", "bf16": "avx512_bf16", "fp16": "avx512_fp16", "f32": "avx512f"}
    # The AMX tiles where the CPU has them and the engine may use them (Linux grants them to
    # any process that asks; KILN_AMX=0 turns them off in both).
    if os.environ.get("KILN_AMX") != "0":
        expected.update({"amx-int8": "amx_int8", "amx-bf16": "amx_bf16"})
    for kind, flag in expected.items():
        if flag in flags:
            assert kind in probes, (kind, probes)
    if "amx-int8" in probes:
        assert probes["amx-int8"]["instruction"] == "tdpbssd" and probes["amx-int8"]["ops_per_instruction"] == 16 * 16 * 64 * 2
    if "avx512_vnni" in flags:
        assert probes["int8"]["instruction"] == "vpdpbusd zmm" and probes["int8"]["ops_per_instruction"] == 128
    for kind, p in probes.items():
        assert p["gops"] > 0 and len(p["thread_gops"]) == 1 and len(p["runs_gops"]) == 3, (kind, p)
        assert p["gops"] == pytest.approx(max(p["runs_gops"]), rel=1e-9)
    assert re.search(r"compute peak, 1 threads: ", res.stderr), res.stderr

    for r, path in zip(rows, (q, f16, gemma)):
        facts = GgufFacts.of(path)
        assert r["compute_peak"] == peak
        assert r["matmul_ops_per_token"] == 2 * facts.matmul_weights
        # Every token through the layers, the output projection for the last token of each chunk only.
        ops = 2 * (facts.matmul_weights - facts.output_weights) + 2 * facts.output_weights * 2 / 16
        assert r["ops_per_token"] == pytest.approx(ops, rel=1e-12)
        assert r["gops"] == pytest.approx(ops * r["avg_ts"] / 1e9, rel=1e-9)
        kind = r["peak_kind"]
        if kind is None:  # no probe for this weight type on this CPU
            assert not probes and r["pct_peak"] is None and r["peak_gops"] is None
            continue
        assert r["peak_gops"] == probes[kind]["gops"] and r["peak_instruction"] == probes[kind]["instruction"]
        assert r["pct_peak"] == pytest.approx(100 * r["gops"] / r["peak_gops"], rel=1e-9)
    assert any(GgufFacts.of(p).tied for p in (q, gemma)) and not all(GgufFacts.of(p).tied for p in (q, gemma))
    if probes:
        # 8-row micro-batches: the vector kernels (the AMX tiles take 32 rows and more).
        assert rows[0]["peak_kind"] == rows[2]["peak_kind"] == "int8"
        f16_kind = "fp16" if "fp16" in probes else "bf16" if "bf16" in probes else "f32"
        assert rows[1]["peak_kind"] == f16_kind
    if "amx-int8" in probes:  # a 32-row prompt takes the tile unit (docs/engine.md, "AMX tiles"):
        # the BF16 tiles in fast mode where the CPU has them, the int8 tiles in precise mode
        row = bench_json(tool, "-m", q, "-p", "32", "-n", "0", "--peak", "--peak-seconds", "0.01")[0]
        if "amx-bf16" in probes:
            assert row["peak_kind"] == "amx-bf16" and row["peak_instruction"] == "tdpbf16ps", row
        else:
            assert row["peak_kind"] == "amx-int8", row
        row = bench_json(tool, "-m", q, "-p", "32", "-n", "0", "--precision", "precise", "--peak", "--peak-seconds", "0.01")[0]
        assert row["peak_kind"] == "amx-int8" and row["peak_instruction"] == "tdpbssd", row


def test_compute_peak_markdown_and_absence(tool, models):
    res = bench(tool, "-m", models["llama"], "-p", "16", "-n", "2", "--peak", "--peak-seconds", "0.01")
    assert res.returncode == 0, res.stderr
    assert re.search(r"^peak: 1 threads, best of 3 x 0\.01 s: ", res.stdout, re.M), res.stdout
    lines = [ln for ln in res.stdout.splitlines() if ln.startswith("|")]
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    assert "GOPS" in header and "% peak" in header, header
    rows = [dict(zip(header, (c.strip() for c in ln.strip("|").split("|")))) for ln in lines[2:]]
    assert float(rows[0]["GOPS"]) > 0 and rows[1]["GOPS"] == "" and rows[1]["% peak"] == ""
    if "avx512_vnni" in cpu_flags():
        assert re.fullmatch(r"[0-9.]+ int8", rows[0]["% peak"]), rows[0]
    # Without --peak: GOPS in JSON, but no peak and no share.
    pp, tg = bench_json(tool, "-m", models["llama"], "-p", "8", "-n", "2")
    assert pp["gops"] > 0 and pp["compute_peak"] is None and pp["peak_gops"] is None and pp["pct_peak"] is None
    assert tg["gops"] is None and tg["ops_per_token"] is None and tg["matmul_ops_per_token"] == pp["matmul_ops_per_token"]


def test_llama_bench_spellings_and_settings_columns(tool, models):
    m = models["llama"]
    res = bench(tool, "-m", m, "-m", m, "-p", "8", "-n", "0", "-ctk", "q8_0", "-ctv", "f32", "-ub", "4", "-b", "8",
                "--precision", "fast", "--no-warmup")
    assert res.returncode == 0, res.stderr
    lines = [ln for ln in res.stdout.splitlines() if ln.startswith("|")]
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    for col in ("n_batch", "n_ubatch", "type_k", "type_v", "precision"):
        assert col in header, header
    assert len(lines) == 2 + 2  # the model given twice runs twice
    row = dict(zip(header, (c.strip() for c in lines[2].strip("|").split("|"))))
    assert (row["type_k"], row["type_v"], row["n_ubatch"], row["n_batch"], row["precision"]) == ("q8_0", "f32", "4", "8", "fast")


def test_cpu_placement_settings(tool, models):
    # llama-bench's -C / --cpu-strict / --poll: each value a setting of its own rows, in llama-bench's
    # order (threads, mask, strict, poll outermost), in every format and, when not the default, as columns.
    rows = bench_json(tool, "-m", models["llama"], "-p", "4", "-n", "0", "-C", "0x1,3", "--cpu-strict", "0,1",
                      "--poll", "0")
    assert [(r["cpu_mask"], r["cpu_strict"], r["poll"]) for r in rows] == [
        ("0x1", False, 0), ("0x1", True, 0), ("0x3", False, 0), ("0x3", True, 0)]
    (default,) = bench_json(tool, "-m", models["llama"], "-p", "4", "-n", "0")
    assert (default["cpu_mask"], default["cpu_strict"], default["poll"]) == ("0x0", False, 50)
    res = bench(tool, "-m", models["llama"], "-p", "4", "-n", "0", "-C", "0X01", "--poll", "10")
    assert res.returncode == 0, res.stderr
    lines = [ln for ln in res.stdout.splitlines() if ln.startswith("|")]
    row = dict(zip(*([c.strip() for c in ln.strip("|").split("|")] for ln in (lines[0], lines[2]))))
    assert (row["cpu_mask"], row["poll"]) == ("0x1", "10") and "cpu_strict" not in row


def test_integer_ranges_expand_as_llama_bench(tool, models):
    # llama-bench's FIRST-LAST, FIRST-LAST+STEP and FIRST-LAST*FACTOR items, mixed with plain values.
    rows = bench_json(tool, "-m", models["llama"], "-p", "2-16*2,5", "-n", "1-5+2", "-d", "0-1", "--no-warmup")
    assert [r["test"] for r in rows] == (["pp2", "pp4", "pp8", "pp16", "pp5", "tg1", "tg3", "tg5"]
                                         + ["pp2 @ d1", "pp4 @ d1", "pp8 @ d1", "pp16 @ d1", "pp5 @ d1", "tg1 @ d1", "tg3 @ d1", "tg5 @ d1"])


def last_cpu_or_skip():
    if not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2 or not os.path.isdir("/proc/self/task"):
        pytest.skip("needs Linux and two CPUs")
    return max(os.sched_getaffinity(0))


def cpu_lists_while_running(tool, args, cpu):
    # Runs kiln-bench with args and reads its threads' CPU lists from /proc until one of them is held
    # on exactly this CPU or the process ends; returns the lists seen.
    proc = subprocess.Popen([tool("kiln-bench"), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen = set()
    try:
        while proc.poll() is None and str(cpu) not in seen:
            for status in glob.glob(f"/proc/{proc.pid}/task/*/status"):
                try:
                    with open(status) as f:
                        seen |= {ln.split(":", 1)[1].strip() for ln in f if ln.startswith("Cpus_allowed_list:")}
                except OSError:
                    pass
    finally:
        proc.kill()
        proc.communicate()
    return seen


def test_placed_threads_run_where_the_mask_says(tool, models):
    # Read from the OS while the test runs: some thread of the process is held on exactly the
    # masked CPU (the compute workers for the whole test; the main thread only inside each step).
    cpu = last_cpu_or_skip()
    seen = cpu_lists_while_running(tool, ["-m", models["llama"], "-p", "0", "-n", "256", "-r", "40", "-t", "2",
                                    "-C", f"{1 << cpu:#x}", "--cpu-strict", "1", "-o", "json"], cpu)
    assert str(cpu) in seen, seen


def test_probes_run_on_the_tests_cpus(tool, tmp_path):
    # --bandwidth and --peak run on the CPUs of each placement the tests use, read from the OS while
    # they run. The model is missing, so no context ever places a thread: any thread of the process
    # held on exactly the masked CPU is a probe's.
    cpu = last_cpu_or_skip()
    seen = cpu_lists_while_running(tool, ["-m", str(tmp_path / "missing.gguf"), "-p", "0", "-n", "1", "-t", "2",
                                    "-C", f"{1 << cpu:#x}", "--cpu-strict", "1", "--bandwidth", "--bandwidth-mib", "512",
                                    "--peak", "--peak-seconds", "1"], cpu)
    assert str(cpu) in seen, seen


def test_probes_are_reported_per_placement(tool, models):
    # One probe per placement the tests use, each row judged against its own; a placement the process
    # cannot have gets no probe and its tests fail by name, while the others run with theirs.
    m, far = models["llama"], "0x8" + "0" * 255
    args = ["-m", m, "-p", "4", "-n", "2", "-C", f"0x0,0x1,{far}", "--cpu-strict", "1", "--bandwidth",
            "--bandwidth-mib", "64", "--peak", "--peak-seconds", "0.01"]
    res = bench(tool, *args, "-o", "json")
    assert res.returncode == 1 and "cannot place a thread on CPU 1023" in res.stderr, res.stderr
    assert f"read bandwidth, 1 threads on CPUs {far}, strict: skipped" in res.stderr, res.stderr
    rows = json.loads(res.stdout)
    assert sorted((r["cpu_mask"], r["n_prompt"], r["n_gen"]) for r in rows) == [("0x0", 0, 2), ("0x0", 4, 0), ("0x1", 0, 2), ("0x1", 4, 0)]
    for r in rows:
        peak = r["compute_peak"]
        assert (peak["threads"], peak["cpu_mask"], peak["cpu_strict"]) == (1, r["cpu_mask"], True), peak
        if r["n_gen"] > 0:
            assert r["bandwidth_gibs"] > 0 and r["row_bandwidth_gibs"] > 0, r
    md = bench(tool, *args).stdout
    assert "bandwidth: 1 threads, " in md and "bandwidth: 1 threads on CPUs 0x1, strict, " in md, md
    assert "peak: 1 threads, " in md and "peak: 1 threads on CPUs 0x1, strict, " in md, md
    assert far not in md.split("|", 1)[0], md


def test_fixed_context(tool, models):
    (row,) = bench_json(tool, "-m", models["llama"], "-p", "0", "-n", "2", "-c", "256")
    assert row["n_ctx"] == 256


def test_unavailable_cpu_fails_its_tests_by_name(tool, models):
    # CPU 1023 parses but is not one this process has: each test of it fails, naming the CPU; the others run.
    res = bench(tool, "-m", models["llama"], "-p", "4", "-n", "0", "-C", "0x1,0x8" + "0" * 255, "-o", "json")
    assert res.returncode == 1
    assert [r["cpu_mask"] for r in json.loads(res.stdout)] == ["0x1"]
    assert "cannot place a thread on CPU 1023" in res.stderr, res.stderr


def test_failed_model_is_reported_and_others_run(tool, models, tmp_path):
    missing = tmp_path / "missing.gguf"
    res = bench(tool, "-m", f"{missing},{models['llama']}", "-p", "8", "-n", "0", "-o", "json")
    assert res.returncode == 1
    rows = json.loads(res.stdout)
    assert [r["model_filename"] for r in rows] == [models["llama"].rsplit("/", 1)[-1]]
    assert str(missing) in res.stderr and "failure" in res.stderr


@pytest.mark.parametrize("args, pattern", [
    (["--bogus"], r"--bogus"),
    (["-o", "xml"], r"-o: unknown format 'xml'"),
    (["-p", "32", "-n", "0", "-c", "16"], r"pp32 needs 32 KV cells .* -c is 16"),
    (["-d", "20", "-n", "4", "-p", "0", "-c", "16"], r"tg4 @ d20 needs 24 KV cells"),
    (["--parallel", "65"], r"--parallel: 65 is out of range"),
    (["-p", "0", "-n", "0"], r"nothing to measure"),
    (["-ctk", "q5_0"], r"-ctk: unknown value 'q5_0'"),
    (["-r", "0"], r"-r: 0 is out of range"),
    (["-p", "-3"], r"-p|out of range"),
    (["--peak-seconds", "0"], r"--peak-seconds: 0 is out of range"),
    (["-o", "sqlite"], r"-o: unknown format 'sqlite' \(expected md, csv, json, jsonl, sql or none\)"),
    (["-dev", "CUDA0"], r"-dev: unknown device 'CUDA0' \(this build computes on the CPU only: auto or none\)"),
    (["-dio", "1"], r"-dio: 1 is out of range \[0, 0\]"),
    (["-ot", "exps=CUDA0"], r"-ot: buffer type 'CUDA0' of 'exps=CUDA0' is not one this build has"),
    (["-ot", "exps"], r"-ot: expected PATTERN=BUFFER_TYPE, got 'exps'"),
    (["-nopo", "2"], r"-nopo: 2 is out of range"),
    (["-ncmoe", "-1"], r"-ncmoe|out of range"),
    (["-mmp", "2"], r"-mmp: 2 is out of range \[0, 1\]"),
    (["-oe", "xml"], r"-oe: unknown format 'xml'"),
    (["-fa", "2"], r"-fa: 2 is out of range"),
    (["-embd", "1"], r"-embd: 1 is out of range"),
    (["--delay", "-1"], r"--delay|out of range"),
    (["-pg", "64"], r"-pg: expected PP,TG .* got '64'"),
    (["-pg", "64,0"], r"-pg: expected PP,TG"),
    (["-pg", "8,4x"], r"-pg: expected PP,TG"),
    (["-pg", "99999999999999999999,4"], r"-pg: expected PP,TG"),
    (["-pg", "8,4,2"], r"-pg: expected PP,TG"),
    (["-p", "16-8"], r"-p: '16-8' is a range whose last value is below its first"),
    (["-p", "0-64*2"], r"-p: '0-64\*2' is a range that never reaches its last value"),
    (["-n", "4-8+0"], r"-n: '4-8\+0' is a range that never reaches"),
    (["-ub", "1-100000000"], r"-ub: '1-100000000' gives more than 4096 values"),
    (["-t", "2-"], r"-t: '2-' is not a number or range"),
    (["-d", "1-4x2"], r"-d: '1-4x2' is not a number or range"),
    (["-t", "0-2"], r"-t: 0 is out of range \[1, 1024\]"),
    (["-C", "0xg"], r"-C: cpu_mask '0xg': 'g' is not a hexadecimal digit"),
    (["-C", "0x1" + "0" * 256], r"-C: .* names CPU 1024; kiln places threads on CPUs 0-1023"),
    (["-C", ""], r"-C: an empty CPU mask"),
    (["--cpu-strict", "2"], r"--cpu-strict: 2 is out of range \[0, 1\]"),
    (["--poll", "101"], r"--poll: 101 is out of range \[0, 100\]"),
    (["--prio", "4"], r"--prio"),
    (["-p", "0", "-n", "0", "-pg", "16,8", "-c", "20"], r"pp16\+tg8 needs 24 KV cells"),
])
def test_bad_flags_are_clear_errors(tool, models, args, pattern):
    res = bench(tool, "-m", models["llama"], *args)
    assert res.returncode != 0
    last = res.stderr.strip().splitlines()[-1]
    assert last.startswith("kiln-bench: "), res.stderr
    assert re.search(pattern, last), last
    assert res.stdout == ""


def test_missing_model_flag(tool):
    res = subprocess.run([tool("kiln-bench"), "-p", "8"], capture_output=True, text=True, timeout=60)
    assert res.returncode != 0 and "--model" in res.stderr


def test_profile_counts_ops_and_weight_bytes(tool, models):
    """--profile: per-op rows whose matrix-product calls and weight bytes match the file (gguf-py),
    and whose times fit inside the measured time."""
    for name in ("llama", "gemma"):
        path = models[name]
        facts = GgufFacts.of(path)
        n_gen = 3
        rows = bench_json(tool, "-m", path, "-p", "0", "-n", n_gen, "--profile", "--no-warmup")
        assert len(rows) == 1
        r = rows[0]
        prof = {p["op"]: p for p in r["profile"]}
        assert r["profile_tokens"] == n_gen
        # A product that computes its activations from the nodes before it (the CPU's fused
        # norms, residual adds and gated activations) names them after its roles:
        # "mul_mat q+k+v (+add,rms_norm,mul)"; those nodes have no row of their own then.
        def split_op(op):
            base, _, fused = op.partition(" (+")
            return base, fused.rstrip(")").split(",") if fused else []
        def roles(op):
            base, _ = split_op(op)
            return base[len("mul_mat "):].split("+") if base.startswith("mul_mat ") else []
        # One q, k, v, ... product per layer and token; the output projection once per token.
        # Products of one input computed together share a row ("mul_mat q+k+v"): on the CPU
        # every layer's q, k, v (gate, up) of one weight type are one op.
        def calls_of(role):
            return sum(p["calls"] for op, p in prof.items() if role in roles(op))
        def calls_of_group(base):
            return sum(p["calls"] for op, p in prof.items() if split_op(op)[0] == base)
        for role in ("q", "k", "v", "attn_out", "ffn_gate", "ffn_up", "ffn_out"):
            assert calls_of(role) == n_gen * facts.n_layer, (name, role, prof.keys())
        if facts.uniform_type:
            assert calls_of_group("mul_mat q+k+v") == n_gen * facts.n_layer, (name, prof.keys())
            assert calls_of_group("mul_mat ffn_gate+ffn_up") == n_gen * facts.n_layer, (name, prof.keys())
        assert calls_of_group("mul_mat logits") == n_gen
        # Every norm runs, as an op of its own or inside the product it feeds.
        norms = sum(p["calls"] for op, p in prof.items() if op == "rms_norm" or "rms_norm" in split_op(op)[1])
        assert norms >= n_gen * (2 * facts.n_layer + 1), (name, prof.keys())
        assert prof["attention"]["calls"] == n_gen * facts.n_layer
        # Each product reads its whole weight matrix: the 2-D tensors of the file, the embedding
        # table only as a tied output projection.
        reader = gguf.GGUFReader(path)
        matrices = sum(int(t.n_bytes) for t in reader.tensors
                       if len(t.shape) == 2 and (t.name != "token_embd.weight" or facts.tied))
        read = sum(p["weight_bytes"] for op, p in prof.items() if op.startswith("mul_mat "))
        assert read == n_gen * matrices
        assert all(p["weight_bytes"] == 0 for op, p in prof.items() if not op.startswith("mul_mat "))
        # Time inside ops and at barriers happens within the timed decode calls.
        spent_ms = sum(p["op_ms"] + p["wait_ms"] for p in prof.values())
        assert 0 < spent_ms <= sum(r["samples_ns"]) / 1e6 * 1.001
        for p in prof.values():
            assert 0 <= p["op_ms"] <= p["op_max_ms"] + 1e-9 and p["wait_ms"] >= 0
    # Markdown: a table per test after the results; without --profile, none.
    res = bench(tool, "-m", models["llama"], "-p", "8", "-n", "2", "--profile")
    assert res.returncode == 0, res.stderr
    assert res.stdout.count("profile: ") == 2 and "| mul_mat ffn_out " in res.stdout and "| total " in res.stdout
    assert "profile" not in bench(tool, "-m", models["llama"], "-p", "8", "-n", "2").stdout
    assert "profile" not in bench_json(tool, "-m", models["llama"], "-p", "8", "-n", "2")[0]
