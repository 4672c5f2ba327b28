"""scripts/check-targets.py: the performance issue's targets judged from kiln-bench's rows."""
import importlib.util
import json
import shutil
import subprocess
import sys

import pytest

from conftest import ROOT

SCRIPT = ROOT / "scripts" / "check-targets.py"


@pytest.fixture(scope="module")
def ct():
    spec = importlib.util.spec_from_file_location("check_targets", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def row(t, test, kernels="avx512", **kw):
    r = {"model_filename": f"/x/1b-{t}.gguf", "kernels": kernels, "test": test, "n_prompt": 0, "n_gen": 0, "n_depth": 0,
         "n_parallel": 1, "n_ctx": 0, "avg_ts": 0.0, "cpu_info": "cpu", "build_commit": "abc1234"}
    r.update(kw)
    return r


def test_verdicts_at_the_targets_edges(ct):
    rows = [
        row("q4_0", "pp128", n_prompt=128, avg_ts=512.5),            # 1.25 x 410: just met
        row("q8_0", "pp512", n_prompt=512, avg_ts=462.0),            # 1.25 x 370 = 462.5: missed
        row("f16", "pp128", n_prompt=128, avg_ts=406.0),             # F16: ik_llama.cpp's figure itself
        row("q4_k_m", "tg32", n_gen=32, bandwidth_pct=90.0, effective_gibs=27.0, row_bandwidth_gibs=30.0),
        row("q4_k_m", "tg32 @ d4096", n_gen=32, n_depth=4096, bandwidth_pct=89.9, effective_gibs=26.97, row_bandwidth_gibs=30.0),
        row("q4_0", "tg32", n_gen=32),                               # no probe, but a probed row exists below
        row("q4_0", "tg32", n_gen=32, bandwidth_pct=95.0, effective_gibs=30.0, bandwidth_gibs=31.6),
        row("q8_0", "tg32", n_gen=32),                               # no probe at all
        row("q4_0", "tg32 x1", n_prompt=16, n_gen=32, avg_ts=50.0),
        row("q4_0", "tg32 x32", n_prompt=16, n_gen=32, n_parallel=32, avg_ts=300.0),
        row("q4_0", "pp128", n_prompt=128, n_ctx=4096, avg_ts=600.0, peak_rss_over_weights_kv=1.101),
    ]
    got = [(target, verdict) for target, _, verdict in ct.judge(rows)]
    assert sorted(got) == sorted([
        ("q4_0 pp128 >= 512 t/s", "PASS"),
        ("q8_0 pp512 >= 462 t/s", "MISS"),
        ("f16 pp128 >= 406 t/s", "PASS"),
        ("q4_k_m tg32 @ d0 >= 90% of bandwidth", "PASS"),
        ("q4_k_m tg32 @ d4096 >= 90% of bandwidth", "MISS"),
        ("q4_0 tg32 @ d0 >= 90% of bandwidth", "PASS"),
        ("q8_0 tg32 @ d0 >= 90% of bandwidth", "MISS"),
        ("q4_0 batched x32 >= 6 x x1", "PASS"),
        ("q4_0 pp128 peak RSS <= 1.10 x (weights + KV), n_ctx 4096", "MISS"),
    ]), got
    # The t/s targets belong to the AVX-512 kind; elsewhere they are shown, not judged.
    other = [dict(r, kernels="avx2") for r in rows]
    assert {v for t, _, v in ct.judge(other) if "t/s" in t} == {"other kind"}
    assert {v for t, _, v in ct.judge(other) if "t/s" not in t} == {v for t, _, v in ct.judge(rows) if "t/s" not in t}


def test_judges_real_kiln_bench_rows(tool, synth_models, tmp_path):
    # The fields the script reads are the ones kiln-bench writes: rows of the small synthetic model
    # under the 1b name, from the matrix's kinds of run (prompt, probed generation, batched, memory).
    model = tmp_path / "1b-q4_0.gguf"
    shutil.copy(synth_models["llama-q4_K"], model)
    rows_file = tmp_path / "rows.jsonl"
    with open(rows_file, "w") as f:
        for args in (["-p", "128", "-n", "32", "--bandwidth", "--bandwidth-mib", "64"], ["-p", "0", "-n", "32", "--parallel", "1,32"],
                     ["-p", "16", "-n", "4", "-c", "4096", "--mem"]):
            res = subprocess.run([tool("kiln-bench"), "-m", str(model), "-t", "1", "-r", "1", "-o", "jsonl", *args],
                                 capture_output=True, text=True, timeout=300)
            assert res.returncode == 0, res.stderr
            f.write(res.stdout)
    res = subprocess.run([sys.executable, str(SCRIPT), "--judge", str(rows_file)], capture_output=True, text=True, timeout=60)
    assert res.returncode in (0, 1), res.stderr
    lines = res.stdout.splitlines()
    rows = [json.loads(ln) for ln in open(rows_file)]
    assert lines[0] == f"build {rows[0]['build_commit']}, CPU: {rows[0]['cpu_info']}, kernels: {rows[0]['kernels']}"
    targets = [ln[12:].split("  ")[0] for ln in lines[1:-1]]
    assert targets == ["q4_0 pp128 >= 512 t/s", "q4_0 tg32 @ d0 >= 90% of bandwidth", "q4_0 batched x32 >= 6 x x1",
                       "q4_0 pp16 peak RSS <= 1.10 x (weights + KV), n_ctx 4096",
                       "q4_0 tg4 peak RSS <= 1.10 x (weights + KV), n_ctx 4096"], lines
    count = {v: sum(ln.startswith(v) for ln in lines[1:-1]) for v in ("PASS", "MISS", "other kind")}
    assert lines[-1] == f"{count['PASS']} passed, {count['MISS']} missed, {count['other kind']} for another CPU kind"
    assert res.returncode == (1 if count["MISS"] else 0)
