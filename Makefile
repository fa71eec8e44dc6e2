# Two commands: `make run` (whole pipeline on the bundled data) and `make test`.
# `make test-ngc`: the same suite, plus one `ncf run`, on the NGC Merlin image's Python stack.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: run test bench lint venv venv-ngc test-ngc peers peers-smoke clean

# (Re)install when pyproject.toml or the pins change. pip 23.2.1: newer pips refuse merlin-dataloader, whose
# metadata declares direct-URL dependencies (docs/FACTS.md).
$(STAMP): pyproject.toml requirements/cpu.txt requirements/systems.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q "pip==23.2.1"
	$(BIN)/python -m pip install -q -c requirements/cpu.txt -e ".[test]"
	$(BIN)/python -m pip install -q --no-deps -r requirements/systems.txt
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

# The NGC lane: the Python stack of nvcr.io/nvidia/merlin/merlin-pytorch:23.08 (Python 3.10,
# torch 2.1, numpy 1.22, pandas 1.5.2, dask 2023.1.1, protobuf 3.20) as closely as PyPI allows,
# pinned in requirements/ngc.txt (its header lists every difference from the image). The project
# goes in with --no-deps: pyproject.toml's exact pins are the CPU lane's.
NGC_VENV := .venv-ngc
NGC_BIN := $(NGC_VENV)/bin
NGC_STAMP := $(NGC_VENV)/.installed-stamp
NGC_RUN := work/ngc-run
# pyenv's newest 3.10 if pyenv is there, else python3.10 on PATH.
PYTHON310 ?= $(shell p=$$(pyenv prefix 3.10 2>/dev/null) && test -x "$$p/bin/python" \
	&& echo "$$p/bin/python" || command -v python3.10)

$(NGC_STAMP): requirements/ngc.txt requirements/systems.txt pyproject.toml
	@test -n "$(PYTHON310)" || { echo "make test-ngc needs Python 3.10 (pyenv install 3.10," \
		"or python3.10 on PATH, or PYTHON310=/path/to/python3.10)" >&2; exit 1; }
	test -x $(NGC_BIN)/python || $(PYTHON310) -m venv $(NGC_VENV)
	$(NGC_BIN)/python -c 'import sys; assert sys.version_info[:2] == (3, 10), sys.version'
	$(NGC_BIN)/python -m pip install -q "pip==23.2.1"
	$(NGC_BIN)/python -m pip install -q -r requirements/ngc.txt
	$(NGC_BIN)/python -m pip install -q --no-deps -e .
	$(NGC_BIN)/python -m pip install -q --no-deps -r requirements/systems.txt
	$(NGC_BIN)/python -m tests.triton_repo.triton_image fetch-proto
	touch $(NGC_STAMP)

venv-ngc: $(NGC_STAMP)

# The suite, then the whole pipeline once into work/ngc-run (not runs/ or triton_repo/).
test-ngc: venv-ngc
	$(NGC_BIN)/python -m pytest -q
	rm -rf $(NGC_RUN)
	$(NGC_BIN)/ncf run --runs $(NGC_RUN)/runs --etl-dir $(NGC_RUN)/etl --repo $(NGC_RUN)/triton_repo

# The peers' venv: RecBole 1.2.1 for `ncf bench peers` (docs/PEERS.md), Python 3.11 and its own
# torch, pinned in requirements/peers.txt (its header says why). Not part of `make venv`/`make test`.
PEERS_VENV := .venv-peers
PEERS_BIN := $(PEERS_VENV)/bin
PEERS_STAMP := $(PEERS_VENV)/.installed-stamp
PEERS_ETL := work/peers-smoke/etl
# pyenv's newest 3.11 if pyenv is there, else python3.11 on PATH.
PYTHON311 ?= $(shell p=$$(pyenv prefix 3.11 2>/dev/null) && test -x "$$p/bin/python" \
	&& echo "$$p/bin/python" || command -v python3.11)

$(PEERS_STAMP): requirements/peers.txt
	@test -n "$(PYTHON311)" || { echo "make peers needs Python 3.11 (pyenv install 3.11," \
		"or python3.11 on PATH, or PYTHON311=/path/to/python3.11)" >&2; exit 1; }
	test -x $(PEERS_BIN)/python || $(PYTHON311) -m venv $(PEERS_VENV)
	$(PEERS_BIN)/python -c 'import sys; assert sys.version_info[:2] == (3, 11), sys.version'
	$(PEERS_BIN)/python -m pip install -q "pip==23.2.1"
	$(PEERS_BIN)/python -m pip install -q -r requirements/peers.txt
	TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 $(PEERS_BIN)/python -c 'import recbole.quick_start'
	touch $(PEERS_STAMP)

peers: $(PEERS_STAMP)

# One epoch of RecBole's NeuMF, one seed, on our split of the bundled ml-latest-small (CI's check
# that the harness runs; its figures go to work/, never to bench/results).
peers-smoke: peers venv
	$(BIN)/ncf etl --input data/ml-latest-small/ratings.csv --out $(PEERS_ETL) --engine pandas
	$(BIN)/ncf bench peers --etl $(PEERS_ETL) --models NeuMF --epochs 1 \
		--work work/peers-smoke --results-dir work/peers-smoke/results

clean:
	rm -rf runs work .pytest_cache
