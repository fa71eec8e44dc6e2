# Two commands: `make run` (whole pipeline on the bundled data) and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: run test bench lint venv clean

# (Re)install when pyproject.toml changes. pip 23.2.1: newer pips refuse merlin-dataloader, whose
# metadata declares direct-URL dependencies (docs/FACTS.md).
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q "pip==23.2.1"
	$(BIN)/python -m pip install -q -e ".[test]"
	touch $(STAMP)

# The model-config protobuf of the Triton release docker-compose.yml runs (docs/TRITON_IMAGE.md
# names it), for tests/triton_repo/test_config_protobuf.py: that release's tritonclient wheel is
# downloaded and only its model_config_pb2.py kept, in $(VENV)/triton-<version>/ (the venv's own
# tritonclient is newer, and pip holds one tritonclient at a time).
TRITON_PROTO := $(VENV)/.triton-proto-stamp
$(TRITON_PROTO): $(STAMP) docs/TRITON_IMAGE.md tests/triton_repo/triton_image.py
	$(BIN)/python -m tests.triton_repo.triton_image fetch-proto
	touch $(TRITON_PROTO)

venv: $(STAMP) $(TRITON_PROTO)

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
