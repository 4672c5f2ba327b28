#!/usr/bin/env python3
"""llama.cpp mainline on the kiln-bench models, for same-machine comparisons (README, "Results on
an AVX2-only machine"). Needs llama-cpp-python built from source on the machine under test
(`pip install llama-cpp-python`: GGML_NATIVE, its CPU repacking on). Prompt: one llm.eval of PP
tokens (n_batch 512); generation: TG single-token evals from an empty cache. Prints the median
t/s of REPS runs after one warm-up run.

usage: bench-llamacpp.py MODEL PP TG REPS [THREADS]
"""
import statistics
import sys
import time

from llama_cpp import Llama


def main() -> None:
    path, pp, tg, reps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    threads = int(sys.argv[5]) if len(sys.argv) > 5 else 2
    llm = Llama(model_path=path, n_ctx=max(1024, pp + tg + 16), n_batch=512, n_ubatch=512, n_threads=threads,
                n_threads_batch=threads, verbose=False, use_mmap=True)
    toks = [(i * 7919) % 31000 + 100 for i in range(pp + tg)]  # arbitrary ids below the 32000 vocab
    pps, tgs = [], []
    # reset() sets n_tokens to 0; eval then drops the cache from there (kv_cache_seq_rm).
    for r in range(reps + 1):
        llm.reset()
        t0 = time.perf_counter()
        if pp:
            llm.eval(toks[:pp])
        t1 = time.perf_counter()
        llm.reset()
        t2 = time.perf_counter()
        for t in toks[pp:pp + tg]:
            llm.eval([t])
        t3 = time.perf_counter()
        if r == 0:
            continue  # warm-up
        pps.append(pp / (t1 - t0) if pp else 0.0)
        tgs.append(tg / (t3 - t2) if tg else 0.0)
    name = path.rsplit("/", 1)[-1]
    print(f"{name}: pp{pp} {statistics.median(pps):.1f} t/s  tg{tg} {statistics.median(tgs):.1f} t/s  "
          f"(runs: pp {[round(x, 1) for x in pps]} tg {[round(x, 1) for x in tgs]})", flush=True)


if __name__ == "__main__":
    main()
