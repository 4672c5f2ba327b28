"""kiln-cli and kiln-perplexity, the tools written only on the C API (include/kiln.h).

kiln-cli: seeded sampling is reproducible, greedy output equals an argmax loop run
through the Python package, the llama.cpp-style timing lines are printed, chat mode
reads turns from stdin, the context shifts when full, and errors are one line with
exit status 1. kiln-perplexity: the per-chunk running values and the final estimate
(with llama.cpp's error bar) equal an independent numpy computation from logits
obtained through the Python package.
"""
import math
import pathlib
import re
import subprocess

import numpy as np
import pytest

from kiln import Context, Model

GPL3 = pathlib.Path("/usr/share/common-licenses/GPL-3")
TIMING_LINES = ["kiln: load time", "kiln: prompt eval", "kiln: generation", "kiln: sampling time", "kiln: total time",
                "kiln: KV cache"]
FINAL_RE = re.compile(r"Final estimate: PPL = ([0-9.]+) \+/- ([0-9.]+)")


def run(*args, stdin=None, timeout=600):
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, input=stdin, timeout=timeout)


def cli(tool, model, *args, **kw):
    # Two threads: reproducible and gentle on shared machines.
    return run(tool("kiln-cli"), "-m", model, "-t", "2", *args, **kw)


def assert_one_line_error(res, tool_name, pattern):
    assert res.returncode == 1, f"expected exit 1, got {res.returncode}: {res.stderr}"
    last = res.stderr.strip().splitlines()[-1]
    assert last.startswith(f"{tool_name}: "), res.stderr
    assert re.search(pattern, last), last
    assert "terminate called" not in res.stderr and "Traceback" not in res.stderr


# ---- kiln-cli ----

def test_cli_seeded_sampling_is_reproducible(tool, synth_models):
    args = ["-p", "Hello world", "-n", "16", "-c", "128", "--ignore-eos"]
    a = cli(tool, synth_models["llama-f16"], *args, "--seed", "7")
    b = cli(tool, synth_models["llama-f16"], *args, "--seed", "7")
    c = cli(tool, synth_models["llama-f16"], *args, "--seed", "8")
    assert a.returncode == 0, a.stderr
    assert a.stdout == b.stdout
    assert a.stdout != c.stdout, "a different seed should give a different sample"
    assert a.stdout.startswith("Hello world")
    for line in TIMING_LINES:
        assert line in a.stderr, f"{line!r} missing:\n{a.stderr}"
    assert re.search(r"kiln: sampling time\s*=\s*[0-9.]+ ms /\s+16 runs", a.stderr), a.stderr
    assert "seed = 7" in a.stderr
    assert re.search(r"kiln: KV cache\s*=\s*\d+ / 128 cells used", a.stderr), a.stderr


@pytest.mark.parametrize("name", ["llama-f16", "gemma3-q4_0"])
def test_cli_greedy_matches_argmax_loop(tool, synth_models, name):
    """--temp 0 output equals an argmax loop over logits from the Python package."""
    path, prompt, n = synth_models[name], "The quick brown fox", 12
    res = cli(tool, path, "-p", prompt, "-n", str(n), "--temp", "0", "-c", "128", "--ignore-eos")
    again = cli(tool, path, "-p", prompt, "-n", str(n), "--temp", "0", "-c", "128", "--ignore-eos")
    assert res.returncode == 0, res.stderr
    assert res.stdout == again.stdout

    model = Model(path)
    ctx = Context(model, n_ctx=128, n_batch=2048, n_ubatch=512, n_threads=2)
    prompt_ids = model.tokenize(prompt, add_special=True, parse_special=True)
    ctx.decode(prompt_ids)
    out = []
    for i in range(n):
        t = int(np.argmax(ctx.logits(-1)))
        out.append(t)
        if i + 1 < n:
            ctx.decode([t])
    # The text of the generated tokens as they continue the prompt.
    expected = model.detokenize(prompt_ids + out)[len(model.detokenize(prompt_ids)):]
    assert res.stdout == prompt + expected + "\n"


def test_cli_conversation_reads_turns_until_eof(tool, synth_models):
    res = cli(tool, synth_models["llama-f16"], "-cnv", "-n", "6", "--temp", "0", "-c", "256", "-v",
              "-sys", "You are terse.", stdin="Hi there\nHow are you?\n")
    assert res.returncode == 0, res.stderr
    assert res.stdout.count("> ") >= 3, res.stdout  # two turns, then the prompt that meets EOF
    assert "Hi there" in res.stdout and "How are you?" in res.stdout  # piped input is echoed
    turns = re.findall(r"kiln-cli: prompt tokens \((\d+)\)", res.stderr)
    assert len(turns) == 2, res.stderr
    # The second turn evaluates only what is new, not the whole history again.
    first, second = int(turns[0]), int(turns[1])
    assert second < first + 10, (first, second)
    assert re.search(r"kiln: generation\s*=\s*[0-9.]+ ms /\s+12 runs", res.stderr), res.stderr
    for line in TIMING_LINES:
        assert line in res.stderr


def test_cli_conversation_exit_command(tool, synth_models):
    res = cli(tool, synth_models["llama-f16"], "-cnv", "-n", "4", "--temp", "0", "-c", "256", "-v",
              stdin="Hello\n/exit\nnot read\n")
    assert res.returncode == 0, res.stderr
    assert len(re.findall(r"kiln-cli: prompt tokens", res.stderr)) == 1
    assert "not read" not in res.stdout


@pytest.mark.parametrize("name", ["llama-f16", "gemma3-q4_0"])
def test_cli_context_shift(tool, synth_models, name):
    """100 tokens through a 64-cell context: it shifts; with -n -1 it stops when full."""
    res = cli(tool, synth_models[name], "-p", "Hello world", "-n", "100", "--temp", "0", "-c", "64", "--ignore-eos", "-v")
    assert res.returncode == 0, res.stderr
    assert "context full: keeping 1 tokens" in res.stderr
    assert re.search(r"kiln: sampling time\s*=\s*[0-9.]+ ms /\s+100 runs", res.stderr), res.stderr

    res = cli(tool, synth_models[name], "-p", "Hello world", "-n", "-1", "--temp", "0", "-c", "64", "--ignore-eos")
    assert res.returncode == 0, res.stderr
    assert "stopped: the context is full" in res.stderr
    assert re.search(r"kiln: KV cache\s*=\s*64 / 64 cells used", res.stderr), res.stderr


def test_cli_errors_are_one_line(tool, synth_models, tmp_path):
    model = synth_models["llama-f16"]
    assert_one_line_error(run(tool("kiln-cli"), "-m", tmp_path / "missing.gguf", "-p", "x"), "kiln-cli", "cannot load model")
    assert_one_line_error(run(tool("kiln-cli"), "-m", model, "--bogus"), "kiln-cli", "bogus")
    assert_one_line_error(run(tool("kiln-cli"), "-p", "x"), "kiln-cli", "model")
    assert_one_line_error(run(tool("kiln-cli"), "-m", model, "-ctk", "q4_0", "-p", "x"), "kiln-cli", "q4_0")
    assert_one_line_error(run(tool("kiln-cli"), "-m", model, "-n", "many"), "kiln-cli", "n-predict")
    assert_one_line_error(run(tool("kiln-cli"), "-m", model, "-f", tmp_path / "none.txt"), "kiln-cli", "none.txt")
    garbage = tmp_path / "garbage.gguf"
    garbage.write_bytes(b"not a gguf file at all" * 10)
    assert_one_line_error(run(tool("kiln-cli"), "-m", garbage, "-p", "x"), "kiln-cli", "cannot load model")


def test_cli_cpu_placement_flags(tool, synth_models):
    # llama.cpp's -tb, -C, -Cr, --cpu-strict, --poll and --prio: the threads move, the greedy text does not.
    path, args = synth_models["llama-q4_K"], ["-p", "The quick brown fox", "-n", "8", "--temp", "0", "-c", "64", "--ignore-eos"]
    base = cli(tool, path, *args)
    assert base.returncode == 0, base.stderr
    assert "threads = 2 (batch 2)" in base.stderr, base.stderr
    for placement in (["-C", "0x1"], ["-C", "1", "--cpu-strict", "1", "--poll", "0"], ["-Cr", "0-0", "--poll", "100"],
                      ["--cpu-range", "0", "--prio", "0"], ["--prio", "-1"], ["-tb", "1"], ["--threads-batch", "3"]):
        res = cli(tool, path, *args, *placement)
        assert res.returncode == 0, (placement, res.stderr)
        assert res.stdout == base.stdout, placement
        if "-tb" in placement or "--threads-batch" in placement:
            want = "threads = 2 (batch 1)" if "-tb" in placement else "threads = 2 (batch 3)"
            assert want in res.stderr, res.stderr
    model = synth_models["llama-f16"]
    for flags, pattern in ((["-C", "0xq"], r"-C: cpu_mask '0xq': 'q' is not"), (["-Cr", "3-1"], r"-Cr: CPU range 3-1: expected 0 <= first"),
                           (["-Cr", "0-2000"], r"-Cr: CPU range 0-2000: expected"), (["-Cr", "1-x"], r"-Cr: expected a CPU range lo-hi"), (["-C", "0x1", "-Cr", "0-1"], r"excludes"),
                           (["--poll", "200"], r"--poll"), (["--cpu-strict", "5"], r"--cpu-strict"), (["--prio", "9"], r"--prio"),
                           (["-C", "0x8" + "0" * 255], r"cannot place a thread on CPU 1023")):
        assert_one_line_error(cli(tool, model, "-p", "x", "-n", "1", *flags), "kiln-cli", pattern)


def test_cli_prompt_longer_than_context(tool, synth_models):
    res = cli(tool, synth_models["llama-f16"], "-c", "32", "-p", "word " * 100)
    assert_one_line_error(res, "kiln-cli", r"the prompt is \d+ tokens but the context holds 32")


def test_cli_help(tool):
    res = run(tool("kiln-cli"), "--help")
    assert res.returncode == 0
    for flag in ["--n-predict", "--ctx-size", "--cache-type-k", "--precision", "--conversation", "--top-p", "--seed", "--cpu-mask",
                 "--cpu-range", "--cpu-strict", "--poll", "--prio", "--threads-batch"]:
        assert flag in res.stdout


def test_cli_gemma_smoke(tool, gemma_path):
    res = cli(tool, gemma_path, "-p", "The capital of France is", "-n", "8", "--temp", "0", "-c", "256")
    assert res.returncode == 0, res.stderr
    print(res.stdout)
    for line in TIMING_LINES:
        assert line in res.stderr
    # The chat template of Gemma writes "<bos>" itself: exactly one BOS token reaches the model.
    res = cli(tool, gemma_path, "-cnv", "-n", "4", "--temp", "0", "-c", "256", "-v", stdin="Hello\n")
    assert res.returncode == 0, res.stderr
    ids = [int(x) for x in re.findall(r"(-?\d+) '", res.stderr.split("prompt tokens", 1)[1].split("\n\n")[0])]
    assert ids[0] == 2 and 2 not in ids[1:], ids


# ---- kiln-perplexity ----

def make_text(n_words=700):
    """Deterministic English-like text, long enough for several 64-token chunks."""
    words = ("the of and to in is was for on that with as by at from his her an were which are this be has had "
             "one not but all new more first two also after who years time world city when state may").split()
    rng = np.random.default_rng(5)
    sentences = []
    while sum(len(s.split()) for s in sentences) < n_words:
        k = int(rng.integers(5, 14))
        sentences.append(" ".join(words[int(i)] for i in rng.integers(0, len(words), k)).capitalize() + ".")
    return " ".join(sentences) + "\n"


def reference_perplexity(path, text, n_ctx, n_chunks, precision="auto"):
    """llama.cpp's method through the Python package: per-chunk running PPL, final PPL and its error."""
    model = Model(path)
    tokens = model.tokenize(text, add_special=True, parse_special=False)
    bos = tokens[0]  # the model adds BOS (llama SPM vocabulary)
    first = n_ctx // 2
    nll, running = [], []
    for c in range(n_chunks):
        chunk = list(tokens[c * n_ctx:(c + 1) * n_ctx])
        chunk[0] = bos
        ctx = Context(model, n_ctx=n_ctx, n_batch=n_ctx, n_ubatch=n_ctx, n_threads=2, precision=precision)
        ctx.decode(chunk, logits=[True] * n_ctx)
        for j in range(first, n_ctx - 1):
            x = ctx.logits(j).astype(np.float64)
            m = x.max()
            nll.append(m + math.log(np.exp(x - m).sum()) - x[chunk[j + 1]])
        running.append(math.exp(np.mean(nll)))
    nll = np.array(nll)
    ppl = math.exp(nll.mean())
    err = math.sqrt((np.mean(nll ** 2) - nll.mean() ** 2) / (len(nll) - 1)) * ppl
    return running, ppl, err, len(tokens)


def parse_ppl(stdout):
    running = [float(v) for v in re.findall(r"\[\d+\]([0-9.]+),", stdout)]
    m = FINAL_RE.search(stdout)
    assert m, stdout
    return running, float(m.group(1)), float(m.group(2))


@pytest.mark.parametrize("name", ["llama-f16", "gemma3-q4_0"])
def test_perplexity_matches_independent_computation(tool, synth_models, tmp_path, name):
    text_file = tmp_path / "text.txt"
    text = make_text()
    text_file.write_text(text)
    path = synth_models[name]
    n_ctx, n_chunks = 64, 3
    # Precise: the same arithmetic whatever a product's row count. In fast mode it can differ
    # (F16 products go through BF16 on AMX's tile unit from 32 rows, through FP16 below), and the
    # tool asks for fewer logit rows per decode than this reference does.
    ref_running, ref_ppl, ref_err, n_tokens = reference_perplexity(path, text, n_ctx, n_chunks, precision="precise")
    assert n_tokens >= n_chunks * n_ctx
    outputs = {}
    # -b 64: one chunk per decode; -b 32: two decodes per chunk; -b 256: four chunks side by side as sequences.
    for batch in (64, 32, 256):
        res = run(tool("kiln-perplexity"), "-m", path, "-f", text_file, "-c", n_ctx, "--chunks", n_chunks, "-b", batch, "-t", 2,
                  "--precision", "precise")
        assert res.returncode == 0, res.stderr
        running, ppl, err = parse_ppl(res.stdout)
        print(f"{name} -b {batch}: kiln {ppl:.4f} +/- {err:.5f}, reference {ref_ppl:.4f} +/- {ref_err:.5f}")
        assert len(running) == n_chunks
        assert running == pytest.approx(ref_running, rel=2e-4, abs=1e-4)
        assert ppl == pytest.approx(ref_ppl, rel=2e-4, abs=1e-4)
        assert err == pytest.approx(ref_err, rel=2e-3, abs=2e-5)
        assert "seconds per pass - ETA" in res.stderr
        assert "tokens per second" in res.stderr
        outputs[batch] = res.stdout
    assert outputs[64] == outputs[32] == outputs[256]


def test_perplexity_needs_two_contexts_of_text(tool, synth_models, tmp_path):
    text_file = tmp_path / "short.txt"
    text_file.write_text("A short text that is far from 2 x 512 tokens.\n")
    res = run(tool("kiln-perplexity"), "-m", synth_models["llama-f16"], "-f", text_file, "-c", 512)
    assert_one_line_error(res, "kiln-perplexity", r"you need at least 1024 tokens .* only \d+")
    res = run(tool("kiln-perplexity"), "-m", synth_models["llama-f16"], "-f", tmp_path / "missing.txt")
    assert_one_line_error(res, "kiln-perplexity", "missing.txt")
    res = run(tool("kiln-perplexity"), "-m", synth_models["llama-f16"])
    assert_one_line_error(res, "kiln-perplexity", "file")


def test_perplexity_gemma_gpl3(tool, gemma_path):
    if not GPL3.exists():
        pytest.skip(f"{GPL3} is missing")
    res = run(tool("kiln-perplexity"), "-m", gemma_path, "-f", GPL3, "-c", 512, "--chunks", 4, "-b", 512, timeout=1800)
    assert res.returncode == 0, res.stderr
    running, ppl, err = parse_ppl(res.stdout)
    print(f"gemma3 270M on GPL-3, -c 512, 4 chunks: PPL = {ppl:.4f} +/- {err:.5f} ({running})")
    assert len(running) == 4
    assert 1.0 < ppl < 100.0 and 0 < err < ppl
