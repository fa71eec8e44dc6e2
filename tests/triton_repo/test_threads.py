"""The thread pools of the python models: sized from the cores and the instance count
(``artifact_check.cpu_threads``), as the served models report them in the server log."""

from __future__ import annotations

import importlib
import os
import re
import sys
import types

import pytest

from ncf.core import names
from ncf.serving.server import TritonServer


@pytest.fixture
def artifact_check(monkeypatch):
    """``triton_repo/artifact_check.py`` as the python models import it (outside a server, the
    backend's utility module it imports at the top is an empty stand-in: ``cpu_threads`` uses
    none of it)."""
    monkeypatch.setitem(sys.modules, "triton_python_backend_utils", types.ModuleType("pb"))
    monkeypatch.syspath_prepend(str(names_root()))
    sys.modules.pop("artifact_check", None)
    yield importlib.import_module("artifact_check")
    sys.modules.pop("artifact_check", None)


def names_root():
    from ncf.serving.repository import project_repo

    return project_repo()


def _config(*counts):
    return {"instance_group": [{"count": c, "kind": "KIND_CPU"} for c in counts]}


@pytest.mark.parametrize(
    ("config", "num_threads", "cpus", "threads"),
    [
        (_config(1), "0", 2, 1),  # a 2-core laptop: one core for the pool, one for the rest
        (_config(1), "0", 1, 1),  # never below 1
        (_config(1), "0", 5, 4),
        (_config(2), "0", 5, 2),  # two instances share the cores
        (_config(1, 2), "0", 16, 5),  # every group's instances count
        (_config(1), "0", 64, 8),  # at most MAX_THREADS
        ({}, "0", 4, 3),  # no instance_group: one instance
        (_config(1), "3", 2, 3),  # an explicit count is taken as it is
    ],
)
def test_cpu_threads(artifact_check, config, num_threads, cpus, threads):
    params = {"num_threads": num_threads}
    assert artifact_check.cpu_threads(config, params, cpus=cpus) == threads


@pytest.mark.triton
def test_served_models_report_the_threads_of_the_rule(repo, tmp_path):
    cpus = len(os.sched_getaffinity(0))
    want = max(1, min(8, cpus - 1))  # one instance each in the committed configs
    models = [names.MODEL_NEUMF, names.MODEL_CATALOGUE]
    with TritonServer(repo, models=models, log_path=tmp_path / "server.log") as server:
        log = server.log_path.read_text(encoding="utf-8", errors="replace")
    for model in models:
        assert re.search(rf"\] \"{model} v\d+: (\w+, )?{want} threads\"", log), log
