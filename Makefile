# xmfu: on a fresh machine, `make bench` then `make test` is all it takes.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
XMFU := $(VENV)/bin/xmfu
TORCH_VERSION ?= 2.13.0
STAMP := $(VENV)/.xmfu-installed

.PHONY: install bench test test-fast lint clean gpu-reference

install: $(STAMP)

# --system-site-packages: a GPU image's own torch/jax/triton (CUDA, ROCm or TPU builds) are reused, never
# replaced; only what is not importable at all gets installed.
$(STAMP): pyproject.toml Makefile
	$(PYTHON) -m venv --system-site-packages $(VENV)
	$(PY) -c "import torch" 2>/dev/null || $(PIP) install "torch==$(TORCH_VERSION)"
	$(PY) -c "import jax" 2>/dev/null || $(PIP) install jax || echo "xmfu: jax not installed; its backend will report skipped"
	$(PY) -c "import optax" 2>/dev/null || $(PIP) install optax || echo "xmfu: optax not installed; the transformer jax backend will report skipped"
	$(PY) -c "import triton" 2>/dev/null || $(PIP) install triton || echo "xmfu: triton not installed; its backend will report skipped"
	$(PIP) install -e ".[dev]"
	touch $@

# The default suite on whatever device is present; without an accelerator, the smoke sizes.
bench: install
	$(XMFU) run $$($(PY) -m harness.machine.platform)

# The whole suite, two workers (the end-to-end runs, marked e2e, are the slow ones): under 6 minutes on 2 cores.
test: install
	$(PY) -m ruff check .
	$(PY) -m pytest -n 2

# Everything but the end-to-end runs: about a minute.
test-fast: install
	$(PY) -m ruff check .
	$(PY) -m pytest -n 2 -m "not e2e"

# The GPU reference set (benchmarks/gpu_reference.py): <= 25 minutes on one GPU, outputs in results/reference/<device>/;
# without an accelerator, every part at smoke sizes into a temporary folder.
gpu-reference: install
	$(PY) benchmarks/gpu_reference.py

lint: install
	$(PY) -m ruff check .

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache *.egg-info
