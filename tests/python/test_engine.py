"""The engine against the independent float64 numpy reference (tests/python/reference_model.py).

For synthetic llama / qwen2 / gemma3 models and the real Gemma 3 270M: at every position of
several prompts, mean KL(reference || kiln) < 2e-3 and the same top-1 token wherever the
reference's top-2 margin exceeds 0.1. Reports max |logit error|, mean KLD and top-1 agreement.
"""
import re

import numpy as np
import pytest

import kiln
from kiln import Context, Model
from kiln.engine import ContextFullError
from kiln._lib import KilnError
from reference_model import ReferenceModel

KL_BOUND = 2e-3


def log_softmax(x):
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


def compare(ref_logits, kiln_logits, label):
    pr, pk = log_softmax(ref_logits), log_softmax(kiln_logits.astype(np.float64))
    kl = (np.exp(pr) * (pr - pk)).sum(-1)
    top2 = np.sort(ref_logits, -1)[:, -2:]
    confident = (top2[:, 1] - top2[:, 0]) > 0.1
    agree = ref_logits.argmax(-1) == kiln_logits.argmax(-1)
    print(f"{label}: max |dlogit| {np.abs(ref_logits - kiln_logits).max():.4g}, mean KLD {kl.mean():.3g}, "
          f"max KLD {kl.max():.3g}, top-1 agreement {agree.mean() * 100:.1f}% "
          f"({int(agree[confident].sum())}/{int(confident.sum())} where margin > 0.1)")
    return kl.mean(), bool(agree[confident].all())


def kiln_all_logits(model, tokens, precision, **ctx_args):
    ctx = Context(model, n_ctx=max(64, len(tokens) + 16), precision=precision, **ctx_args)
    ctx.decode(tokens, logits=[True] * len(tokens))
    return np.stack([ctx.logits(i) for i in range(len(tokens))])


PROMPTS = [
    [1, 450, 7483, 310, 3444, 338],
    [1, 306, 763, 2381, 29892, 322, 263, 1243, 29889, 13, 1576, 3734, 338, 1048, 29871, 29906, 29900, 29906, 29946],
    [1] + list(range(1000, 1040, 3)),
]


@pytest.mark.parametrize("name", ["llama-f16", "llama-q4_K", "qwen2-q8_0", "gemma3-q4_0"])
def test_synthetic_models_match_reference(synth_models, name):
    path = synth_models[name]
    ref = ReferenceModel(path)
    model = Model(path)
    for i, prompt in enumerate(PROMPTS):
        r = ref.logits(prompt)
        for precision in ("precise", "fast"):
            for cache in ("f32", "f16"):
                k = kiln_all_logits(model, prompt, precision, type_k=cache, type_v=cache)
                kl, top1 = compare(r, k, f"{name} prompt {i} {precision} kv {cache}")
                assert kl < KL_BOUND and top1


@pytest.mark.parametrize("name", ["qwen2-q8_0", "gemma3-q4_0", "llama-q4_K", "llama-q6_K", "llama-f16"])
def test_repacked_weights_match_file_layout(synth_models, name):
    """Weights repacked for the GEMM kernels give the logits of the file's layout (vec_dot path)."""
    path = synth_models[name]
    packed, rows = Model(path), Model(path, use_repack=False)
    if packed.repacked_bytes == 0:
        pytest.skip("this CPU has no accelerated packed kernels for the type")
    assert rows.repacked_bytes == 0
    for prompt in PROMPTS:
        for precision in ("precise", "fast"):
            a = kiln_all_logits(packed, prompt, precision, type_k="f32", type_v="f32")
            b = kiln_all_logits(rows, prompt, precision, type_k="f32", type_v="f32")
            kl, top1 = compare(b.astype(np.float64), a, f"{name} packed vs rows {precision}")
            # fast: two different 8-bit roundings of the activations (fp32 vs fp16 block scales);
            # F16: fp16 activations and fp16 partial sums vs fp16 activations and float sums
            assert kl < (1e-6 if precision == "precise" else 1e-3) and top1


@pytest.fixture(scope="module")
def gemma_ref(gemma_path):
    return ReferenceModel(gemma_path)


GEMMA_TEXTS = ["The capital of France is", "Once upon a time, there was a little",
               "def fibonacci(n):\n    if n"]


@pytest.fixture(scope="module")
def gemma_model(gemma_path):
    return Model(gemma_path)


def gemma_prompts(model):
    """Prompts tokenized by kiln (with BOS), checked against the vocabulary pieces where known."""
    return [model.tokenize(t) for t in GEMMA_TEXTS]


def test_gemma3_tokenization_matches_vocabulary_pieces(gemma_model, gemma_ref):
    assert gemma_prompts(gemma_model)[0] == gemma_ref.piece_ids(["<bos>", "The", "▁capital", "▁of", "▁France", "▁is"])


def test_gemma3_matches_reference(gemma_model, gemma_ref):
    model = gemma_model
    for i, prompt in enumerate(gemma_prompts(model)):
        r = gemma_ref.logits(prompt)
        k = kiln_all_logits(model, prompt, "precise")
        kl, top1 = compare(r, k, f"gemma3 prompt {i} precise")
        assert kl < KL_BOUND and top1
        k = kiln_all_logits(model, prompt, "fast")
        kl_fast, _ = compare(r, k, f"gemma3 prompt {i} fast (8-bit activations, as llama.cpp)")
        assert kl_fast < 2e-2  # reported; the 8-bit path loses precision on Gemma's activation outliers


def greedy(model, prompt, n, **ctx_args):
    ctx = Context(model, n_ctx=128, **ctx_args)
    ctx.decode(prompt)
    out = []
    for _ in range(n):
        t = int(np.argmax(ctx.logits(-1)))
        out.append(t)
        ctx.decode([t])
    return out


def test_gemma3_greedy_matches_reference(gemma_model, gemma_ref):
    """16 greedy tokens equal the float64 reference's for several prompts."""
    model = gemma_model
    for prompt in gemma_prompts(model)[:2]:
        ours = greedy(model, prompt, 16)
        theirs = gemma_ref.greedy(prompt, 16)
        print("kiln:", repr(model.detokenize(prompt)), "->", repr(model.detokenize(ours)))
        assert ours == theirs


def test_gemma3_names_paris(gemma_model):
    # The packaged model is the base (pretrained) Gemma 3 270M. Greedy after the bare
    # "The capital of France is" it writes " the capital of the country of France. It is the
    # largest city in France..." -- token for token what the float64 reference writes (see
    # test_gemma3_greedy_matches_reference) -- so Paris is asked for the way a base model answers.
    model = gemma_model
    for text in ["Question: What is the capital of France?\nAnswer: The capital of France is",
                 "The capital of France is the city of"]:
        out = model.detokenize(greedy(model, model.tokenize(text), 6))
        print(repr(text), "->", repr(out))
        assert "Paris" in out


def test_gemma3_chat_turn_matches_reference(gemma_model, gemma_ref):
    """A chat turn formatted with the Gemma template decodes as the reference does. (The base model
    does not follow chat turns well; instruction-tuned models are what -cnv is for.)"""
    model = gemma_model
    text = model.apply_chat_template([{"role": "user", "content": "Name three colors."}])
    assert text == "<bos><start_of_turn>user\nName three colors.<end_of_turn>\n<start_of_turn>model\n"
    prompt = model.tokenize(text, add_special=False, parse_special=True)
    assert prompt[:2] == [2, 105]  # <bos>, <start_of_turn>: special tokens parsed, BOS not doubled
    ours = greedy(model, prompt, 12)
    print("chat answer:", repr(model.detokenize(ours)))
    assert ours == gemma_ref.greedy(prompt, 12)


# Precise matmuls: with `auto` a batched prompt of 17+ tokens runs fast activations where a short
# prompt alone runs precise, and on CPUs with AMX-BF16 one of 32+ tokens takes BF16 activations
# where a prompt of fewer takes 8-bit ones (docs/engine.md, "AMX tiles"); this random model has
# near-tied logits. Precise mode computes every row alike at every batch size.
@pytest.mark.parametrize("prompts,n_gen,precision", [
    ([PROMPTS[0], PROMPTS[1], PROMPTS[2][:7]], 8, "precise"),
    # Six short sequences: their generated tokens interleave cell by cell, so each token sees a small
    # share of the cells in its span and the attention gathers its keys (op_attention's sparse path).
    ([PROMPTS[i % 3][: 2 + i] for i in range(6)], 14, "precise"),
], ids=["three", "six-interleaved"])
def test_batched_sequences_equal_single(synth_models, prompts, n_gen, precision):
    """A prompt decoded alone and inside a batch with other sequences gives the same greedy tokens."""
    model = Model(synth_models["qwen2-q8_0"])
    n = len(prompts)
    alone = [greedy(model, p, n_gen, precision=precision) for p in prompts]
    ctx = Context(model, n_ctx=256, n_seq_max=n, precision=precision)
    toks, pos, seqs, want = [], [], [], []
    for s, p in enumerate(prompts):
        for i, t in enumerate(p):
            toks.append(t); pos.append(i); seqs.append([s]); want.append(i == len(p) - 1)
    ctx.decode(toks, pos=pos, seq_ids=seqs, logits=want)
    last = {s: sum(len(p) for p in prompts[: s + 1]) - 1 for s in range(n)}
    nxt = {s: int(np.argmax(ctx.logits(last[s]))) for s in range(n)}
    outs = {s: [nxt[s]] for s in range(n)}
    for step in range(n_gen - 1):
        toks = [outs[s][-1] for s in range(n)]
        ctx.decode(toks, pos=[len(prompts[s]) + step for s in range(n)], seq_ids=[[s] for s in range(n)],
                   logits=[True] * n)
        for s in range(n):
            outs[s].append(int(np.argmax(ctx.logits(s))))
    for s in range(n):
        assert outs[s] == alone[s], f"sequence {s}"


def test_kv_cache_operations(synth_models):
    model = Model(synth_models["llama-f16"])
    p = PROMPTS[1]
    ctx = Context(model, n_ctx=128, type_k="f32", type_v="f32", n_seq_max=2, precision="precise")
    ctx.decode(p)
    full = ctx.logits(-1)
    # Remove the tail and decode it again: same logits.
    ctx.seq_rm(0, 10, -1)
    assert ctx.pos_max(0) == 9
    ctx.decode(p[10:], pos=list(range(10, len(p))))
    assert np.allclose(ctx.logits(-1), full, atol=1e-4)
    # Copy the sequence and continue the copy: same logits as the original.
    ctx.seq_cp(0, 1)
    ctx.decode([p[-1]], pos=[len(p)], seq_ids=[[1]])
    a = ctx.logits(-1)
    ctx.decode([p[-1]], pos=[len(p)], seq_ids=[[0]])
    assert np.allclose(ctx.logits(-1), a, atol=1e-4)
    # Moving the whole sequence by one delta keeps its relative positions: the same logits (the
    # rotation itself is checked by test_kv_shift_equals_decoding_at_shifted_positions).
    ctx2 = Context(model, n_ctx=128, type_k="f32", type_v="f32", precision="precise")
    ctx2.decode(p[:8], pos=list(range(5, 13)))
    ctx2.seq_add(0, 0, -1, -5)
    ctx2.decode([p[8]], pos=[8])
    ctx3 = Context(model, n_ctx=128, type_k="f32", type_v="f32", precision="precise")
    ctx3.decode(p[:9])
    assert np.allclose(ctx2.logits(-1), ctx3.logits(-1), atol=1e-3)


@pytest.mark.parametrize("name", ["llama-1l-f16", "qwen2-1l-q8_0", "gemma3-1l-q4_0"])
@pytest.mark.parametrize("type_k", ["f32", "f16", "bf16", "q8_0"])
def test_kv_shift_equals_decoding_at_shifted_positions(synth_models, name, type_k):
    """Three runs of tokens with gaps between them are closed up by two seq_add calls of different
    deltas (cells shifted by 0, -10 and -30; 100 cells, so panels of 64 cells hold shifted and
    unshifted cells side by side), so K is re-rotated through the panel and row layouts,
    with normal (llama) and NEOX (qwen2, gemma3) RoPE, in global and sliding-window caches. With
    one layer, K and V depend on the token alone, so the next token's logits must equal decoding
    the tokens at positions 0..99 directly, up to the cache type's rounding: no more than 5x what
    storing K in that type changes, plus a floor (a K-shift by the same delta for every cell would keep the
    relative positions and could not show a wrong rotation)."""
    model = Model(synth_models[name])
    p = [100 + 3 * i for i in range(101)]
    gapped = list(range(0, 30)) + list(range(40, 80)) + list(range(100, 130))

    def logits(tk, shift):
        ctx = Context(model, n_ctx=256, type_k=tk, type_v="f32", precision="precise")
        if shift:
            ctx.decode(p[:100], pos=gapped)
            ctx.seq_add(0, 40, 80, -10)
            ctx.seq_add(0, 100, -1, -30)
            assert ctx.pos_max(0) == 99
            ctx.decode([p[100]], pos=[100])
        else:  # the same two decode calls, so the same summation order
            ctx.decode(p[:100])
            ctx.decode([p[100]], pos=[100])
        return ctx.logits(-1)

    direct = logits(type_k, False)
    rounding = np.abs(direct - logits("f32", False)).max()
    err = np.abs(logits(type_k, True) - direct).max()
    # + a floor for float rounding of the rotation itself (2e-4 of the logit scale; f32 caches
    # measure up to 5e-5 of it)
    assert err <= 5 * rounding + 2e-4 * np.abs(direct).max(), f"{name} K {type_k}: shifted differs by {err}, storing K as {type_k} by {rounding}"


def test_sliding_window_beyond_the_window(synth_models):
    """gemma3 with a window of 8: generation far past the window (cells reused as a ring) matches
    the reference, which masks by distance."""
    path = synth_models["gemma3-q4_0"]
    ref = ReferenceModel(path)
    model = Model(path)
    prompt = PROMPTS[1] + PROMPTS[2]  # 34 tokens, > 4 windows
    ctx = Context(model, n_ctx=64, n_ubatch=8, precision="precise")
    ctx.decode(prompt, logits=[True] * len(prompt))
    k = np.stack([ctx.logits(i) for i in range(len(prompt))])
    kl, top1 = compare(ref.logits(prompt), k, "gemma3 synthetic, 34 tokens, window 8, ubatch 8")
    assert kl < KL_BOUND and top1


@pytest.mark.parametrize("name", ["llama-q4_K", "gemma3-q4_0"])
def test_token_by_token_matches_reference(synth_models, name):
    """Generation runs the previous token's graph again while the batch's shape holds
    (Context::BuiltGraph): decoded one token at a time, every position still matches the
    reference, across the attended prefix's 32-cell steps (74 tokens), after a batch of another
    shape in between, and (gemma3, window 8) with the sliding-window cells reused as a ring."""
    path = synth_models[name]
    ref = ReferenceModel(path)
    model = Model(path)
    tokens = PROMPTS[1] + PROMPTS[2] + PROMPTS[0] + PROMPTS[1] + PROMPTS[2]
    ctx = Context(model, n_ctx=128, precision="precise")
    got, i = [], 0
    while i < len(tokens):
        n = 5 if i == 40 else 1
        ctx.decode(tokens[i:i + n], pos=list(range(i, i + n)), logits=[True] * n)
        got += [ctx.logits(j) for j in range(n)]
        i += n
    kl, top1 = compare(ref.logits(tokens), np.stack(got), f"{name}, {len(tokens)} tokens one at a time")
    assert kl < KL_BOUND and top1


def test_bad_input_is_an_error(synth_models, tmp_path):
    model = Model(synth_models["llama-f16"])
    ctx = Context(model, n_ctx=32, n_batch=64)
    with pytest.raises(ContextFullError):
        ctx.decode(list(range(1, 41)))  # longer than the context
    with pytest.raises(KilnError, match="outside the vocabulary"):
        ctx.decode([10 ** 6])
    with pytest.raises(KilnError, match="n_batch"):
        Context(model, n_ctx=256, n_batch=8).decode(list(range(1, 20)))
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"not a gguf file at all")
    with pytest.raises(KilnError, match="bad.gguf"):
        Model(str(bad))
    data = open(synth_models["llama-f16"], "rb").read()
    (tmp_path / "trunc.gguf").write_bytes(data[: len(data) // 2])
    with pytest.raises(KilnError, match="trunc.gguf"):
        Model(str(tmp_path / "trunc.gguf"))


def test_build_and_system_info():
    # The machine line names the CPU and kernel set kiln-bench records (test_bench checks the values).
    info = kiln.system_info()
    assert info.startswith("CPU: ") and " | kernels: " in info and " | AVX2 = " in info
    commit = kiln.build_commit()
    assert commit == "unknown" or re.fullmatch(r"[0-9a-f]{7,40}", commit)
    assert (kiln.build_number() == 0) == (commit == "unknown"), (commit, kiln.build_number())


def test_placed_threads_give_the_same_logits(synth_models):
    # Placement changes where the threads run, never what they compute: the logits of an unplaced
    # context, bit for bit, with the threads on one CPU, each on its own, or spinning not at all.
    import os
    model = Model(synth_models["llama-q4_K"])
    prompt = PROMPTS[1]
    base = kiln_all_logits(model, prompt, "precise", n_threads=2)
    allowed = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else [0]
    one = f"{1 << allowed[-1]:#x}"
    every = f"{sum(1 << c for c in allowed):#x}"
    for args in ({"cpu_mask": one}, {"cpu_mask": every, "cpu_strict": True}, {"cpu_mask": every, "poll": 0},
                 {"cpu_mask": "0x0", "cpu_strict": True, "poll": 100}):
        placed = kiln_all_logits(model, prompt, "precise", n_threads=2, **args)
        np.testing.assert_array_equal(placed, base, err_msg=str(args))
    if hasattr(os, "sched_getaffinity"):
        assert sorted(os.sched_getaffinity(0)) == allowed  # the caller's own CPUs are back


def test_bad_placement_is_an_error(synth_models):
    model = Model(synth_models["llama-q4_K"])
    with pytest.raises(KilnError, match=r"cpu_mask '0xzz'.*'z' is not a hexadecimal digit"):
        Context(model, n_ctx=32, cpu_mask="0xzz")
    with pytest.raises(KilnError, match=r"poll: 101 is out of range \[0, 100\]"):
        Context(model, n_ctx=32, poll=101)
    # CPU 1023: the highest a mask may name, and (on any machine this runs on) not one this process has.
    with pytest.raises(KilnError, match=r"cannot place a thread on CPU 1023"):
        Context(model, n_ctx=32, cpu_mask="0x8" + "0" * 255)


def test_prompt_and_generation_thread_counts(synth_models):
    # llama.cpp's n_threads_batch: prompts on one number of threads, generation on another, from one
    # pool. The logits do not depend on how many threads computed them.
    model = Model(synth_models["llama-q4_K"])
    prompt = PROMPTS[1]

    def run(**kw):
        ctx = Context(model, n_ctx=64, precision="precise", **kw)
        ctx.decode(prompt, logits=[True] * len(prompt))
        out = [ctx.logits(i) for i in range(len(prompt))]
        for t in (5, 9, 11):  # one-token batches
            ctx.decode([t])
            out.append(ctx.logits(-1))
        return ctx, np.stack(out)

    base_ctx, base = run(n_threads=1)
    assert (base_ctx.n_threads, base_ctx.n_threads_batch) == (1, 1)
    for kw, want in (({"n_threads": 1, "n_threads_batch": 3}, (1, 3)), ({"n_threads": 3, "n_threads_batch": 1}, (3, 1)),
                     ({"n_threads": 2}, (2, 2))):
        ctx, logits = run(**kw)
        assert (ctx.n_threads, ctx.n_threads_batch) == want
        np.testing.assert_array_equal(logits, base, err_msg=str(kw))
