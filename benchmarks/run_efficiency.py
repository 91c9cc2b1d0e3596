"""How full the engine stays while the default labeler (binary method, change-point search) annotates: the
streaming scheduler against the ceiling and against the former round-based scheduler, and a whole
pipeline shard (sampling overlapped with labeling) against the same ceiling, on the demo model through vLLM.

It runs the library directly (not the `prm-synth run` CLI, whose Prefect start-up and shard writing
would add a minute here without touching the engine). Three runs on the same engine, each with its own
labeler (`make_labeler(config)`: the changepoint search pools its priors per shard, after its searches) and its
own telemetry window and picture:
- `stream`: the sample stage draws the solutions once (`prm_synth.sampling.sample.sample_solutions`), then the
  labeler's annotators (`annotate_given`) run on `ProbeScheduler`;
- `rounds`: the same solutions on `rounds_scheduler` (benchmarks/rounds_scheduler.py), the former
  round-based loop;
- `pipeline`: `prm_synth.pipeline.process_shard` on the same problems, what `prm-synth run` does per
  shard: sampling and labeling share one engine stream, so a problem's annotators start as soon as
  its own solutions are back (its solutions are sampled afresh: different texts, similar lengths).

Ceiling: the same engine generating the same number of sequences, each from the same prompt and of
the same length (min_tokens = max_tokens = its length, EOS ignored) as in the streaming run, all
submitted at once, from the first submission to the last completion. The two annotation runs are
measured by the engine stream's telemetry (engines/stream.py) from the scheduler's start to its
end: generated tokens over that time, mean sequences in vLLM (at most max_num_seqs) / max_num_seqs.
vLLM's prefix cache is emptied before each of the three, so none finds the others' prompts cached
(rollout prompts are prefill-heavy: a question and a partial solution for a few dozen new tokens, and
both modes probe the same prefixes, so a warm cache would favour whichever runs later).

Usage: python benchmarks/run_efficiency.py [--problems 8] [--samples 2] [--capacity 16] [--out DIR]
The last line printed is one JSON object:
{"efficiency": streaming tokens/s / ceiling tokens/s, "occupancy": streaming mean running / capacity,
 "speedup_vs_rounds": streaming tokens/s / round-based tokens/s,
 "pipeline_efficiency": pipeline tokens/s / ceiling tokens/s, "pipeline_occupancy": ...}.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from rounds_scheduler import rounds_scheduler


def build_config(args: argparse.Namespace) -> Any:
    from prm_synth.config import validate_config

    return validate_config(
        {
            "name": "run-efficiency",
            "problems": {"kind": "builtin", "count": args.problems, "seed": 7, "min_ops": 2, "max_ops": 4},
            "policy": {"kind": "vllm", "model": "smollm2-135m-instruct", "demo": True, "max_model_len": 1024},
            "sampling": {"samples_per_problem": args.samples, "max_tokens": args.max_tokens, "temperature": 0.8},
            "rollouts": {"max_tokens": args.rollout_tokens, "temperature": 0.8},
            "steps": {"strategy": "line"},
            "annotate": {"method": "binary", "probe_batch": 2},
            "run": {"max_in_flight": args.in_flight, "max_batch_requests": 1024},
        }
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--problems", type=int, default=8)
    ap.add_argument("--samples", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=96, help="tokens of a sampled solution")
    ap.add_argument("--rollout-tokens", type=int, default=32, help="tokens of a rollout")
    ap.add_argument("--capacity", type=int, default=16, help="vLLM max_num_seqs")
    ap.add_argument("--in-flight", type=int, default=256, help="annotators at once (max_in_flight)")
    ap.add_argument("--out", default=None, help="folder for the engine pictures (default: a temporary one)")
    args = ap.parse_args()

    from vllm import LLM, SamplingParams
    from vllm.sampling_params import RequestOutputKind

    from prm_synth.annotate.labeler import make_labeler
    from prm_synth.annotate.scheduler import ProbeScheduler, SolutionJob
    from prm_synth.demo_model import demo_model_path
    from prm_synth.engines.base import GenerationRequest, GenerationResult, Outcome, SamplingOptions
    from prm_synth.engines.chat import TOKENIZATION_KWARGS
    from prm_synth.engines.stream import stream_for
    from prm_synth.engines.vllm import VLLMEngine, llm_kwargs
    from prm_synth.pipeline import iter_shards, process_shard
    from prm_synth.problems.sources import iter_problems
    from prm_synth.prompting.prompts import policy_user_prompt
    from prm_synth.records import Problem
    from prm_synth.sampling.sample import sample_solutions

    config = build_config(args)
    model = str(demo_model_path())
    t0 = time.perf_counter()
    llm = LLM(**llm_kwargs(config.policy, model), max_num_seqs=args.capacity)
    start_s = time.perf_counter() - t0

    class RecordingEngine(VLLMEngine):
        """Remembers every request and its result (the ceiling replays the streaming run's sequences)."""

        record = False

        def __init__(self, *a: Any, **k: Any) -> None:
            super().__init__(*a, **k)
            self.seen: list[tuple[GenerationRequest, GenerationResult]] = []
            self._asked: dict[int, GenerationRequest] = {}

        def add(self, request_id: int, request: GenerationRequest) -> None:
            self._asked[request_id] = request
            super().add(request_id, request)

        def step(self) -> list[tuple[int, Outcome]]:
            finished = super().step()
            if self.record:
                self.seen += [(self._asked[rid], r) for rid, r in finished if isinstance(r, GenerationResult)]
            return finished

    engine = RecordingEngine(config.policy, llm=llm)
    stream = stream_for(engine)
    problems = [p for p in iter_problems(config.problems) if isinstance(p, Problem)]
    t = time.perf_counter()
    sampled = sample_solutions(engine, problems, config)
    sample_s = time.perf_counter() - t
    describe = make_labeler(config).budget_line()

    def jobs() -> list[SolutionJob]:
        labeler = make_labeler(config)  # a fresh labeler per run: nothing pooled carries over
        return [
            SolutionJob(
                key=s.id,
                problem_key=s.problem.id,
                user_prompt=policy_user_prompt(s.problem.question),
                gold=s.problem.gold_answer,
                annotator=labeler.annotate_given(s.steps, s.verdict.status, s.id),
            )
            for s in sampled.solutions
        ]

    r = config.rollouts
    sampling = SamplingOptions(max_tokens=r.max_tokens, temperature=r.temperature, top_p=r.top_p)
    runs: dict[str, dict[str, Any]] = {}
    out_dir = Path(args.out or tempfile.mkdtemp(prefix="run-efficiency-"))
    for mode, make_scheduler in (("stream", ProbeScheduler), ("rounds", rounds_scheduler)):
        engine.record = mode == "stream"
        sched = make_scheduler(engine, sampling, config.run.max_batch_requests, config.run.max_in_flight, label=mode)
        llm.reset_prefix_cache()
        before = stream.telemetry.totals()
        t = time.perf_counter()
        done = sum(1 for _ in sched.run(jobs()))
        wall = time.perf_counter() - t
        window = stream.telemetry.window(before, stream.telemetry.totals())  # the engine's own stream, either mode
        stream.telemetry.save(out_dir, name=f"annotate-{mode}", start=before)
        runs[mode] = {
            "annotated": done,
            "rollouts": sched.stats.rollouts,
            "tokens": window.tokens,
            "prompt_tokens": sched.stats.prompt_tokens,
            "seconds": wall,
            "tokens_per_s": window.tokens_per_s,
            "occupancy": window.occupancy,
            "mean_running": window.mean_running,
            "batches": sched.stats.engine_calls,
        }
        print(f"{mode}: {json.dumps({k: round(v, 3) for k, v in runs[mode].items()})}", flush=True)
    engine.record = False

    # A pipeline shard: sampling and labeling on one stream, as `prm-synth run` runs each shard.
    shard = next(iter_shards(config))
    llm.reset_prefix_cache()
    before = stream.telemetry.totals()
    t = time.perf_counter()
    out = process_shard(engine, config, shard, config.fingerprint())
    wall = time.perf_counter() - t
    window = stream.telemetry.window(before, stream.telemetry.totals())
    stream.telemetry.save(out_dir, name="pipeline-shard", start=before)
    runs["pipeline"] = {
        "annotated": len(out.records),
        "rollouts": out.stats.rollouts,
        "tokens": window.tokens,
        "seconds": wall,
        "tokens_per_s": window.tokens_per_s,
        "occupancy": window.occupancy,
        "mean_running": window.mean_running,
    }
    print(f"pipeline: {json.dumps({k: round(v, 3) for k, v in runs['pipeline'].items()})}", flush=True)

    # Ceiling: the streaming run's sequences, same prompts and lengths, all at once.
    sequences = [(req, c.generated_tokens) for req, res in engine.seen for c in res.completions]
    tok = engine.tokenizer
    prompts = [tok(engine.render(req), **TOKENIZATION_KWARGS).input_ids for req, _ in sequences]
    llm.reset_prefix_cache()
    t = time.perf_counter()
    for i, ((_req, length), ids) in enumerate(zip(sequences, prompts, strict=True)):
        params = SamplingParams(max_tokens=max(1, length), min_tokens=max(1, length), ignore_eos=True, temperature=0.8)
        params.output_kind = RequestOutputKind.FINAL_ONLY
        llm.llm_engine.add_request(f"ceiling-{i}", {"prompt_token_ids": ids}, params)
    generated = 0
    running_time = 0.0
    last = time.perf_counter()
    pending = len(sequences)
    while pending:
        step_start = time.perf_counter()
        outs = llm.llm_engine.step()
        now = time.perf_counter()
        running_time += min(pending, args.capacity) * (now - step_start)
        for o in outs:
            if o.finished:
                pending -= 1
                generated += len(o.outputs[0].token_ids)
        last = now
    ceiling_s = last - t
    ceiling = {
        "sequences": len(sequences),
        "tokens": generated,
        "seconds": ceiling_s,
        "tokens_per_s": generated / ceiling_s,
        "occupancy": running_time / ceiling_s / args.capacity,
    }
    engine.close()
    llm.llm_engine.engine_core.shutdown()

    s, rd, pipe = runs["stream"], runs["rounds"], runs["pipeline"]
    efficiency = s["tokens_per_s"] / ceiling["tokens_per_s"]
    print()
    print(f"model: {model} (vLLM CPU, float32, max_num_seqs {args.capacity}); engine start {start_s:.1f} s")
    print(
        f"workload: {len(problems)} builtin problems x {args.samples} samples -> {len(sampled.solutions)} solutions "
        f"(sampled in {sample_s:.1f} s); labeler: {describe}; rollouts <= {args.rollout_tokens} tokens; "
        f"load average {os.getloadavg()[0]:.1f}"
    )
    print(f"{'run':<26}{'rollouts':>9}{'tokens':>8}{'seconds':>9}{'tokens/s':>10}{'occupancy':>11}")
    table = (
        ("annotate, stream", s),
        ("annotate, rounds", rd),
        ("pipeline shard (overlap)", pipe),
        ("ceiling (all at once)", ceiling),
    )
    for name, row in table:
        rollouts = row.get("rollouts", row.get("sequences"))
        print(
            f"{name:<26}{rollouts:>9}{row['tokens']:>8}{row['seconds']:>9.1f}{row['tokens_per_s']:>10.1f}"
            f"{row['occupancy']:>11.2f}"
        )
    print(f"engine pictures: {out_dir}")
    print(
        json.dumps(
            {
                "efficiency": round(efficiency, 3),
                "occupancy": round(s["occupancy"], 3),
                "speedup_vs_rounds": round(s["tokens_per_s"] / rd["tokens_per_s"], 3),
                "rounds_efficiency": round(rd["tokens_per_s"] / ceiling["tokens_per_s"], 3),
                "rounds_occupancy": round(rd["occupancy"], 3),
                "wall_speedup_vs_rounds": round(rd["seconds"] / s["seconds"], 3),
                "ceiling_tokens_per_s": round(ceiling["tokens_per_s"], 1),
                "stream_tokens_per_s": round(s["tokens_per_s"], 1),
                "pipeline_efficiency": round(pipe["tokens_per_s"] / ceiling["tokens_per_s"], 3),
                "pipeline_occupancy": round(pipe["occupancy"], 3),
            }
        )
    )


if __name__ == "__main__":
    main()
