# Two commands: `make run` (whole pipeline on the bundled data) and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: run test bench lint venv clean

# (Re)install when pyproject.toml changes. pip 23.2.1: newer pips reject merlin-dataloader's
# metadata (a direct-URL dev dependency).
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q "pip==23.2.1"
	$(BIN)/python -m pip install -q -e ".[test]"
	touch $(STAMP)

venv: $(STAMP)

run: venv
	$(BIN)/ncf run

test: venv
	$(BIN)/python -m pytest -q

bench: venv
	$(BIN)/ncf bench all

lint: venv
	$(BIN)/ruff check . && $(BIN)/ruff format --check .

clean:
	rm -rf runs work .pytest_cache
