"""The change-point search's numeric engine: the model of how a policy writes, and the exact sums over it.

Read in this order (each file imports only the ones before it):

| file | what it holds |
|---|---|
| model.py | the model's constants (its grids and hazards), the tables built from them once, `Priors`, `Evidence` |
| kernels.py | the compiled loops of the posterior's passes and the candidate sweep |
| posterior.py | `Posterior`: p_good of every step, one exact forward pass |
| gains.py | `probe_gains`: what a probe is worth, every candidate's outcomes in one sweep |

The rest of the change-point package (memo, rules, pooling, search, relabel) uses the public names
below; the engine knows nothing of the search's settings.
"""

from prm_synth.annotate.changepoint.engine.gains import probe_gains
from prm_synth.annotate.changepoint.engine.model import (
    DEFAULT_K,
    DEFAULT_PRIORS,
    P_GRID,
    Q_GRID,
    RECENT_STEPS,
    Evidence,
    Priors,
    logsumexp,
)
from prm_synth.annotate.changepoint.engine.posterior import Posterior, first_error_entropy, mixed_log_joint

__all__ = [
    "DEFAULT_K",
    "DEFAULT_PRIORS",
    "P_GRID",
    "Q_GRID",
    "RECENT_STEPS",
    "Evidence",
    "Posterior",
    "Priors",
    "first_error_entropy",
    "logsumexp",
    "mixed_log_joint",
    "probe_gains",
]
