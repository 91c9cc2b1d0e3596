"""Checks `prm-synth run` makes before any work (and before Prefect is imported): each bad input ends
in one line naming what is wrong, instead of a traceback after a server start."""

from __future__ import annotations

import logging
import os
from pathlib import Path

from prm_synth.config import FileSource, HFSource, PipelineConfig, SolutionsSource
from prm_synth.config.identity import resume_decision
from prm_synth.errors import PrmSynthInputError
from prm_synth.store.layout import DatasetError
from prm_synth.store.readers import read_manifest

OUTPUT_SUBFOLDERS = ("data", "rejected", "shards", "trees")
MANIFEST = "manifest.json"

log = logging.getLogger(__name__)


class PreflightError(PrmSynthInputError):
    """An input that would fail the run; the message is one line."""


def default_out_dir(config: PipelineConfig) -> Path:
    """runs/<name>, for a name that is a plain folder name (so no name can write outside runs/)."""
    name = config.name
    if name in ("", ".", "..") or any(c in name for c in ("/", "\\", "\0")) or name != name.strip():
        raise PreflightError(
            f"pipeline name {name!r} is not a plain folder name, and without --out it names the output "
            "folder runs/<name>: rename it or pass --out"
        )
    return Path("runs") / name


def check_pipeline_path(path: Path) -> None:
    if path.is_dir():
        raise PreflightError(f"pipeline path {path} is a folder; give the pipeline's YAML file")


def check_output_folder(out: Path) -> None:
    """The folder (or the first existing folder above it) must be a writable folder, and so must its
    data/rejected/shards/trees subfolders where they exist."""
    if out.exists() and not out.is_dir():
        raise PreflightError(f"--out {out} is a file, not a folder")
    if out.exists():
        for sub in OUTPUT_SUBFOLDERS:
            if (out / sub).exists() and not (out / sub).is_dir():
                raise PreflightError(f"{out / sub} is a file where the output needs a folder; use another --out")
        for folder in [out, *(out / s for s in OUTPUT_SUBFOLDERS if (out / s).is_dir())]:
            if not os.access(folder, os.W_OK | os.X_OK):
                raise PreflightError(f"output folder {folder} is not writable")
        return
    parent = out.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise PreflightError(f"--out {out} lies under {parent}, which is a file, not a folder")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise PreflightError(f"cannot create --out {out}: {parent} is not writable")


def check_same_config(out: Path, config: PipelineConfig, say_notes: bool = True) -> PipelineConfig:
    """Refuse an output folder that holds a dataset of another config, naming the keys that differ
    (config/identity.py decides). Returns the config to run: `config`, or, where the folder was made under
    a default that has changed since and the file leaves that key out, `config` with the folder's value
    (a note says so, unless `say_notes` is off: the worker of `prm-synth run` checks again what its
    command checked and said already), so the folder resumes with the rows it holds."""
    path = out / MANIFEST
    if not path.exists():
        return config
    try:
        manifest = read_manifest(out)
    except (DatasetError, OSError):
        raise PreflightError(f"{path} is unreadable; use another --out, or --overwrite to replace the folder") from None
    decision = resume_decision(config, manifest)
    if decision.config is None:
        raise PreflightError(f"{out} {decision.refusal}")
    for note in decision.notes if say_notes else []:
        log.warning("%s: %s", out, note)
    return decision.config


def check_problem_source(config: PipelineConfig, limit: int | None = None) -> None:
    """Open a problem file (cheap) so that a missing or unsupported one fails before anything is written,
    and, for the simulated policy, read its first `limit` problems: it cannot solve foreign text.
    Hugging Face sources are opened by the run itself (opening one can mean a download), except for the
    simulated policy (a test instrument): its first shard is read here, as the flow would."""
    simulated = config.policy.kind == "simulated"
    local = isinstance(config.problems, FileSource) or (
        isinstance(config.problems, SolutionsSource) and config.problems.path is not None
    )
    if not local and not (simulated and isinstance(config.problems, HFSource)):
        return
    from itertools import islice

    from prm_synth.problems.given import problems_in  # a given solution's question too
    from prm_synth.problems.sources import ProblemSourceError, iter_problems
    from prm_synth.simulated.solvable import PolicyCannotSolveError, check_policy_can_solve

    if isinstance(config.problems, HFSource):
        limit = min(limit or config.output.shard_size, config.output.shard_size)
    try:
        items = iter(iter_problems(config.problems))
        if simulated:
            first = islice(items, limit)
            check_policy_can_solve(config.policy, ((p.id, p.question) for p in problems_in(first)))
        else:
            next(items, None)
    except (ProblemSourceError, PolicyCannotSolveError) as e:
        raise PreflightError(str(e)) from None
    except OSError as e:
        raise PreflightError(f"problem file {config.problems.path}: {e.strerror or e}") from None


def checked_run(
    config: PipelineConfig,
    out: Path | None,
    limit: int | None,
    dry_run: bool,
    overwrite: bool,
    say_notes: bool = True,
) -> tuple[PipelineConfig, Path]:
    """The checks a run passes before it starts (`prm-synth run` and `prm_synth.run` alike): its folder
    (default: `default_out_dir`) is writable and, unless overwritten, labeled by this config; its problem
    source is readable. The config as the folder's notes leave it, and the folder."""
    out_dir = out if out is not None else default_out_dir(config)
    if not dry_run:
        check_output_folder(out_dir)
        if not overwrite:
            config = check_same_config(out_dir, config, say_notes=say_notes)
    check_problem_source(config, limit)
    return config, out_dir
