"""Shared by the python-backend models: read the export manifest, verify an artifact's sha256,
make the error of a request that fails for what the client sent, and size the CPU thread pools.

The one source of this code: ``ncf export`` copies it into each python model's version folder
(beside ``model.py``, which imports it as ``artifact_check``; the python backend puts that folder
on ``sys.path``). Triton ignores files at the top of a model repository.
"""

import hashlib
import json
import os

import triton_python_backend_utils as pb_utils


def client_error(message):
    """The error of a request that is wrong for what the client sent (an id, ``k`` or batch
    outside the range ``message`` names): ``INVALID_ARG``, which Triton answers with HTTP 400 and
    gRPC ``INVALID_ARGUMENT``. A plain ``TritonError`` is ``INTERNAL``, HTTP 500: a server fault.
    """
    return pb_utils.TritonError(message, pb_utils.TritonError.INVALID_ARG)


MAX_THREADS = 8  # intra-op threads of one instance at most (the default rule's cap)


def cpu_threads(model_config, params, cpus=None):
    """Intra-op threads of one CPU instance (torch, ONNX Runtime, faiss's OpenMP).

    The config's ``num_threads`` parameter when it is above 0. Otherwise the CPUs the server may
    use (``cpus``, default its affinity mask), less one left to Triton's front end and the other
    models' stubs, shared among this model's instances (the ``instance_group`` counts): at least
    1, at most ``MAX_THREADS``. A pool wider than its share of the cores loses most of its speed
    when something else runs beside the server: each parallel step waits for its slowest thread.
    """
    given = int(params.get("num_threads", "0"))
    if given > 0:
        return given
    cpus = len(os.sched_getaffinity(0)) if cpus is None else cpus
    groups = model_config.get("instance_group") or [{}]
    instances = max(1, sum(int(g.get("count", 1)) for g in groups))
    return max(1, min(MAX_THREADS, (cpus - 1) // instances))


def manifest_field(version_dir, manifest_name, key):
    """One top-level field of the export manifest (e.g. ``ids``, ``export_id``)."""
    path = os.path.join(version_dir, manifest_name)
    if not os.path.isfile(path):
        raise pb_utils.TritonModelException(
            f"{path} not found: run `ncf export` to write the artifacts and manifest"
        )
    with open(path, encoding="utf-8") as f:
        manifest = json.load(f)
    if key not in manifest:
        raise pb_utils.TritonModelException(f"{path} has no {key!r}: re-run `ncf export`")
    return manifest[key]


def manifest_ids(version_dir, manifest_name):
    """The manifest's ``ids`` (num_users, num_items, user_id_range, item_id_range)."""
    return manifest_field(version_dir, manifest_name, "ids")


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
