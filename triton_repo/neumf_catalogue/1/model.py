"""Triton python backend: the scores of every catalogue item for one user model id.

Config (``../config.pbtxt``): input user id (INT64 ``[1, 1]``), output the item scores (FP32
``[1, C]``, C = the manifest's item_id_range, items in model-id order). Runs the TorchScript
module ``ncf export`` wrote (``catalogue_artifact``), loaded only after its sha256 matches
``manifest.json``. An out-of-range user id gets an error response naming it.
"""

import json
import os

import torch
import triton_python_backend_utils as pb_utils
from artifact_check import manifest_ids, verified_artifact


class TritonPythonModel:
    def initialize(self, args):
        cfg = json.loads(args["model_config"])
        params = {k: v["string_value"] for k, v in cfg.get("parameters", {}).items()}
        self.user_in = cfg["input"][0]["name"]
        self.scores_out = cfg["output"][0]["name"]
        version_dir = os.path.join(args["model_repository"], args["model_version"])
        path = verified_artifact(version_dir, params["manifest"], params["catalogue_artifact"])
        self.num_users = int(manifest_ids(version_dir, params["manifest"])["num_users"])
        gpu = args.get("model_instance_kind") == "GPU"
        device_id = int(args.get("model_instance_device_id", 0))
        torch.set_num_threads(
            int(params.get("num_threads", "0")) or min(8, len(os.sched_getaffinity(0)))
        )
        self.device = torch.device(f"cuda:{device_id}" if gpu else "cpu")
        self.model = torch.jit.load(path, map_location=self.device).eval()

    def _scores(self, users):
        """Scores ``[1, C]`` float32 for ``users`` ``[1, 1]``, or an error message."""
        user = int(users[0, 0])
        if not 0 <= user < self.num_users:
            return (
                f"{self.user_in}={user} is out of range [0, {self.num_users}); send a model id "
                "from the ETL (recommend maps raw userIds)"
            )
        with torch.inference_mode():
            ids = torch.from_numpy(users).to(self.device)
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
