"""The export flow: trainer-ready views of a finished dataset, to a folder or the Hugging Face Hub.

The work lives in prm_synth.export.hub. The Hub token is never a flow parameter (parameters are stored by
the Prefect server and shown in its UI): it comes from HF_TOKEN or the worker's Hugging Face login.
"""

from __future__ import annotations

from typing import Any

from prefect import flow

from prm_synth.export.hub import export_to_dir, export_to_hub, plan_export


@flow(name="export-dataset", log_prints=True)  # prints become run logs (and work when called as .fn)
def export_dataset_flow(
    dataset_dir: str,
    repo_id: str | None = None,
    to_dir: str | None = None,
    formats: list[str] | None = None,
    private: bool = False,
    test_fraction: float = 0.1,
    tokenizer: str | None = None,
    marker: str | None = None,
) -> dict[str, Any]:
    """Export `dataset_dir` to exactly one of `repo_id` (the Hub) or `to_dir` (the same repo layout).

    `tokenizer` (a Hub name or a folder the worker can read) checks every view against its trainer's
    tokenization; the openrlhf and qwen views need it (see prm_synth.export.hub.plan_export).
    """
    if (repo_id is None) == (to_dir is None):
        raise ValueError("give exactly one of repo_id and to_dir")
    plan = plan_export(dataset_dir, formats, tokenizer, marker)
    chosen = plan.formats
    if to_dir is not None:
        result = export_to_dir(dataset_dir, to_dir, test_fraction=test_fraction, plan=plan)
    else:
        assert repo_id is not None
        result = export_to_hub(dataset_dir, repo_id, private=private, test_fraction=test_fraction, plan=plan)
    rows = {name: {s: v["rows"] for s, v in view["splits"].items()} for name, view in result["views"].items()}
    print(f"exported {', '.join(chosen)} to {repo_id or to_dir}: {rows}")
    return {"repo_id": repo_id, "to_dir": to_dir, "files": result["files"], "rows": rows}
