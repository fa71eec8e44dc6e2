"""Triton python backend: NeuMF scores for model ids, with TorchScript or ONNX Runtime.

Config (``../config.pbtxt``): inputs user id and item id (INT64 ``[B, 1]``, in that order), output
score (FP32 ``[B, 1]``, the sigmoid probability). Parameters: ``runtime`` ("torchscript" or
"onnx"), the artifact file names, ``manifest`` and ``num_threads``. The artifact is loaded only
after its sha256 matches ``manifest.json`` (written by ``ncf export`` beside it).

Requests that dynamic batching groups are checked one by one (a bad request gets its own error
response), then the valid ones are scored in one forward pass.
"""

import json
import os

import numpy as np
import triton_python_backend_utils as pb_utils
from artifact_check import client_error, cpu_threads, manifest_ids, verified_artifact


class TritonPythonModel:
    def initialize(self, args):
        cfg = json.loads(args["model_config"])
        params = {k: v["string_value"] for k, v in cfg.get("parameters", {}).items()}
        self.user_in, self.item_in = (t["name"] for t in cfg["input"])
        self.score_out = cfg["output"][0]["name"]
        version_dir = os.path.join(args["model_repository"], args["model_version"])
        runtime = params.get("runtime", "torchscript")
        if runtime not in ("torchscript", "onnx"):
            raise pb_utils.TritonModelException(
                f"parameter runtime={runtime!r}: use 'torchscript' or 'onnx' in config.pbtxt"
            )
        path = verified_artifact(version_dir, params["manifest"], params[f"{runtime}_artifact"])
        ids = manifest_ids(version_dir, params["manifest"])  # valid ids: [0, num_*)
        self.num_users, self.num_items = int(ids["num_users"]), int(ids["num_items"])
        gpu = args.get("model_instance_kind") == "GPU"
        device_id = int(args.get("model_instance_device_id", 0))
        threads = cpu_threads(cfg, params)
        pb_utils.Logger.log_info(f"{cfg['name']} v{args['model_version']}: {threads} threads")
        if runtime == "torchscript":
            self.score = _torchscript_scorer(path, gpu, device_id, threads)
        else:
            self.score = _onnx_scorer(path, gpu, device_id, threads)

    def _check(self, users, items):
        """Error message for a bad request, or None. Shapes/dtypes are checked by Triton."""
        if users.shape[0] == 0:
            return f"empty batch: {self.user_in} and {self.item_in} need at least one row"
        for name, ids, n in (
            (self.user_in, users, self.num_users),
            (self.item_in, items, self.num_items),
        ):
            bad = np.flatnonzero((ids < 0) | (ids >= n))
            if bad.size:
                row = int(bad[0])
                return (
                    f"{name}={int(ids[row, 0])} at row {row} is out of range [0, {n}) "
                    f"({bad.size} bad rows); send model ids from the ETL, or raw ids to the ensemble"
                )
        return None

    def execute(self, requests):
        responses = [None] * len(requests)
        batch = []  # (request index, users [b, 1], items [b, 1])
        for n, request in enumerate(requests):
            users = pb_utils.get_input_tensor_by_name(request, self.user_in).as_numpy()
            items = pb_utils.get_input_tensor_by_name(request, self.item_in).as_numpy()
            error = self._check(users, items)
            if error:
                responses[n] = pb_utils.InferenceResponse(error=client_error(error))
            else:
                batch.append((n, users, items))
        if batch:
            users = np.concatenate([b[1] for b in batch])  # [N, 1]
            items = np.concatenate([b[2] for b in batch])
            scores = self.score(users, items)  # [N, 1] float32
            start = 0
            for n, u, _ in batch:
                out = pb_utils.Tensor(self.score_out, scores[start : start + len(u)])
                responses[n] = pb_utils.InferenceResponse(output_tensors=[out])
                start += len(u)
        return responses


def _torchscript_scorer(path, gpu, device_id, threads):
    import torch

    torch.set_num_threads(threads)
    device = torch.device(f"cuda:{device_id}" if gpu else "cpu")
    model = torch.jit.load(path, map_location=device).eval()

    def score(users, items):
        with torch.inference_mode():
            u = torch.from_numpy(users).to(device, non_blocking=True)
            i = torch.from_numpy(items).to(device, non_blocking=True)
            return model(u, i).float().cpu().numpy()

    return score


def _onnx_scorer(path, gpu, device_id, threads):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    providers = [("CUDAExecutionProvider", {"device_id": device_id})] if gpu else []
    session = ort.InferenceSession(path, options, providers=providers + ["CPUExecutionProvider"])
    user_name, item_name = (i.name for i in session.get_inputs())

    def score(users, items):
        return session.run(None, {user_name: users, item_name: items})[0].astype(np.float32)

    return score
