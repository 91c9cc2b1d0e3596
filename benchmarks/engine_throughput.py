"""Throughput of `VLLMEngine` against raw `vllm.LLM.generate`, and the prefix-cache effect.

(a) raw `LLM.generate` on a fixed set of prompts (rendered once, beforehand) and (b) the same requests
through `VLLMEngine.generate` (rendering included), on one shared `LLM` instance; runs alternate and the
median of the repetitions is taken. Then k = 8 rollouts of one long prefix (one request, n = 8) against
8 different prefixes of the same length (8 requests, n = 1), each with a fresh prefix so nothing is
cached from before: the wall-time ratio is what sharing the prefill saves (also shown: the one prefix
sent as 8 separate n = 1 requests, where only the prefix cache shares it).

Usage: python benchmarks/engine_throughput.py [--model PATH] [--prompts 16] [--n 4] [--max-tokens 64]
Defaults to the demo model (SmolLM2-135M, float32 on CPU). The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import time

QUESTIONS = [
    "A baker makes {a} loaves a day and sells {b} of them. How many are left after {c} days?",
    "Sam reads {a} pages on Monday and {b} more pages each day after. How many pages by day {c}?",
    "A train travels {a} km per hour for {b} hours, then {c} km more. How far does it go?",
    "There are {a} red and {b} blue marbles; {c} are taken out. How many remain?",
]


def make_requests(count: int, n: int, max_tokens: int):
    from prm_synth.engines.base import GenerationRequest, SamplingOptions

    rng = random.Random(0)
    out = []
    for i in range(count):
        q = QUESTIONS[i % len(QUESTIONS)].format(a=rng.randint(2, 99), b=rng.randint(2, 99), c=rng.randint(2, 9))
        prefix = "Step 1: Let me work through this carefully, one step at a time.\nStep 2:" if i % 2 else ""
        out.append(
            GenerationRequest(
                user=q, assistant_prefix=prefix, n=n, sampling=SamplingOptions(max_tokens=max_tokens, temperature=0.8)
            )
        )
    return out


def long_prefix(rng: random.Random, steps: int) -> str:
    """A made-up solution of `steps` lines; its numbers vary, its shape (and so its length) does not."""
    lines = []
    for s in range(1, steps + 1):
        a, b = rng.randint(100, 999), rng.randint(100, 999)
        lines.append(f"Step {s}: we add {a} and {b} to get {a + b}, then carry the result forward.")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=None, help="model folder (default: the prepared demo model)")
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--n", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--prefix-steps", type=int, default=16, help="lines of the long prefix (~30 tokens each)")
    ap.add_argument("--k", type=int, default=8)
    args = ap.parse_args()

    from vllm import LLM

    from prm_synth.config import VLLMConfig
    from prm_synth.demo_model import demo_model_path
    from prm_synth.engines.base import GenerationRequest, SamplingOptions
    from prm_synth.engines.chat import TOKENIZATION_KWARGS
    from prm_synth.engines.vllm import VLLMEngine, llm_kwargs, sampling_params

    model = args.model or str(demo_model_path())
    config = VLLMConfig(model=model, max_model_len=2048)
    t0 = time.perf_counter()
    llm = LLM(**llm_kwargs(config, model))
    start_s = time.perf_counter() - t0
    engine = VLLMEngine(config, llm=llm)

    requests = make_requests(args.prompts, args.n, args.max_tokens)
    prompts = [engine.render(r) for r in requests]
    params = [sampling_params(r) for r in requests]

    def raw() -> tuple[int, float]:
        t = time.perf_counter()
        outs = llm.generate(prompts, params, use_tqdm=False, tokenization_kwargs=dict(TOKENIZATION_KWARGS))
        return sum(len(c.token_ids) for o in outs for c in o.outputs), time.perf_counter() - t

    def through_engine() -> tuple[int, float]:
        t = time.perf_counter()
        results = engine.generate(requests)
        return sum(r.generated_tokens for r in results), time.perf_counter() - t

    raw()  # warm-up: first-call costs and the prompts' prefix cache, for both paths alike
    # Adjacent pairs in alternating order, ratio per pair, median over pairs: a shared machine's load
    # drifts, and a pair sees (nearly) the same load on both sides.
    rates: dict[str, list[float]] = {"raw": [], "engine": []}
    pair_ratios = []
    for rep in range(args.repeats):
        order = [("raw", raw), ("engine", through_engine)]
        pair = {}
        for name, fn in order if rep % 2 == 0 else order[::-1]:
            tokens, wall = fn()
            pair[name] = tokens / wall
            rates[name].append(pair[name])
        pair_ratios.append(pair["engine"] / pair["raw"])
        print(f"pair {rep}: raw {pair['raw']:.1f} tok/s, engine {pair['engine']:.1f} tok/s", flush=True)
    raw_tps = statistics.median(rates["raw"])
    engine_tps = statistics.median(rates["engine"])
    ratio = statistics.median(pair_ratios)

    # prefix cache: one long prefix k times vs k different prefixes of the same length
    rng = random.Random(1)
    question = "Add up all the numbers in the steps below and give the total."
    sampling = SamplingOptions(max_tokens=16, temperature=0.8)
    tok = engine.tokenizer

    def fresh(n_prefixes: int) -> list[str]:
        return [long_prefix(rng, args.prefix_steps) for _ in range(n_prefixes)]

    def timed(reqs: list[GenerationRequest]) -> float:
        t = time.perf_counter()
        engine.generate(reqs)
        return time.perf_counter() - t

    timed([GenerationRequest(user=question, assistant_prefix=p, sampling=sampling) for p in fresh(1)])  # warm-up
    same_s, sep_s, diff_s, lengths = [], [], [], []
    for _ in range(min(args.repeats, 3)):
        (p,) = fresh(1)
        same_s.append(timed([GenerationRequest(user=question, assistant_prefix=p, n=args.k, sampling=sampling)]))
        (q,) = fresh(1)  # the same prefix as k separate requests: only the prefix cache shares the prefill
        sep_s.append(timed([GenerationRequest(user=question, assistant_prefix=q, sampling=sampling)] * args.k))
        ps = fresh(args.k)
        lengths += [len(tok(x, **TOKENIZATION_KWARGS)["input_ids"]) for x in [p, *ps]]
        diff_s.append(timed([GenerationRequest(user=question, assistant_prefix=x, sampling=sampling) for x in ps]))
    same, sep, diff = statistics.median(same_s), statistics.median(sep_s), statistics.median(diff_s)
    engine.close()
    llm.llm_engine.engine_core.shutdown()

    print()
    print(f"model: {model}  (engine start {start_s:.1f} s, load average {os.getloadavg()[0]:.1f})")
    print(f"workload: {args.prompts} prompts x n={args.n}, max_tokens={args.max_tokens}, median of {args.repeats}")
    print(f"{'path':<28}{'generated tokens/s':>20}")
    print(f"{'(a) raw LLM.generate':<28}{raw_tps:>20.1f}")
    print(f"{'(b) VLLMEngine.generate':<28}{engine_tps:>20.1f}")
    print(f"{'ratio b/a (median of pairs)':<28}{ratio:>20.3f}")
    print(f"prefix tokens {min(lengths)}-{max(lengths)}, k={args.k}, 16 new tokens each")
    print(f"{'one prefix, n=k':<28}{same:>19.2f}s")
    print(f"{'one prefix, k requests':<28}{sep:>19.2f}s")
    print(f"{'k different prefixes':<28}{diff:>19.2f}s")
    print(f"{'prefix-cache speedup (n=k)':<28}{diff / same:>20.2f}")
    print(f"{'  (k separate requests)':<28}{diff / sep:>20.2f}")
    print(
        json.dumps(
            {
                "throughput_ratio": round(ratio, 4),
                "prefix_cache_speedup": round(diff / same, 3),
                "prefix_cache_speedup_separate_requests": round(diff / sep, 3),
                "raw_tokens_per_s": round(raw_tps, 1),
                "engine_tokens_per_s": round(engine_tps, 1),
                "engine_start_s": round(start_s, 1),
            }
        )
    )


if __name__ == "__main__":
    main()
