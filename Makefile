# The two commands of the README. Each creates .venv on first use and installs everything.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
EXAMPLE := examples/stable-abi
CUDA ?= 13.2

.PHONY: demo test lint clean

# The install is the longest silent step of a fresh clone's `make demo` unless pip may speak:
# one line per package resolved and downloaded, with progress bars on a terminal (the upgraded
# pip also shows one for the install itself). Only the quick pip upgrade stays quiet.
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --progress-bar on -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/python $(EXAMPLE)/make_upstreams.py
	$(BIN)/assemble -C $(EXAMPLE) deps
	$(BIN)/assemble -C $(EXAMPLE) build --cuda $(CUDA) --verify

test: $(STAMP)
	$(BIN)/ruff check assembler tests benchmarks examples
	$(BIN)/mypy assembler
	$(BIN)/python -m pytest -n 2 --durations=15

clean:
	rm -rf $(VENV) $(EXAMPLE)/forks $(EXAMPLE)/upstreams $(EXAMPLE)/dist $(EXAMPLE)/.assemble
