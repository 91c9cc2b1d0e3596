from __future__ import annotations

import os
import tempfile

import pytest

# No network: keep Prefect from phoning home, and keep its state out of ~/.prefect.
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("PREFECT_HOME", tempfile.mkdtemp(prefix="prm-synth-prefect-"))


@pytest.fixture(scope="session")
def prefect_harness():
    """One ephemeral Prefect API for the whole session (entering it costs ~11 s)."""
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness():
        yield
