"""merlin-systems' ``PredictPyTorch`` run inside its executor model, for tritonservers without the
pytorch (libtorch) backend.

merlin-systems' executor runtime swaps a ``PredictPyTorch`` for ``PredictPyTorchTriton`` (a
libtorch model called by BLS) by exact type; this subclass is left in the executor's graph, as its
own in-process operators (Faiss, implicit) are: ``save_artifacts`` writes the TorchScript model
beside the pickled graph and ``load_artifacts`` reads it back in the python backend. The module
imports only torch and merlin, and ``merlin_systems`` pickles it by value, so the served graph
needs neither this project nor its training code (docs/MERLIN_SYSTEMS.md).
"""

from __future__ import annotations

from pathlib import Path

import torch
from merlin.systems.dag.ops.pytorch import PredictPyTorch

ARTIFACT = "predict_torchscript.pt"  # beside the executor's ensemble.pkl


class PredictTorchScript(PredictPyTorch):
    """``PredictPyTorch`` of a TorchScript model, run by the executor's python backend itself."""

    def save_artifacts(self, artifact_path: str) -> None:
        torch.jit.save(self.model, str(Path(artifact_path) / ARTIFACT))

    def load_artifacts(self, artifact_path: str) -> None:
        if not artifact_path:  # a new graph (merlin's Graph calls it with ""): the model is here
            return
        self.model = torch.jit.load(str(Path(artifact_path) / ARTIFACT), map_location="cpu").eval()

    def transform(self, col_selector, transformable):
        with torch.inference_mode():  # a served request needs no autograd graph
            return super().transform(col_selector, transformable)
