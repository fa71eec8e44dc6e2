"""Triton python backend: raw MovieLens ids -> model ids, as the saved NVTabular Workflow maps them.

``ncf export`` writes the Workflow's Categorify vocabularies as ``vocab.npz``: for users and items,
the raw ids sorted ascending (``user_raw``, ``item_raw``), their codes in the same order
(``user_code``, ``item_code``) and Categorify's out-of-vocabulary code (``user_oov``,
``item_oov``). A lookup is one ``np.searchsorted`` per column (no dataframe per request).

Config (``../config.pbtxt``): inputs raw user id, raw item id (INT64 ``[B, 1]``, in that order);
outputs user id, item id (INT64 ``[B, 1]``) and known (BOOL ``[B, 1]``, false where either raw id is
not in the vocabulary; such ids get the out-of-vocabulary code, as ``Workflow.transform`` gives).
"""

import json
import os

import numpy as np
import triton_python_backend_utils as pb_utils
from artifact_check import client_error, verified_artifact


class Vocabulary:
    """Sorted raw ids -> codes for one column; unseen ids map to ``oov``."""

    def __init__(self, raw, code, oov):
        self.raw = np.asarray(raw, dtype=np.int64)  # [V] ascending
        self.code = np.asarray(code, dtype=np.int64)  # [V]
        self.oov = int(oov)

    def lookup(self, ids):
        """Codes and a found mask for raw ``ids`` (any shape)."""
        pos = np.searchsorted(self.raw, ids)
        pos = np.minimum(pos, len(self.raw) - 1)  # ids above the largest raw id
        found = self.raw[pos] == ids
        return np.where(found, self.code[pos], self.oov), found


def load_vocabularies(path):
    """(users, items) Vocabulary objects from an exported ``vocab.npz``."""
    with np.load(path, allow_pickle=False) as z:
        return (
            Vocabulary(z["user_raw"], z["user_code"], z["user_oov"]),
            Vocabulary(z["item_raw"], z["item_code"], z["item_oov"]),
        )


class TritonPythonModel:
    def initialize(self, args):
        cfg = json.loads(args["model_config"])
        params = {k: v["string_value"] for k, v in cfg.get("parameters", {}).items()}
        self.raw_user_in, self.raw_item_in = (t["name"] for t in cfg["input"])
        self.user_out, self.item_out, self.known_out = (t["name"] for t in cfg["output"])
        version_dir = os.path.join(args["model_repository"], args["model_version"])
        path = verified_artifact(version_dir, params["manifest"], params["vocab_artifact"])
        self.users, self.items = load_vocabularies(path)

    def execute(self, requests):
        responses = []
        for request in requests:
            raw_users = pb_utils.get_input_tensor_by_name(request, self.raw_user_in).as_numpy()
            raw_items = pb_utils.get_input_tensor_by_name(request, self.raw_item_in).as_numpy()
            if raw_users.shape[0] == 0:
                error = client_error(
                    f"empty batch: {self.raw_user_in} and {self.raw_item_in} need at least one row"
                )
                responses.append(pb_utils.InferenceResponse(error=error))
                continue
            users, user_found = self.users.lookup(raw_users)  # [B, 1]
            items, item_found = self.items.lookup(raw_items)
            outputs = [
                pb_utils.Tensor(self.user_out, users),
                pb_utils.Tensor(self.item_out, items),
                pb_utils.Tensor(self.known_out, user_found & item_found),
            ]
            responses.append(pb_utils.InferenceResponse(output_tensors=outputs))
        return responses
