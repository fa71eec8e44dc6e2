"""Triton python backend: catalogue scores for a batch of user model ids.

Config (``../config.pbtxt``): inputs user ids (INT64 ``[B, 1]``) and optionally item model ids
(INT64 ``[B, N]``); outputs the scores (FP32 ``[B, C]``, C = the manifest's item_id_range in
model-id order, or ``[B, N]`` for the given items) and the export id (INT64 ``[B, 1]``). Runs the
TorchScript module ``ncf export`` wrote (``catalogue_artifact``), loaded only after its sha256
matches ``manifest.json``; ``precision`` bf16 stores its hidden layers after the first in bfloat16.
An id out of range gets an error response naming it, for that request alone.
"""

import json
import os

import torch
import triton_python_backend_utils as pb_utils
from artifact_check import client_error, cpu_threads, manifest_field, verified_artifact

# CPU flags (/proc/cpuinfo) whose bf16 matrix products beat fp32 (AVX512-BF16 ~2x, AMX more).
BF16_CPU_FLAGS = ("avx512_bf16", "amx_bf16")


def cpu_has_bf16():
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            flags = next((ln.split() for ln in f if ln.startswith("flags")), [])
    except OSError:
        return False
    return any(flag in flags for flag in BF16_CPU_FLAGS)


def resolve_precision(value, gpu):
    if value not in ("auto", "fp32", "bf16"):
        raise pb_utils.TritonModelException(
            f"parameter precision={value!r}: use auto, fp32 or bf16"
        )
    if value == "auto":
        return "bf16" if not gpu and cpu_has_bf16() else "fp32"
    return value


class TritonPythonModel:
    def initialize(self, args):
        cfg = json.loads(args["model_config"])
        params = {k: v["string_value"] for k, v in cfg.get("parameters", {}).items()}
        self.user_in, self.items_in = (t["name"] for t in cfg["input"])
        self.scores_out, self.id_out = (t["name"] for t in cfg["output"])
        version_dir = os.path.join(args["model_repository"], args["model_version"])
        path = verified_artifact(version_dir, params["manifest"], params["catalogue_artifact"])
        ids = manifest_field(version_dir, params["manifest"], "ids")
        self.num_users = int(ids["num_users"])
        self.item_lo, self.item_hi = (int(x) for x in ids["item_id_range"])
        gpu = args.get("model_instance_kind") == "GPU"
        device_id = int(args.get("model_instance_device_id", 0))
        threads = cpu_threads(cfg, params)
        torch.set_num_threads(threads)
        self.device = torch.device(f"cuda:{device_id}" if gpu else "cpu")
        self.model = torch.jit.load(path, map_location=self.device).eval()
        self.precision = resolve_precision(params.get("precision", "auto"), gpu)
        if self.precision == "bf16":  # serving/catalogue.py to_precision
            self.model.rest.to(torch.bfloat16)
        pb_utils.Logger.log_info(
            f"{cfg['name']} v{args['model_version']}: {self.precision}, {threads} threads"
        )

    def _check(self, users, items):
        """An error message for ids out of range, else None."""
        bad = users[(users < 0) | (users >= self.num_users)]
        if bad.size:
            return (
                f"{self.user_in}={int(bad[0])} is out of range [0, {self.num_users}); send a "
                "model id from the ETL (recommend maps raw userIds)"
            )
        if items is not None:
            bad = items[(items < self.item_lo) | (items >= self.item_hi)]
            if bad.size or items.shape[1] == 0:
                return (
                    f"{self.items_in}: need at least one item id, each in [{self.item_lo}, "
                    f"{self.item_hi}) (got {[int(x) for x in bad[:3]]})"
                )
        return None

    def _run(self, users, items):
        with torch.inference_mode():
            u = torch.from_numpy(users).to(self.device)
            if items is None:
                scores, ids = self.model(u)
            else:
                scores, ids = self.model.score_items(u, torch.from_numpy(items).to(self.device))
        return scores.float().cpu().numpy(), ids.cpu().numpy()

    def execute(self, requests):
        responses = []
        for request in requests:  # each is already a batch of users (recommend batches them)
            users = pb_utils.get_input_tensor_by_name(request, self.user_in).as_numpy()
            items = pb_utils.get_input_tensor_by_name(request, self.items_in)
            items = None if items is None else items.as_numpy()
            error = self._check(users, items)
            if error:
                responses.append(pb_utils.InferenceResponse(error=client_error(error)))
                continue
            scores, ids = self._run(users, items)
            outputs = [pb_utils.Tensor(self.scores_out, scores), pb_utils.Tensor(self.id_out, ids)]
            responses.append(pb_utils.InferenceResponse(output_tensors=outputs))
        return responses
