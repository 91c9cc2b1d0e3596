"""Pictures of what a finished run holds (`prm-synth inspect OUT --plots DIR`, and the exported card).

Each picture answers one question a researcher asks before training on the labels:
- label_share_by_step.png: at each step position, how many steps are good, bad, unlabeled?
- first_error_position.png: where do the first errors fall?
- p_good.png: how sure are the labels (per step, the probability they finally give the prefix: the
  consensus's posterior where it set them, else the default labeler's P(good); export/rows.py)?
- unlabeled_and_rejected.png: why are steps left unlabeled, and why were rows rejected?
- cost_per_row.png: what did labeling a row cost (rollouts, tokens)?
- judge_accuracy.png (judged runs): how often was the judge right, on right- and wrong-answer rows?

A picture whose data the run lacks (no p_good under per-step MC, no judge) is not drawn, and the
reason is returned with the written files. Read from the checked shards, one pass over the rows.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prm_synth.errors import PrmSynthError
from prm_synth.export.rows import label_probability

PICTURES_FOLDER = "plots"  # in an export: the card links the pictures there
MAX_POSITIONS = 30  # step positions drawn one bar each; later steps share the last bar
COLORS = {"good": "tab:green", "bad": "tab:red", "unlabeled": "tab:gray"}


@dataclass
class RunFigures:
    """The counts the pictures are drawn from (one pass over the rows)."""

    by_position: list[Counter[str]] = field(default_factory=list)
    first_errors: Counter[int] = field(default_factory=Counter)
    p_good: dict[str, list[float]] = field(default_factory=lambda: {k: [] for k in COLORS})
    unlabeled: Counter[str] = field(default_factory=Counter)
    rejected: Counter[str] = field(default_factory=Counter)
    rollouts: list[int] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    rows: int = 0


@dataclass
class Pictures:
    """What `draw` wrote (file name: path, in the order of TITLES), and what it left out with the reason."""

    written: dict[str, Path] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)


TITLES = {
    "label_share_by_step.png": "label share by step position",
    "first_error_position.png": "first error position",
    "p_good.png": "p_good of every step, by its label",
    "unlabeled_and_rejected.png": "why steps are unlabeled, why rows were rejected",
    "cost_per_row.png": "what a row cost",
    "judge_accuracy.png": "the judge's measured accuracy by answer class",
}


def _kind(label: bool | None) -> str:
    return "unlabeled" if label is None else ("good" if label else "bad")


def gather(root: str | Path) -> RunFigures:
    """The run's figures from its data and rejected shards."""
    from prm_synth.store.readers import iter_records

    figures = RunFigures()
    for row in iter_records(root, "data"):
        figures.rows += 1
        labels = row["labels"]
        # the labels' final probability (the consensus's where it set them): p_good.png shows what they rest on
        p_good = label_probability(row) or [None] * len(labels)
        reasons = row.get("unlabeled_reason") or [None] * len(labels)
        for i, label in enumerate(labels):
            position = min(i, MAX_POSITIONS)
            while len(figures.by_position) <= position:
                figures.by_position.append(Counter())
            figures.by_position[position][_kind(label)] += 1
            if p_good[i] is not None:
                figures.p_good[_kind(label)].append(float(p_good[i]))
            if label is None:
                figures.unlabeled[reasons[i] or "not given"] += 1
        if row["first_error_mc"] >= 0:
            figures.first_errors[row["first_error_mc"]] += 1
        figures.rollouts.append(int(row["rollouts"]))
        figures.tokens.append(int(row["tokens"]))
    for row in iter_records(root, "rejected"):
        figures.rejected[str(row.get("reason") or "not given")] += 1
    return figures


def draw(root: str | Path, out: str | Path) -> Pictures:
    """Write the run's pictures as PNGs into `out`; PlotsUnavailableError without matplotlib."""
    from prm_synth.store.summary import summarize

    plt = _pyplot()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    figures = gather(root)
    summary = summarize(root)
    pictures = Pictures()
    name = Path(root).resolve().name
    for file, painter in (
        ("label_share_by_step.png", _label_share),
        ("first_error_position.png", _first_errors),
        ("p_good.png", _p_good),
        ("unlabeled_and_rejected.png", _reasons),
        ("cost_per_row.png", _cost),
        ("judge_accuracy.png", lambda ax_fig, f: _judge(ax_fig, summary)),
    ):
        fig = plt.figure(figsize=(8, 4.5))
        why_not = painter(fig, figures)
        if why_not:
            pictures.skipped[file] = why_not
        else:
            fig.suptitle(f"{name}: {fig.get_label()}", fontsize=11)
            fig.tight_layout()
            fig.savefig(out / file, dpi=90)
            pictures.written[file] = out / file
        plt.close(fig)
    return pictures


class PlotsUnavailableError(PrmSynthError, RuntimeError):
    """matplotlib is not installed."""


def _pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")  # no display: files only
        import matplotlib.pyplot as plt
    except ImportError as e:
        raise PlotsUnavailableError("the pictures need matplotlib: pip install matplotlib") from e
    return plt


# ---------------------------------------------------------------- one painter a picture: None when drawn, else why not
def _label_share(fig: Any, f: RunFigures) -> str | None:
    if not f.by_position:
        return "no labeled rows"
    fig.set_label("label share by step position")
    ax = fig.add_subplot()
    positions = list(range(len(f.by_position)))
    bottom = [0.0] * len(positions)
    for kind, color in COLORS.items():
        share = [c[kind] / max(1, sum(c.values())) for c in f.by_position]
        ax.bar(positions, share, bottom=bottom, color=color, label=kind, width=0.85)
        bottom = [b + s for b, s in zip(bottom, share, strict=True)]
    ax.set_xlabel(f"step position (last bar: {MAX_POSITIONS} and later)" if len(positions) > MAX_POSITIONS else "step")
    ax.set_ylabel("share of steps at that position")
    ax.set_ylim(0, 1)
    ax2 = ax.twinx()
    ax2.plot(positions, [sum(c.values()) for c in f.by_position], color="black", marker=".", label="steps")
    ax2.set_ylabel("steps at that position")
    ax2.set_ylim(bottom=0)
    ax.legend(loc="upper right", fontsize=8)
    return None


def _first_errors(fig: Any, f: RunFigures) -> str | None:
    if not f.first_errors:
        return "no row has a bad label"
    fig.set_label(f"first error position ({sum(f.first_errors.values())} of {f.rows} rows)")
    ax = fig.add_subplot()
    steps = range(max(f.first_errors) + 1)
    ax.bar(list(steps), [f.first_errors[s] for s in steps], color=COLORS["bad"])
    ax.set_xlabel("step of the first bad label")
    ax.set_ylabel("rows")
    return None


def _p_good(fig: Any, f: RunFigures) -> str | None:
    if not any(f.p_good.values()):
        return "no p_good in this run (only the default labeler, search_test: changepoint, estimates it)"
    fig.set_label("p_good of every step, by its label")
    ax = fig.add_subplot()
    kinds = [k for k in COLORS if f.p_good[k]]
    ax.hist([f.p_good[k] for k in kinds], bins=20, range=(0, 1), stacked=True, color=[COLORS[k] for k in kinds])
    ax.legend([f"{k} ({len(f.p_good[k])})" for k in kinds], fontsize=8)
    ax.set_xlabel("p_good: probability that the prefix is still correct")
    ax.set_ylabel("steps")
    ax.set_yscale("log")
    return None


def _reasons(fig: Any, f: RunFigures) -> str | None:
    if not f.unlabeled and not f.rejected:
        return "every step labeled and no row rejected"
    fig.set_label("why steps are unlabeled, why rows were rejected")
    for index, (title, counts, color) in enumerate(
        (("unlabeled steps", f.unlabeled, COLORS["unlabeled"]), ("rejected rows", f.rejected, "tab:orange"))
    ):
        ax = fig.add_subplot(1, 2, index + 1)
        items = counts.most_common(10)
        if not items:
            ax.text(0.5, 0.5, "none", ha="center", va="center", transform=ax.transAxes)
            ax.set_axis_off()
        else:
            ax.barh([k for k, _ in items][::-1], [v for _, v in items][::-1], color=color)
            ax.set_xlabel("count")
        ax.set_title(f"{title} ({sum(counts.values())})", fontsize=10)
    return None


def _cost(fig: Any, f: RunFigures) -> str | None:
    if not f.rollouts:
        return "no labeled rows"
    fig.set_label("what a row cost")
    for index, (values, what) in enumerate(((f.rollouts, "rollouts"), (f.tokens, "tokens"))):
        ax = fig.add_subplot(1, 2, index + 1)
        ax.hist(values, bins=30, color="tab:blue")
        mean = sum(values) / len(values)
        ax.axvline(mean, color="black", linestyle="--", label=f"mean {mean:,.0f}")
        ax.set_xlabel(f"{what} a row")
        ax.set_ylabel("rows")
        ax.legend(fontsize=8)
    return None


def _judge(fig: Any, summary: Any) -> str | None:
    consensus = summary.consensus
    by_answer = (consensus.by_answer if consensus else None) or {}
    bars: list[tuple[str, float, int]] = []
    for answer in ("right", "wrong"):
        c = by_answer.get(answer) or {}
        if c.get("pinned_votes"):
            bars.append(
                (f"{answer} answers:\nnames the error", c["pinned_named"] / c["pinned_votes"], c["pinned_votes"])
            )
        if c.get("clean_votes"):
            bars.append((f"{answer} answers:\nsays clean", c["clean_said_clean"] / c["clean_votes"], c["clean_votes"]))
    if not bars:
        return "no judge, or no vote on a row the rollouts pinned"
    fig.set_label("the judge's measured accuracy by answer class")
    ax = fig.add_subplot()
    drawn = ax.bar([b[0] for b in bars], [b[1] for b in bars], color="tab:purple")
    for rect, (_, share, votes) in zip(drawn, bars, strict=True):
        ax.annotate(f"{share:.0%} of {votes}", (rect.get_x() + rect.get_width() / 2, share), ha="center", va="bottom")
    ax.set_ylim(0, 1.1)
    ax.set_ylabel("share of votes")
    return None
