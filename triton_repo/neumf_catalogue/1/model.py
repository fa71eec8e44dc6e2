"""Triton python backend: the scores of every catalogue item for one user model id.

Config (``../config.pbtxt``): input user id (INT64 ``[1, 1]``), output the item scores (FP32
``[1, C]``, C = the manifest's item_id_range, items in model-id order). Runs the TorchScript
module ``ncf export`` wrote (``catalogue_artifact``), loaded only after its sha256 matches
``manifest.json``. An out-of-range user id gets an error response naming it.
"""

import hashlib
import json
import os

import triton_python_backend_utils as pb_utils


def verified_artifact(version_dir, manifest_name, artifact):
    """Path of ``artifact`` after checking its sha256 against the manifest; raise otherwise."""
    manifest_path = os.path.join(version_dir, manifest_name)
    path = os.path.join(version_dir, artifact)
    if not os.path.isfile(manifest_path):
        raise pb_utils.TritonModelException(
            f"{manifest_path} not found: run `ncf export` to write the artifacts and manifest"
        )
    with open(manifest_path, encoding="utf-8") as f:
        expected = json.load(f).get("artifacts", {}).get(artifact, {}).get("sha256")
    if expected is None:
        raise pb_utils.TritonModelException(f"{manifest_path} lists no sha256 for {artifact}")
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    if digest.hexdigest() != expected:
        raise pb_utils.TritonModelException(
            f"refusing to load {path}: sha256 {digest.hexdigest()} does not match {expected} in "
            f"{manifest_path} (modified or partly written); re-run `ncf export`"
        )
    return path


class TritonPythonModel:
    def initialize(self, args):
        import torch

        cfg = json.loads(args["model_config"])
        params = {k: v["string_value"] for k, v in cfg.get("parameters", {}).items()}
        self.user_in = cfg["input"][0]["name"]
        self.scores_out = cfg["output"][0]["name"]
        version_dir = os.path.join(args["model_repository"], args["model_version"])
        path = verified_artifact(version_dir, params["manifest"], params["catalogue_artifact"])
        with open(os.path.join(version_dir, params["manifest"]), encoding="utf-8") as f:
            self.num_users = int(json.load(f)["ids"]["num_users"])
        gpu = args.get("model_instance_kind") == "GPU"
        device_id = int(args.get("model_instance_device_id", 0))
        torch.set_num_threads(
            int(params.get("num_threads", "0")) or min(8, len(os.sched_getaffinity(0)))
        )
        self.device = torch.device(f"cuda:{device_id}" if gpu else "cpu")
        self.model = torch.jit.load(path, map_location=self.device).eval()
        self.torch = torch

    def _scores(self, users):
        """Scores ``[1, C]`` float32 for ``users`` ``[1, 1]``, or an error message."""
        user = int(users[0, 0])
        if not 0 <= user < self.num_users:
            return (
                f"{self.user_in}={user} is out of range [0, {self.num_users}); send a model id "
                "from the ETL (recommend maps raw userIds)"
            )
        with self.torch.inference_mode():
            ids = self.torch.from_numpy(users).to(self.device)
            return self.model(ids).float().cpu().numpy()

    def execute(self, requests):
        responses = []
        for request in requests:  # max_batch_size 0: Triton does not batch requests here
            users = pb_utils.get_input_tensor_by_name(request, self.user_in).as_numpy()
            result = self._scores(users)
            if isinstance(result, str):
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(result)))
            else:
                out = pb_utils.Tensor(self.scores_out, result)
                responses.append(pb_utils.InferenceResponse(output_tensors=[out]))
        return responses
