"""A real `prm-synth run` against an OpenAI-compatible server that refuses one problem (issue 17's measure).

The server is the simulated policy behind `/v1/completions` (tests/fault_proxy.py); it answers HTTP 400
("maximum context length ... exceeded") to every prompt of one problem. The run uses `policy.kind: openai`
and the default method; everything else is the pipeline's defaults. Expected: exit 0, that problem
rejected with the server's message, every other problem labeled, the counts reconciled. Prints a
table and, last, one JSON line: {"exit_code", "wall_seconds", "problems_labeled", "rejected_by_reason",
"reconciles", "refused_detail_names_server_message", ...}.

    python benchmarks/refused_problem_run.py [--problems 60] [--victim 17] [--shard-size N]
        [--long-prefixes-only]   # refuse only the victim's prompts that carry a long prefix (rollouts)
        [--transient-every N]    # and answer every N-th request 503 (retried by the engine)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

import yaml  # noqa: E402
from fault_proxy import FaultProxy, SimulatedCompletionsServer  # noqa: E402

from prm_synth.config import SimulatedPolicyConfig, validate_config  # noqa: E402
from prm_synth.problems.sources import iter_problems  # noqa: E402
from prm_synth.prompting.prompts import policy_user_prompt  # noqa: E402
from prm_synth.store.readers import iter_tables  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--problems", type=int, default=60)
    ap.add_argument("--victim", type=int, default=17, help="index of the problem the server refuses")
    ap.add_argument("--shard-size", type=int, default=None, help="output.shard_size (default: the pipeline's)")
    ap.add_argument("--long-prefixes-only", action="store_true", help="refuse only continuation prompts")
    ap.add_argument("--transient-every", type=int, default=0, help="every N-th request gets a 503 first")
    args = ap.parse_args()

    problems = {"kind": "builtin", "count": args.problems, "seed": 0}
    loaded = list(iter_problems(validate_config({"problems": problems, "policy": {"kind": "simulated"}}).problems))
    victim = loaded[args.victim]
    with tempfile.TemporaryDirectory(prefix="prm-synth-refused-") as tmp:
        out = Path(tmp) / "out"
        # a continuation prompt is the sampling prompt ("user" + a blank line) plus the prefix: from 20 chars on
        from_chars = len(policy_user_prompt(victim.question)) + 2 + 20 if args.long_prefixes_only else 0
        server = SimulatedCompletionsServer(victim.question, SimulatedPolicyConfig(), refuse_from_chars=from_chars)
        faults = ["pass"] * (args.transient_every - 1) + ["503"] if args.transient_every else []
        with server, FaultProxy(server.url, faults, repeat=True) as proxy:
            config = {
                "name": "refused",
                "problems": problems,
                "policy": {"kind": "openai", "model": "simulated", "base_url": f"{proxy.url}/v1"},
            } | ({"output": {"shard_size": args.shard_size}} if args.shard_size else {})
            path = Path(tmp) / "pipeline.yaml"
            path.write_text(yaml.safe_dump(config))
            env = os.environ | {"PYTHONPATH": str(ROOT), "PREFECT_HOME": str(Path(tmp) / "prefect")}
            cmd = [sys.executable, "-m", "prm_synth.cli", "run", str(path), "--out", str(out), "--json"]
            start = time.perf_counter()
            done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1200)
            wall = time.perf_counter() - start
            calls, refused = server.calls, server.refused
        if done.returncode != 0:
            print(done.stdout[-3000:], done.stderr[-3000:], sep="\n")
        summary = json.loads(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 else {}
        rejected = [row for table in iter_tables(out, "rejected") for row in table.to_pylist()] if summary else []
    victim_rows = [r for r in rejected if r["problem_id"] == victim.id]
    result = {
        "exit_code": done.returncode,
        "wall_seconds": round(wall, 1),
        "problems_in": summary.get("problems_in"),
        "problems_labeled": summary.get("problems_labeled"),
        "rows": summary.get("rows"),
        "rejected_by_reason": summary.get("rejected_by_reason"),
        "requests_refused": summary.get("requests_refused"),
        "requests_retried": summary.get("requests_retried"),
        "shards_failed": summary.get("shards_failed"),
        "reconciles": summary.get("reconciles"),
        "only_victim_rejected": bool(rejected) and {r["problem_id"] for r in rejected} == {victim.id},
        "refused_detail_names_server_message": bool(victim_rows)
        and all("maximum context length is 2048" in (r["detail"] or "") for r in victim_rows),
        "victim_rejected_at": sorted({r["stage"] for r in victim_rows}),
        "http_calls": calls,
        "http_refused": refused,
    }
    width = max(map(len, result))
    for key, value in result.items():
        print(f"{key:<{width}}  {value}")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
