"""Rows before and after a change: a digest of every row a pipeline writes, fingerprint fields left out.

Runs each pipeline through `prm-synth run` (the user's path, so it works across any internal change), reads
the data and rejected shards, drops the fields that name the config fingerprint, and hashes the rows in
id order. Save the JSON of one revision and compare it with another's:

    python benchmarks/rows_identical.py --save before.json          # on the old revision
    python benchmarks/rows_identical.py --compare before.json       # on the new one

Pipelines: pipelines/simulated.yaml, pipelines/simulated-consensus.yaml, and variants of simulated.yaml that
reach every method and search test (mc stopping at the first zero; binary with sprt and with fixed plus
verified correct solutions; OmegaPRM with fixed (trees saved), sprt and calibrated). Last line: one JSON object
{"identical": bool, "pipelines": {name: {"rows": n, "rejected": n, "digest": "..."}}}.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import pyarrow as pa
import yaml

ROOT = Path(__file__).resolve().parent.parent
LIMIT = 120
FINGERPRINT_FIELDS = {"config_fingerprint"}
# Columns added to the record schema after a76cd92 (additive changes): left out so the digests compare
# the columns both revisions write.
ADDED_COLUMNS = {
    "p_good",
    "unlabeled_reason",
    "verify_chains",
    "verify_dropped",
    "verify_model",
    "verify_prompt_version",
}


def variants(tmp: Path) -> dict[str, Path]:
    base = yaml.safe_load((ROOT / "pipelines/simulated.yaml").read_text())
    out = {
        "simulated": ROOT / "pipelines/simulated.yaml",
        "simulated-consensus": ROOT / "pipelines/simulated-consensus.yaml",
    }
    for name, annotate in {
        "simulated-binary": {"method": "binary", "k": 8, "search_test": "sprt"},
        "simulated-binary-fixed": {"method": "binary", "k": 8, "search_test": "fixed", "verify_correct": 0.2},
        "simulated-mc-stop": {"method": "mc", "k": 4, "stop_at_first_zero": True},
        # Written in the pre-0.2 layout on purpose: old pipeline files must keep loading.
        "simulated-omegaprm": {"method": "omegaprm", "omega_k": 8, "omega_rollout_budget": 120, "save_trees": True},
        "simulated-omegaprm-sprt": {"method": "omegaprm", "k": 8, "rollout_budget": 120, "search_test": "sprt"},
        "simulated-omegaprm-calibrated": {
            "method": "omegaprm",
            "k": 8,
            "rollout_budget": 120,
            "search_test": "calibrated",
        },
    }.items():
        path = tmp / f"{name}.yaml"
        path.write_text(yaml.safe_dump(base | {"name": name, "annotate": annotate}))
        out[name] = path
    return out


def _without_fingerprint(row: dict) -> dict:
    out = {k: v for k, v in row.items() if k not in FINGERPRINT_FIELDS | ADDED_COLUMNS}
    if isinstance(out.get("payload"), str) and out["payload"].startswith("{"):  # a rejected row's record
        try:
            payload = json.loads(out["payload"])
        except ValueError:
            return out
        if isinstance(payload, dict):
            out["payload"] = {k: v for k, v in payload.items() if k not in FINGERPRINT_FIELDS | ADDED_COLUMNS}
    return out


def rows_of(folder: Path) -> list[dict]:
    rows: list[dict] = []
    for path in sorted(folder.glob("*.arrow")):
        with pa.ipc.open_stream(pa.OSFile(str(path))) as reader:
            rows += reader.read_all().to_pylist()
    return sorted((_without_fingerprint(r) for r in rows), key=lambda r: r["id"])


def digest(rows: list[dict]) -> str:
    blob = json.dumps(rows, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def run_pipeline(path: Path, out: Path) -> dict:
    cmd = [sys.executable, "-m", "prm_synth.cli", "run", str(path), "--out", str(out), "--limit", str(LIMIT), "--json"]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, cwd=ROOT)
    data, rejected = rows_of(out / "data"), rows_of(out / "rejected")
    trees = sorted((out / "trees").glob("*.json")) if (out / "trees").exists() else []
    tree_digest = hashlib.sha256(b"".join(p.read_bytes() for p in trees)).hexdigest()[:16] if trees else None
    return {
        "rows": len(data),
        "rejected": len(rejected),
        "digest": digest(data),
        "rejected_digest": digest(rejected),
        "trees_digest": tree_digest,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--save", type=Path)
    ap.add_argument("--compare", type=Path)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        result = {name: run_pipeline(path, Path(tmp) / "runs" / name) for name, path in variants(Path(tmp)).items()}
    identical = None
    print(f"{'pipeline':<22}{'rows':>6}{'rejected':>10}  digest            rejected digest   same")
    before = json.loads(args.compare.read_text())["pipelines"] if args.compare else {}
    for name, r in result.items():
        same = before.get(name) == r if before else None
        print(f"{name:<22}{r['rows']:>6}{r['rejected']:>10}  {r['digest']}  {r['rejected_digest']}  {same}")
    if before:
        identical = all(before.get(n) == r for n, r in result.items())
    if args.save:
        args.save.write_text(json.dumps({"pipelines": result}, indent=2, sort_keys=True))
    print(json.dumps({"identical": identical, "pipelines": result}, sort_keys=True))


if __name__ == "__main__":
    main()
