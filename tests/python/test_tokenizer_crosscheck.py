"""kiln-tokenize against independent tokenizers rebuilt from the same GGUF vocabularies.

- byte-level BPE (gpt-2, starcoder, refact) against HF `tokenizers` with the
  pre-tokenizer chain of those models;
- SentencePiece BPE (llama-spm, and Gemma 3 when KILN_GEMMA_MODEL is set)
  against `sentencepiece` with a model proto built from the GGUF pieces.

llama.cpp matches these libraries on ordinary text, so any difference on the
corpus below is a kiln bug. (Where llama.cpp deliberately differs — e.g. it
applies user-defined tokens before escaping spaces, which matters for
Gemma's whitespace tokens — the corpus avoids the case.) Skipped unless
tokenizers, sentencepiece and protobuf are installed.
"""
import os
import pathlib
import random
import re
import subprocess

import pytest

tokenizers = pytest.importorskip("tokenizers")
spm = pytest.importorskip("sentencepiece")
pytest.importorskip("google.protobuf")
from gguf import GGUFReader  # noqa: E402
from sentencepiece import sentencepiece_model_pb2 as sp_pb  # noqa: E402

POOLS = [
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ", "0123456789", " \t\n\r\v\f", "  \n\n",
    "'s't're've'm'll'd'S'T'RE", ".,;:!?()[]{}<>\"'`~@#$%^&*-_=+|\\/", "äöüßÄÖÜéèêçñÑàáâãåæœøÅ",
    "нещонаБългарскиПривет", "我想在苹果工作天～中文字符", "กขคงจฉชซ", "កាន់តែពិសេសអាចខលចេញ", "🦙🚀😶\u200d🌫️✅😁👍🏽",
    "\u00a0\u2009\u3000\u200b\u2028\u0085", "αβγδεζηθΩ", "ﬁﬂ℃№™½¾²³", "\u0301\u0308\u0327", "한국어텍스트",
    "ひらがなカタカナ", "عربيةשלום", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢",
]


def corpus(seed: int, n: int = 4000, long_words: bool = False) -> str:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        pool = rng.choice(POOLS)
        k = rng.randint(20, 60) if long_words else rng.randint(1, 12)
        out.append("".join(rng.choice(pool) for _ in range(k)))
        out.append(rng.choice([" ", " ", " ", "", "\n", "  ", "\t", ", ", ". "]))
    return "".join(out)


def strings(reader: GGUFReader, key: str):
    f = reader.fields[key]
    return [bytes(f.parts[i]).decode("utf-8") for i in f.data]


def numbers(reader: GGUFReader, key: str):
    f = reader.fields[key]
    return [f.parts[i][0].item() for i in f.data]


def hf_bpe(path: pathlib.Path, digits_first: bool):
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers

    r = GGUFReader(str(path))
    vocab = {t: i for i, t in enumerate(strings(r, "tokenizer.ggml.tokens"))}
    merges = [tuple(m.split(" ", 1)) for m in strings(r, "tokenizer.ggml.merges")]
    tk = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    if digits_first:
        tk.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(r"\p{N}"), "isolated"), byte_level])
    else:
        tk.pre_tokenizer = byte_level
    return lambda text: tk.encode(text, add_special_tokens=False).ids


def sentencepiece(path: pathlib.Path, space_prefix: bool):
    r = GGUFReader(str(path))
    m = sp_pb.ModelProto()
    m.trainer_spec.model_type = sp_pb.TrainerSpec.BPE
    m.trainer_spec.byte_fallback = True
    m.trainer_spec.split_by_whitespace = False
    m.normalizer_spec.name = "identity"
    m.normalizer_spec.add_dummy_prefix = False
    m.normalizer_spec.remove_extra_whitespaces = False
    m.normalizer_spec.escape_whitespaces = True
    for text, score, kind in zip(strings(r, "tokenizer.ggml.tokens"), numbers(r, "tokenizer.ggml.scores"),
                                 numbers(r, "tokenizer.ggml.token_type")):
        p = m.pieces.add()
        p.piece, p.score, p.type = text, float(score), int(kind) if 1 <= int(kind) <= 6 else 1
    sp = spm.SentencePieceProcessor(model_proto=m.SerializeToString())
    return lambda text: sp.encode((" " + text) if space_prefix else text)


def kiln_ids(tool, model: pathlib.Path, text: str, tmp_path: pathlib.Path):
    src = tmp_path / "input.txt"
    src.write_bytes(text.encode("utf-8"))
    res = subprocess.run([tool("kiln-tokenize"), "-m", str(model), "-f", str(src), "--ids", "--no-bos"],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    return [int(x) for x in res.stdout.split()]


def first_difference(a, b):
    i = next((k for k in range(min(len(a), len(b))) if a[k] != b[k]), min(len(a), len(b)))
    return f"lengths {len(a)} vs {len(b)}, first difference at {i}: ref {a[i:i + 8]} kiln {b[i:i + 8]}"


TEXTS = {
    "random": corpus(1),
    "random-long-words": corpus(2, 1500, long_words=True),
    "gpl": pathlib.Path("/usr/share/common-licenses/GPL-3").read_text(encoding="utf-8")
    if pathlib.Path("/usr/share/common-licenses/GPL-3").exists() else corpus(3),
}


@pytest.mark.parametrize("vocab,digits_first", [("gpt-2", False), ("starcoder", True), ("refact", True)])
def test_byte_level_bpe_matches_hf_tokenizers(tool, testdata, tmp_path, vocab, digits_first):
    path = testdata / "vocab" / f"ggml-vocab-{vocab}.gguf"
    encode = hf_bpe(path, digits_first)
    for name, text in TEXTS.items():
        ref, got = encode(text), kiln_ids(tool, path, text, tmp_path)
        assert got == ref, f"{vocab} on {name}: " + first_difference(ref, got)


def test_spm_matches_sentencepiece(tool, testdata, tmp_path):
    path = testdata / "vocab" / "ggml-vocab-llama-spm.gguf"
    encode = sentencepiece(path, space_prefix=True)
    for name, text in TEXTS.items():
        ref, got = encode(text), kiln_ids(tool, path, text, tmp_path)
        assert got == ref, f"llama-spm on {name}: " + first_difference(ref, got)


def test_gemma_matches_sentencepiece(tool, tmp_path):
    model = os.environ.get("KILN_GEMMA_MODEL")
    if not model or not pathlib.Path(model).exists():
        pytest.skip("KILN_GEMMA_MODEL is not set")
    # Gemma's whitespace runs are user-defined tokens that llama.cpp matches
    # before spaces are escaped, unlike sentencepiece: use single spaces only.
    text = re.sub(r"[ \t\n\r\v\f]+", " ", TEXTS["random"] + TEXTS["random-long-words"])
    ref = sentencepiece(pathlib.Path(model), space_prefix=False)(text)
    got = kiln_ids(tool, pathlib.Path(model), text, tmp_path)
    assert got == ref, first_difference(ref, got)
