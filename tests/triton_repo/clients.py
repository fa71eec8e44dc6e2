"""Client helper for the Triton tests: one request with tritonclient (HTTP or gRPC)."""

from __future__ import annotations

import numpy as np


def infer(client, model: str, inputs: dict[str, np.ndarray], outputs: list[str]) -> dict:
    """Send one request (Triton dtypes from the numpy dtypes); return the named outputs."""
    from tritonclient.utils import np_to_triton_dtype

    module, conn = client
    tensors = []
    for name, array in inputs.items():
        tensor = module.InferInput(name, list(array.shape), np_to_triton_dtype(array.dtype))
        tensor.set_data_from_numpy(array)
        tensors.append(tensor)
    result = conn.infer(model, tensors, outputs=[module.InferRequestedOutput(o) for o in outputs])
    return {o: result.as_numpy(o) for o in outputs}
