"""merlin-systems' own Triton export of the same model, beside ours (`ncf export --with merlin-systems`).

merlin-systems 23.08 builds an inference graph from the ETL's saved NVTabular Workflow
(``TransformWorkflow``: raw userId/movieId -> model ids) and a TorchScript model
(``PredictPyTorch``: model ids -> probability), and exports it with its executor runtime: one
python-backend model (``MERLIN_MODEL``) runs the graph and calls the Workflow's python model by
BLS. The TorchScript model runs where ``predict`` says (``PREDICT``): "python" inside the executor
model itself (``merlin_torchscript.PredictTorchScript``; any tritonserver with the python
backend), "pytorch" as merlin-systems' own libtorch model, called by BLS (a server with Triton's
pytorch backend). It writes the same probabilities as our ``ncf`` ensemble for ids in the
vocabulary (``check_in_process`` compares them in this process;
tests/serving/test_merlin_systems.py through a real tritonserver). docs/MERLIN_SYSTEMS.md says
what runs where.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import warnings
from pathlib import Path

import numpy as np
import torch
from torch import nn

from ncf.core import names
from ncf.models.neumf import NeuMF
from ncf.serving import tables
from ncf.serving.served import ServingNeuMF

MERLIN_MODEL = names.MERLIN_MODEL  # the executor model: inputs userId, movieId; output score
MARKER = ".ncf-merlin-systems"  # marks a repository this module wrote (it may replace it)
# Where the TorchScript model runs: inside the executor's python model, or on the libtorch backend.
PREDICT = ("python", "pytorch")


class MerlinNeuMF(nn.Module):
    """``{user column: [B], item column: [B]}`` model ids -> probability ``[B, 1]``:
    ``ServingNeuMF`` behind the dictionary input that ``PredictPyTorch`` (and the libtorch
    backend, for a model with one Dict input) passes. The columns are the Workflow's outputs."""

    def __init__(self, model: NeuMF, user_column: str = names.USER, item_column: str = names.ITEM):
        super().__init__()
        self.served = ServingNeuMF(model)
        self.user_column, self.item_column = user_column, item_column

    def forward(self, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        users = inputs[self.user_column].reshape(-1, 1).long()  # [B, 1]: PredictPyTorch squeezes
        items = inputs[self.item_column].reshape(-1, 1).long()
        return self.served(users, items)  # [B, 1]


def import_systems():
    """merlin-systems' ensemble API, or ValueError saying how to install it."""
    try:
        with warnings.catch_warnings():  # merlin.dtypes warns that TensorFlow is missing
            warnings.simplefilter("ignore", UserWarning)
            from merlin.systems.dag.ensemble import Ensemble
            from merlin.systems.dag.ops.pytorch import PredictPyTorch
            from merlin.systems.dag.ops.workflow import TransformWorkflow
    except ImportError as exc:
        raise ValueError(
            f"--with merlin-systems: {exc}; install it with `pip install --no-deps "
            "merlin-systems==23.8.0` (what `make venv` does; docs/MERLIN_SYSTEMS.md)"
        ) from None
    return Ensemble, TransformWorkflow, PredictPyTorch


def _predict_op(predict: str):
    """The operator class that runs the TorchScript model where ``predict`` says."""
    if predict not in PREDICT:
        raise ValueError(f"--merlin-predict {predict!r}: choose one of {', '.join(PREDICT)}")
    _, _, PredictPyTorch = import_systems()
    if predict == "pytorch":
        return PredictPyTorch
    import cloudpickle

    from ncf.serving import merlin_torchscript

    # By value: the executor's python stub unpickles the class without importing this project.
    cloudpickle.register_pickle_by_value(merlin_torchscript)
    return merlin_torchscript.PredictTorchScript


def build_ensemble(model: NeuMF, etl: Path, predict: str = PREDICT[0]):
    """merlin-systems' Ensemble: the ETL's Workflow, then the scripted model (run where
    ``predict`` says: one of ``PREDICT``)."""
    import nvtabular as nvt
    from merlin.schema import ColumnSchema, Schema

    Ensemble, TransformWorkflow, _ = import_systems()
    PredictPyTorch = _predict_op(predict)
    workflow = nvt.Workflow.load(str(etl / names.WORKFLOW_DIR))
    user_column, item_column = workflow.output_schema.column_names  # Categorify's outputs
    scripted = torch.jit.script(MerlinNeuMF(model, user_column, item_column).eval())
    output = Schema([ColumnSchema(names.OUTPUT_SCORE, dtype=np.float32)])
    predict = PredictPyTorch(scripted, workflow.output_schema, output)
    graph = workflow.input_schema.column_names >> TransformWorkflow(workflow) >> predict
    return Ensemble(graph, workflow.input_schema)


def sample_pairs(etl: Path, meta: dict, n: int, seed: int) -> tuple[dict, np.ndarray, np.ndarray]:
    """``n`` seeded (user, item) pairs of the vocabulary: raw ids ``{userId: [n], movieId: [n]}``
    and their model ids (users ``[n]``, items ``[n]``)."""
    vocab = tables.vocab_tables(etl, meta)
    rng = np.random.default_rng(seed)
    raw, codes = {}, []
    for kind, column in (("user", names.RAW_USER), ("item", names.RAW_ITEM)):
        rows = rng.integers(0, vocab[f"{kind}_raw"].size, n)
        raw[column] = vocab[f"{kind}_raw"][rows].astype(np.int64)
        codes.append(vocab[f"{kind}_code"][rows])
    return raw, codes[0], codes[1]


def check_in_process(ensemble, model: NeuMF, raw: dict, users, items) -> float:
    """Max abs difference of merlin-systems' graph run here (merlin's LocalExecutor: the
    Workflow maps the raw ids) against ``ServingNeuMF`` on the model ids ``users``, ``items``."""
    import pandas as pd
    from merlin.dag.runtime import Runtime

    out = ensemble.transform(pd.DataFrame(raw), runtime=Runtime())
    theirs = np.asarray(out[names.OUTPUT_SCORE]).reshape(-1)
    with torch.no_grad():
        u, i = (torch.as_tensor(c, dtype=torch.int64).reshape(-1, 1) for c in (users, items))
        ours = ServingNeuMF(model).eval()(u, i).reshape(-1).numpy()
    return float(np.abs(theirs - ours).max())


def checked_ensemble(
    model: NeuMF, etl: Path, meta: dict, samples: int, seed: int, predict: str = PREDICT[0]
):
    """(merlin-systems' Ensemble, its max abs difference from ours on ``samples`` seeded pairs)."""
    ensemble = build_ensemble(model, etl, predict)
    return ensemble, check_in_process(ensemble, model, *sample_pairs(etl, meta, samples, seed))


def check_target(out: Path) -> None:
    """ValueError unless ``out`` is absent or a repository this module wrote (and may replace);
    also where merlin-systems is missing."""
    if out.exists() and not (out / MARKER).exists():
        raise ValueError(
            f"--merlin-repo {out}: exists and was not written by `ncf export --with "
            f"merlin-systems` (no {MARKER} in it); pass a new folder"
        )
    import_systems()


def write_repository(ensemble, out: Path) -> None:
    """Export ``ensemble`` with merlin-systems' executor runtime into ``out``, atomically: a
    temporary sibling renamed over a repository this module wrote before; a folder it did not
    write is refused."""
    check_target(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        ensemble.export(str(tmp), name=MERLIN_MODEL)
        (tmp / MARKER).write_text("written by `ncf export --with merlin-systems`\n")
        old = None
        if out.exists():  # renamed onto an empty temporary folder, removed once out is new
            old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old.", dir=out.parent))
            os.replace(out, old)
        os.replace(tmp, out)
        if old is not None:
            shutil.rmtree(old)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
