"""The change-point search, the binary method's default (`search_test: changepoint`).

A first-error search under a model of how the policy writes: every step has a hazard, which sets both
where the sampled solution's first error is likely and how often a clean prefix's rollouts finish
without one; a prefix holding the error reaches the answer at the solution's own luck rate; rollouts of
one prefix may share their fortune. Every step gets its posterior probability of being still correct
(p_good); the search probes the prefix whose rollouts most reduce the uncertainty about the first
error, and labels what the posterior says with enough confidence.

Read in the order things happen (each file imports only the ones before it):

| file | what it holds |
|---|---|
| settings.py | the search's tunables, one frozen `ChangepointSettings` (tuning: docs/design/changepoint-tuning.md) |
| engine/ | the numeric engine: model.py (the model's constants and tables, `Priors`, `Evidence`), kernels.py (compiled loops), posterior.py (`Posterior`: p_good of every step), gains.py (`probe_gains`: what a probe is worth) |
| memo.py | the search's decisions, remembered |
| right_answers.py | what right answers hide, measured per shard |
| rules.py | `label`: labels from a posterior |
| pooling.py | the shard's priors: `pool_priors`, `FirstPhasePool` (two phases) |
| search.py | `changepoint_search`: which prefix to probe, when to stop |
| relabel.py | `relabel`: a shard labeled again under its pooled priors |

The search registry (prm_synth/annotate/search.py, `SEARCHES`) builds it per labeler.
"""

from prm_synth.annotate.changepoint.engine import DEFAULT_PRIORS, Evidence, Posterior, Priors
from prm_synth.annotate.changepoint.pooling import FirstPhasePool, pool_priors, second_phase_priors
from prm_synth.annotate.changepoint.relabel import relabel
from prm_synth.annotate.changepoint.rules import label
from prm_synth.annotate.changepoint.search import changepoint_search
from prm_synth.annotate.changepoint.settings import ChangepointSettings

__all__ = [
    "DEFAULT_PRIORS",
    "ChangepointSettings",
    "Evidence",
    "FirstPhasePool",
    "Posterior",
    "Priors",
    "changepoint_search",
    "label",
    "pool_priors",
    "relabel",
    "second_phase_priors",
]
