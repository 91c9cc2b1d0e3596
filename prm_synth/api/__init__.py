"""The Python API: run a pipeline and load what it made, in a few lines (a notebook, a script).

    import prm_synth
    summary = prm_synth.run("pipelines/simulated.yaml", out="runs/sim", limit=20)
    rows = prm_synth.load("runs/sim")   # a datasets.Dataset of the kept rows

`run` is `prm-synth run` without the command line: the same checks before any work (each bad input raises a
`PrmSynthError` whose message is the command's `error:` line), the same flow in this process, the same
resume; it returns the run summary (`RunSummary`: counts, label statistics, what it cost; `to_dict()` is
the command's `--json`). `load` reads the finished shards, each checked against its checksum.

On the floor of the commands: it drives the flow, as they do. `prm_synth.run` and `prm_synth.load` are
looked up here on first use (the package's `__getattr__`), so `import prm_synth` stays light.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import datasets

    from prm_synth.config import PipelineConfig
    from prm_synth.store.summary import RunSummary

__all__ = ["load", "run"]


def run(
    pipeline: str | Path | PipelineConfig,
    out: str | Path | None = None,
    limit: int | None = None,
    *,
    overwrite: bool = False,
    dry_run: bool = False,
    retry_refused: bool = False,
) -> RunSummary:
    """Run `pipeline` (a YAML file or a `PipelineConfig`) into `out` (default runs/<name>) and return its
    summary; `limit`: only the first N problems. The keywords are the command's flags of the same name.
    Engines are shut down before it returns (a vLLM engine gives its GPU memory back)."""
    from prm_synth.cli.environment import prepare_environment, quiet_expected_failures

    prepare_environment()  # no telemetry notice, Prefect's INFO lines off (a level the user set stays)
    config = _config(pipeline)
    from prm_synth.cli import preflight

    config, out_dir = preflight.checked_run(config, Path(out) if out is not None else None, limit, dry_run, overwrite)
    quiet_expected_failures()
    from flows.synthesize import synthesize
    from prm_synth.engines import close_engines

    try:
        return synthesize(
            config=config,
            out_dir=str(out_dir),
            limit=limit,
            overwrite=overwrite,
            dry_run=dry_run,
            retry_refused=retry_refused,
        )
    finally:
        close_engines()


def load(out: str | Path, rejected: bool = False) -> datasets.Dataset:
    """The kept rows of a run's folder as a `datasets.Dataset` (`rejected=True`: its rejected rows, each
    with its stage and reason). Every shard's checksum is checked first; a folder a run is writing now is
    refused (its rows would not be whole)."""
    import datasets
    import pyarrow as pa

    from prm_synth.records import RECORD_SCHEMA, REJECTED_SCHEMA
    from prm_synth.store.lock import reading
    from prm_synth.store.readers import iter_tables, read_manifest

    kind = "rejected" if rejected else "data"
    with reading(Path(out)):
        read_manifest(out)  # a folder that is not a run fails here, naming it
        tables = list(iter_tables(out, kind))
    schema = tables[0].schema if tables else REJECTED_SCHEMA if rejected else RECORD_SCHEMA
    filled = [t for t in tables if t.num_rows]  # a shard with no rows of this kind holds no batch to join
    table = pa.concat_tables(filled, promote_options="default") if filled else pa.Table.from_pylist([], schema=schema)
    return datasets.Dataset(table)


def _config(pipeline: Any) -> PipelineConfig:
    from prm_synth.config import PipelineConfig, load_config

    if isinstance(pipeline, PipelineConfig):
        return pipeline
    from prm_synth.cli import preflight

    path = Path(pipeline)
    preflight.check_pipeline_path(path)
    return load_config(path)
