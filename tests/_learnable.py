"""A learnable PRM fixture: an exported `trl` view whose bad steps say so in words.

A model of any size can learn it in a few steps, so a falling loss means the training loop works
(labels reach the right tokens), not that arithmetic was learned.
"""

from __future__ import annotations

import random
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from prm_synth.export.views import VIEWS


def _row(rng: random.Random, i: int) -> dict:
    n = rng.randint(2, 4)
    first_error = rng.choice([-1, -1, *range(n)])
    steps, labels = [], []
    for s in range(n):
        a, b = rng.randint(1, 50), rng.randint(1, 50)
        bad = s == first_error
        steps.append(f"Step {s + 1}: {a} + {b} = {a + b + (7 if bad else 0)}." + (" Oops, wrong." if bad else ""))
        labels.append(not bad)
        if bad:
            break
    return {
        "prompt": f"Add the numbers of problem {i}.",
        "completions": steps,
        "labels": labels,
        "id": f"r{i}",
        "problem_id": f"p{i}",
    }


def make_learnable_view(root: Path, train: int = 48, test: int = 16, seed: int = 0) -> Path:
    """Write `root/trl/{train,test}-00000-of-00001.parquet`; return `root`."""
    rng = random.Random(seed)
    folder = root / "trl"
    folder.mkdir(parents=True, exist_ok=True)
    for split, n, offset in (("train", train, 0), ("test", test, train)):
        rows = [_row(rng, offset + i) for i in range(n)]
        pq.write_table(
            pa.Table.from_pylist(rows, schema=VIEWS["trl"].columns), folder / f"{split}-00000-of-00001.parquet"
        )
    return root
