"""Triton python backend: the top-k raw movieIds for a raw userId, the rated items excluded.

Config (``../config.pbtxt``): inputs raw user id and k (INT64 ``[1, 1]``, in that order); outputs
raw item ids (INT64 ``[1, k]``) and their scores (FP32 ``[1, k]``), best first, ties broken by the
lower item model id. Every item of the catalogue (``item_id_range`` in the manifest) is scored in
one request to the scorer model (BLS; ``neumf_catalogue``: user id ``[1, 1]`` -> scores ``[1, C]``
in model-id order). ``vocab.npz`` (see the workflow model) maps ids both ways; ``seen.npz``
holds each user's rated items as CSR arrays (``indptr [num_users + 1]``, ``indices``) by model id.
"""

import json
import os

import numpy as np
import triton_python_backend_utils as pb_utils
from artifact_check import manifest_ids, verified_artifact


class TritonPythonModel:
    def initialize(self, args):
        cfg = json.loads(args["model_config"])
        p = {k: v["string_value"] for k, v in cfg.get("parameters", {}).items()}
        self.raw_user_in, self.k_in = (t["name"] for t in cfg["input"])
        self.items_out, self.scores_out = (t["name"] for t in cfg["output"])
        self.scorer = p["scorer_model"]
        self.scorer_user, self.scorer_out = p["scorer_user_input"], p["scorer_output"]
        vdir = os.path.join(args["model_repository"], args["model_version"])
        lo, hi = manifest_ids(vdir, p["manifest"])["item_id_range"]
        self.candidates = np.arange(lo, hi, dtype=np.int64)  # [C] item model ids, the catalogue
        with np.load(verified_artifact(vdir, p["manifest"], p["vocab_artifact"])) as z:
            self.user_raw, self.user_code = z["user_raw"], z["user_code"]  # sorted raw, codes
            self.raw_item_of = np.full(hi, -1, dtype=np.int64)  # [hi] item code -> raw id
            self.raw_item_of[z["item_code"]] = z["item_raw"]
        with np.load(verified_artifact(vdir, p["manifest"], p["seen_artifact"])) as z:
            self.seen_indptr, self.seen_items = z["indptr"], z["indices"]

    def _user_code(self, raw_user):
        pos = min(int(np.searchsorted(self.user_raw, raw_user)), len(self.user_raw) - 1)
        return int(self.user_code[pos]) if self.user_raw[pos] == raw_user else None

    def _scores(self, user):
        """Scores [C] of every catalogue item for model id ``user`` (one BLS request)."""
        request = pb_utils.InferenceRequest(
            model_name=self.scorer,
            requested_output_names=[self.scorer_out],
            inputs=[pb_utils.Tensor(self.scorer_user, np.array([[user]], dtype=np.int64))],
            # a GPU scorer (neumf_catalogue_libtorch) would otherwise answer in GPU memory
            preferred_memory=pb_utils.PreferredMemory(pb_utils.TRITONSERVER_MEMORY_CPU, 0),
        )
        response = request.exec()
        if response.has_error():
            raise RuntimeError(f"scorer model {self.scorer!r}: {response.error().message()}")
        scores = pb_utils.get_output_tensor_by_name(response, self.scorer_out).as_numpy()
        if scores.shape != (1, len(self.candidates)):
            raise RuntimeError(
                f"scorer model {self.scorer!r} returned {scores.shape} scores for a catalogue of "
                f"{len(self.candidates)} items: re-run `ncf export` so both come from one export"
            )
        return scores[0]

    def _recommend(self, raw_user, k):
        """(raw item ids [1, n], scores [1, n]) with n = min(k, unrated items), or an error string."""
        if k <= 0 or k > len(self.candidates):
            return f"{self.k_in}={k}: must be in [1, {len(self.candidates)}] (the catalogue size)"
        user = self._user_code(raw_user)
        if user is None:
            return (
                f"{self.raw_user_in}={raw_user} is not in the vocabulary (no ratings in the "
                "training data): recommendations need a known user"
            )
        scores = self._scores(user)  # [C]
        keep = np.ones(len(self.candidates), dtype=bool)
        seen = self.seen_items[self.seen_indptr[user] : self.seen_indptr[user + 1]]
        seen = seen[(seen >= self.candidates[0]) & (seen <= self.candidates[-1])]
        keep[seen - self.candidates[0]] = False
        items, scores = self.candidates[keep], scores[keep]
        if k < len(scores):  # sort only the items that can make the top k (ties at the k-th kept)
            top = scores >= np.partition(scores, len(scores) - k)[len(scores) - k]
            items, scores = items[top], scores[top]
        best = np.lexsort((items, -scores))[:k]  # score descending, then item id ascending
        return self.raw_item_of[items[best]][None, :], scores[best][None, :].astype(np.float32)

    def execute(self, requests):
        responses = []
        for request in requests:
            raw_user = int(
                pb_utils.get_input_tensor_by_name(request, self.raw_user_in).as_numpy()[0, 0]
            )
            k = int(pb_utils.get_input_tensor_by_name(request, self.k_in).as_numpy()[0, 0])
            try:
                result = self._recommend(raw_user, k)
            except RuntimeError as exc:
                result = str(exc)
            if isinstance(result, str):
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(result)))
                continue
            outputs = [
                pb_utils.Tensor(self.items_out, result[0]),
                pb_utils.Tensor(self.scores_out, result[1]),
            ]
            responses.append(pb_utils.InferenceResponse(output_tensors=outputs))
        return responses
