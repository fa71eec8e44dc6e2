"""Triton python backend: the top-k raw movieIds for a batch of raw userIds.

Config (``../config.pbtxt``), inputs in this order: raw user ids and k (INT64 ``[B, 1]``), the
optional raw movieIds to leave out (INT64 ``[B, E]``, -1 = padding, ids outside the vocabulary are
ignored), the optional flag that allows already-rated items (BOOL ``[B, 1]``) and the optional
history (INT64 ``[B, H]`` raw movieIds, -1 = padding) of users outside the vocabulary. Outputs: raw item
ids (INT64 ``[B, max k]``, -1 = padding) and their scores (FP32, NaN = padding), best first, ties
broken by the lower item model id; ``known`` (BOOL ``[B, 1]``) and the ``export_id`` (INT64
``[B, 1]``) of the export that answered.

Known users are scored by the scorer model (BLS, pinned to this model's version; one request for
all users of an execute(), whatever their request): the whole catalogue (``candidates`` exact:
user ids ``[U, 1]`` -> scores ``[U, C]`` in model-id order) or the items nearest to the user's GMF
vector in a faiss index (``candidates`` ann: item ids ``[U, N]`` -> scores ``[U, N]``). Users
outside the vocabulary with a history are scored here by ``foldin.pt`` (their vectors fitted to
the history, serving/foldin.py), their history left out unless ``include_rated``; without one
they get ``popularity.npz``'s ranking. ``vocab.npz`` (see the workflow model)
maps ids both ways; ``seen.npz`` holds each user's rated items as CSR arrays (``indptr
[num_users + 1]``, ``indices``) by model id. The top-k and the two-stage search are
``retrieval.py``, which ``ncf export`` copies beside this file from ``serving/retrieval.py``.
"""

import json
import os

import numpy as np
import triton_python_backend_utils as pb_utils
from artifact_check import client_error, cpu_threads, manifest_field, verified_artifact
from retrieval import build_index, candidate_count, rerank, search, top_k


def auto_mode(check, params):
    """What candidates "auto" serves: the export's choice (manifest ``checks.ann``) where it was
    measured with this config's settings and faiss is here, else the exact path."""
    settings = check.get("settings", {})
    if not settings or any(params.get(key) != value for key, value in settings.items()):
        return "exact"
    try:
        import faiss  # noqa: F401 (only the two-stage path needs it)
    except ImportError:
        return "exact"
    return check.get("serves", "exact")


class TritonPythonModel:
    def initialize(self, args):
        cfg = json.loads(args["model_config"])
        p = {k: v["string_value"] for k, v in cfg.get("parameters", {}).items()}
        inputs = [t["name"] for t in cfg["input"]]
        self.user_in, self.k_in, self.exclude_in, self.rated_in = inputs[:4]
        self.history_in = inputs[4] if len(inputs) > 4 else None  # the cold start's, optional
        self.items_out, self.scores_out, self.known_out, self.id_out = (
            t["name"] for t in cfg["output"]
        )
        self.scorer, self.scorer_out = p["scorer_model"], p["scorer_output"]
        self.scorer_user, self.scorer_items = p["scorer_user_input"], p["scorer_items_input"]
        self.scorer_id_out = p["scorer_export_id_output"]
        self.version = int(args["model_version"])  # the scorer's version this one was exported with
        vdir = os.path.join(args["model_repository"], args["model_version"])
        self.export_id = int(manifest_field(vdir, p["manifest"], "export_id"))
        lo, hi = manifest_field(vdir, p["manifest"], "ids")["item_id_range"]
        self.lo, self.n_items = lo, hi - lo

        def load(key):
            return np.load(verified_artifact(vdir, p["manifest"], p[key]))

        with load("vocab_artifact") as z:
            self.user_raw, self.user_code = z["user_raw"], z["user_code"]  # sorted raw, codes
            self.item_raw, self.item_code = z["item_raw"], z["item_code"]
            self.raw_item_of = np.full(hi, -1, dtype=np.int64)  # [hi] item code -> raw id
            self.raw_item_of[z["item_code"]] = z["item_raw"]
        with load("seen_artifact") as z:
            self.seen_indptr, self.seen_items = z["indptr"], z["indices"]
        with load("popularity_artifact") as z:
            self.pop_items, self.pop_share = z["items"], z["share"]
        self.mode = p.get("candidates", "auto")
        if self.mode not in ("auto", "exact", "ann"):
            raise pb_utils.TritonModelException(f"candidates={self.mode!r}: use auto, exact or ann")
        if self.mode == "auto":
            self.mode = auto_mode(manifest_field(vdir, p["manifest"], "checks").get("ann", {}), p)
        if self.mode == "ann":
            with load("gmf_artifact") as z:
                self._build_index(z["users"], z["items"], p, cpu_threads(cfg, p))
        self.foldin = None
        if "foldin_artifact" in p:  # absent where the stub has no torch (the GPU variant)
            self._load_foldin(verified_artifact(vdir, p["manifest"], p["foldin_artifact"]), p, cfg)

    def _load_foldin(self, path, p, cfg):
        """The cold start's TorchScript (serving/foldin.py) and its settings."""
        import torch

        torch.set_num_threads(cpu_threads(cfg, p))
        self.foldin = torch.jit.load(path, map_location="cpu").eval()
        self.fold_args = (
            int(p["foldin_steps"]),
            float(p["foldin_lr"]),
            float(p["foldin_l2"]),
            int(p["foldin_negatives"]),
        )
        if self.fold_args[0] < 0 or self.fold_args[1] <= 0 or self.fold_args[3] < 0:
            raise pb_utils.TritonModelException(
                f"foldin_steps, foldin_lr, foldin_l2, foldin_negatives = {self.fold_args}: need "
                "steps >= 0, lr > 0, negatives >= 0"
            )

    def _build_index(self, users, items, p, threads):
        """The faiss inner-product index over the catalogue's GMF item vectors."""
        self.gmf_users = np.ascontiguousarray(users, dtype=np.float32)
        self.index = build_index(items, p["ann_index"], threads)
        self.ef_search = int(p["ann_ef_search"])
        self.ann_candidates = int(p["ann_candidates"])

    # -- one request -> rows --------------------------------------------------------------------

    def _codes(self, raw, table_raw, table_code):
        """(codes, found) of raw ids in a sorted vocabulary."""
        pos = np.minimum(np.searchsorted(table_raw, raw), len(table_raw) - 1)
        found = table_raw[pos] == raw
        return np.where(found, table_code[pos], -1), found

    def _parse(self, request):
        """The rows of one request as a dict, or an error message."""
        raw = pb_utils.get_input_tensor_by_name(request, self.user_in).as_numpy()[:, 0]
        k = pb_utils.get_input_tensor_by_name(request, self.k_in).as_numpy()[:, 0]
        bad = k[(k < 1) | (k > self.n_items)]
        if bad.size:
            return f"{self.k_in}={int(bad[0])}: must be in [1, {self.n_items}] (the catalogue size)"
        users, known = self._codes(raw, self.user_raw, self.user_code)
        exclude = pb_utils.get_input_tensor_by_name(request, self.exclude_in)
        exclude = np.zeros((len(raw), 0), np.int64) if exclude is None else exclude.as_numpy()
        rated = pb_utils.get_input_tensor_by_name(request, self.rated_in)
        rated = np.zeros(len(raw), bool) if rated is None else rated.as_numpy()[:, 0]
        history = self._history(request, len(raw), known)
        blocked = []  # per row: catalogue positions (item id - lo) never to recommend
        for r in range(len(raw)):
            codes, found = self._codes(exclude[r], self.item_raw, self.item_code)
            parts = [codes[found]]
            if known[r] and not rated[r]:
                u = users[r]
                parts.append(self.seen_items[self.seen_indptr[u] : self.seen_indptr[u + 1]])
            elif history[r] is not None and not rated[r]:
                parts.append(history[r] + self.lo)
            rows = np.concatenate(parts) - self.lo
            blocked.append(np.unique(rows[(rows >= 0) & (rows < self.n_items)]))
        return {"users": users, "known": known, "k": k, "blocked": blocked, "history": history}

    def _history(self, request, n, known):
        """Per row: the catalogue positions of the history of a user outside the vocabulary
        (movieIds the vocabulary knows; -1 padding and unknown ids dropped), or None."""
        tensor = (
            None
            if self.history_in is None
            else (pb_utils.get_input_tensor_by_name(request, self.history_in))
        )
        if tensor is None or self.foldin is None:
            return [None] * n
        raw = tensor.as_numpy()
        rows = []
        for r in range(n):
            codes, found = self._codes(raw[r], self.item_raw, self.item_code)
            positions = np.unique(codes[found & (raw[r] >= 0)]) - self.lo
            positions = positions[(positions >= 0) & (positions < self.n_items)]
            rows.append(None if known[r] or positions.size == 0 else positions)
        return rows

    # -- scoring ------------------------------------------------------------------------------

    def _bls(self, users, items=None):
        """Scorer outputs for user ids ``[U]`` (and item ids ``[U, N]``), checked to come from
        this model's export."""
        inputs = [pb_utils.Tensor(self.scorer_user, users.reshape(-1, 1).astype(np.int64))]
        if items is not None:
            inputs.append(pb_utils.Tensor(self.scorer_items, items.astype(np.int64)))
        response = pb_utils.InferenceRequest(
            model_name=self.scorer,
            model_version=self.version,  # the scorer of the same export, never a newer one
            requested_output_names=[self.scorer_out, self.scorer_id_out],
            inputs=inputs,
            # a GPU scorer (neumf_catalogue_libtorch) would otherwise answer in GPU memory
            preferred_memory=pb_utils.PreferredMemory(pb_utils.TRITONSERVER_MEMORY_CPU, 0),
        ).exec()
        if response.has_error():
            raise RuntimeError(f"scorer model {self.scorer!r}: {response.error().message()}")
        scores = pb_utils.get_output_tensor_by_name(response, self.scorer_out).as_numpy()
        ids = pb_utils.get_output_tensor_by_name(response, self.scorer_id_out).as_numpy()
        if np.any(ids != self.export_id):
            raise RuntimeError(
                f"scorer model {self.scorer!r} v{self.version} answered from export "
                f"{int(ids.flat[0])}, this model is export {self.export_id}: re-run `ncf export`"
            )
        width = self.n_items if items is None else items.shape[1]
        if scores.shape != (len(users), width):
            raise RuntimeError(
                f"scorer model {self.scorer!r} returned {scores.shape} scores, want "
                f"({len(users)}, {width}): re-run `ncf export` so both come from one export"
            )
        return scores

    def _candidates(self, users, blocked, k):
        """(catalogue positions [U, N], scores [U, N]) of every known user's candidates."""
        if self.mode == "exact":
            positions = np.broadcast_to(np.arange(self.n_items), (len(users), self.n_items))
            return positions, self._bls(users)
        blocked_max = max((len(b) for b in blocked), default=0)
        n = candidate_count(self.n_items, k, self.ann_candidates, blocked_max)
        positions = search(self.index, self.gmf_users[users], n, self.ef_search)  # -1: none
        return positions, rerank(positions, lambda ids: self._bls(users, ids), self.lo)

    def _row(self, positions, scores, blocked, k):
        """(raw item ids, scores) of one row's k best allowed candidates."""
        allowed = np.ones(self.n_items + 1, dtype=bool)  # [n_items]: position -1 (scored -inf)
        allowed[blocked] = False
        keep = np.isfinite(scores) & allowed[positions]
        items, best = top_k(positions[keep] + self.lo, scores[keep], k)
        return self.raw_item_of[items], best

    def _fold_in(self, history, blocked, k):
        """(catalogue positions [N], probabilities [N]) of the candidates of a user known only by
        the catalogue positions of their history: every item, or (ann) the items nearest to the
        fitted GMF query."""
        import torch

        user_mlp, user_mf = self.foldin.fit(torch.from_numpy(history + self.lo), *self.fold_args)
        if self.mode == "exact":
            rows = torch.arange(self.n_items)
        else:
            query = self.foldin.query(user_mf).numpy().reshape(1, -1)
            n = candidate_count(self.n_items, k, self.ann_candidates, len(blocked))
            found = search(self.index, query, n, self.ef_search)[0]  # [n], -1: none
            rows = torch.from_numpy(found[found >= 0])
        scores = self.foldin.score_rows(user_mlp, user_mf, rows)
        return rows.numpy(), scores.numpy()

    def _popular(self, blocked, k):
        """(raw item ids, scores) of the k most popular allowed items (users outside the vocab)."""
        keep = ~np.isin(self.pop_items - self.lo, blocked)
        return self.raw_item_of[self.pop_items[keep][:k]], self.pop_share[keep][:k]

    # -- execute --------------------------------------------------------------------------------

    def _respond(self, rows, positions, scores, start):
        """The response of one parsed request whose known users' candidates begin at ``start``."""
        n, width = len(rows["k"]), int(rows["k"].max())
        movie_ids = np.full((n, width), -1, dtype=np.int64)
        out_scores = np.full((n, width), np.nan, dtype=np.float32)
        for r in range(n):
            k, blocked = int(rows["k"][r]), rows["blocked"][r]
            if rows["known"][r]:
                items, best = self._row(positions[start], scores[start], blocked, k)
                start += 1
            elif rows["history"][r] is not None:
                items, best = self._row(*self._fold_in(rows["history"][r], blocked, k), blocked, k)
            else:
                items, best = self._popular(blocked, k)
            movie_ids[r, : len(items)], out_scores[r, : len(items)] = items, best
        outputs = [
            pb_utils.Tensor(self.items_out, movie_ids),
            pb_utils.Tensor(self.scores_out, out_scores),
            pb_utils.Tensor(self.known_out, rows["known"].reshape(-1, 1)),
            pb_utils.Tensor(self.id_out, np.full((n, 1), self.export_id, dtype=np.int64)),
        ]
        return pb_utils.InferenceResponse(output_tensors=outputs), start

    def execute(self, requests):
        parsed = [self._parse(r) for r in requests]  # a str: that request's error
        valid = [rows for rows in parsed if not isinstance(rows, str)]
        users = [rows["users"][rows["known"]] for rows in valid]
        blocked = [
            b for rows in valid for b, kn in zip(rows["blocked"], rows["known"], strict=True) if kn
        ]
        users = np.concatenate(users) if users else np.zeros(0, np.int64)
        try:
            k = max((int(rows["k"].max()) for rows in valid), default=1)
            scored = self._candidates(users, blocked, k) if users.size else (None, None)
        except RuntimeError as exc:  # the scorer failed: every request of this batch fails
            return [
                pb_utils.InferenceResponse(error=pb_utils.TritonError(str(exc))) for _ in parsed
            ]
        responses, start = [], 0
        for rows in parsed:
            if isinstance(rows, str):
                responses.append(pb_utils.InferenceResponse(error=client_error(rows)))
                continue
            response, start = self._respond(rows, *scored, start)
            responses.append(response)
        return responses
