"""``ncf export``: a training checkpoint -> TorchScript + ONNX in a Triton model repository.

The served network takes ``user_id [B, 1]`` and ``item_id [B, 1]`` (int64 model ids) and returns
the probability ``score [B, 1]`` (fp32, sigmoid of NeuMF's logit). Both artifacts are loaded back
and compared with eager PyTorch on random valid ids before anything is written, as is the
whole-catalogue scorer of ``recommend`` (``serving/catalogue.py``, also in bf16: its difference
to fp32 is measured and recorded). Each export writes a new version folder of every model,
atomically, each with a ``manifest.json`` (sha256 of every artifact, id ranges, the source
checkpoint and ETL, the check results, the version and a random ``export_id`` that the scorer's
outputs carry). The vocabularies of the saved NVTabular Workflow, the users' rated items, the
training popularity ranking and the GMF vectors are exported for the ``workflow`` and
``recommend`` models (``serving/tables.py``). With ``--server-url`` the running server switches to
the new version (``ncf.serving.repository.activate_version``); old versions are then pruned.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import inspect
import io
import json
import logging
import os
import secrets
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import numpy as np
import onnx
import onnxruntime as ort
import torch

from ncf.core import names
from ncf.core.config import DEFAULT_SEED, Config, flag, setting
from ncf.core.digest import sha256_file
from ncf.models.checkpoint import load_model
from ncf.models.data import read_metadata
from ncf.models.neumf import NeuMF
from ncf.serving import ann_check, foldin, merlin_systems, repository, tables
from ncf.serving.catalogue import CatalogueNeuMF, to_precision
from ncf.serving.served import ServingNeuMF


def random_ids(meta: dict, n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` random valid (user, item) model ids, each ``[n, 1]`` int64, from the metadata ranges."""
    rng = np.random.default_rng(seed)
    users = rng.integers(*meta["user_id_range"], size=(n, 1), dtype=np.int64)
    items = rng.integers(*meta["item_id_range"], size=(n, 1), dtype=np.int64)
    return torch.from_numpy(users), torch.from_numpy(items)


def to_torchscript(wrapper: ServingNeuMF, example: tuple[torch.Tensor, torch.Tensor]) -> bytes:
    """Trace ``wrapper`` and return the serialized TorchScript module."""
    with torch.no_grad():
        traced = torch.jit.trace(wrapper, example)
    args = [a.name for a in traced.forward.schema.arguments[1:]]
    if args != [names.INPUT_USER, names.INPUT_ITEM]:  # the libtorch backend binds inputs by name
        raise RuntimeError(f"TorchScript forward() arguments {args} differ from the Triton inputs")
    buf = io.BytesIO()
    torch.jit.save(traced, buf)
    return buf.getvalue()


def dynamo_exporter_available() -> bool:
    """Whether this torch has the torch.export-based ONNX exporter (torch >= 2.5 with onnxscript).

    Older stacks (e.g. the NGC Merlin 23.08 container's torch) have only the TorchScript exporter.
    """
    try:
        import onnxscript  # noqa: F401 (the dynamo exporter needs it)
    except ImportError:
        return False
    return _has_dynamo_arg()


def _has_dynamo_arg() -> bool:
    return "dynamo" in inspect.signature(torch.onnx.export).parameters


def resolve_onnx_exporter(name: str) -> str:
    """ "dynamo" or "legacy" for an ``--onnx-exporter`` value ("auto" picks dynamo where available)."""
    if name not in ("auto", "dynamo", "legacy"):
        raise ValueError(f"--onnx-exporter={name!r}: use auto, dynamo or legacy")
    if name == "auto":
        return "dynamo" if dynamo_exporter_available() else "legacy"
    if name == "dynamo" and not dynamo_exporter_available():
        raise ValueError(
            f"--onnx-exporter=dynamo: torch {torch.__version__} with these packages has no "
            "torch.export-based ONNX exporter (needs torch>=2.5 and onnxscript); use legacy or auto"
        )
    return name


def to_onnx(
    wrapper: ServingNeuMF, example: tuple[torch.Tensor, torch.Tensor], exporter: str = "auto"
) -> bytes:
    """Export ``wrapper`` to ONNX with a dynamic batch axis; return the serialized model.

    Parameters
    ----------
    exporter
        "dynamo" (torch.export-based, the default where available), "legacy" (TorchScript-based,
        deprecated in torch 2.13 but the only one in older torch), or "auto".
    """
    exporter = resolve_onnx_exporter(exporter)
    io_names = {
        "input_names": [names.INPUT_USER, names.INPUT_ITEM],
        "output_names": [names.OUTPUT_SCORE],
    }
    with warnings.catch_warnings():
        # Harmless notes: both inputs share one batch Dim (the exporter renames the axis), torch
        # 2.13's pytree code trips its own LeafSpec deprecation, the legacy exporter is deprecated.
        warnings.filterwarnings("ignore", message=r".*axis name.*will not be used")
        warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\)")
        warnings.filterwarnings("ignore", message=r".*legacy TorchScript-based ONNX export")
        warnings.filterwarnings("ignore", message=r".*feature will be removed")
        if exporter == "dynamo":
            proto = _onnx_dynamo(wrapper, example, io_names)
        else:
            buf = io.BytesIO()
            axes = {n: {0: "batch"} for n in (*io_names["input_names"], *io_names["output_names"])}
            # torch >= 2.9 defaults to dynamo=True; torch < 2.5 has no such argument.
            legacy = {"dynamo": False} if _has_dynamo_arg() else {}
            torch.onnx.export(
                wrapper, example, buf, dynamic_axes=axes, opset_version=17, **io_names, **legacy
            )
            proto = onnx.load_from_string(buf.getvalue())
    onnx.checker.check_model(proto)
    return proto.SerializeToString()


def _onnx_dynamo(wrapper: ServingNeuMF, example: tuple, io_names: dict) -> onnx.ModelProto:
    # The exporter logs that torchvision ops are skipped (not installed, not used): keep it quiet.
    logging.getLogger("torch.onnx._internal.exporter._registration").setLevel(logging.ERROR)
    batch = torch.export.Dim("batch")
    program = torch.onnx.export(
        wrapper,
        example,
        dynamo=True,
        external_data=False,
        verbose=False,
        dynamic_shapes=({0: batch}, {0: batch}),
        **io_names,
    )
    return program.model_proto


def check_artifacts(
    wrapper: ServingNeuMF, ts_bytes: bytes, onnx_bytes: bytes, meta: dict, n: int, seed: int
) -> dict[str, float]:
    """Max abs difference of each loaded artifact vs eager PyTorch on random ids, batch 1 and ``n``."""
    scripted = torch.jit.load(io.BytesIO(ts_bytes), map_location="cpu").eval()
    session = ort.InferenceSession(onnx_bytes, providers=["CPUExecutionProvider"])
    diffs = {"torchscript": 0.0, "onnx": 0.0}
    users, items = random_ids(meta, n, seed)
    for u, i in ((users[:1], items[:1]), (users, items)):
        with torch.no_grad():
            eager = wrapper(u, i).numpy()
            ts = scripted(u, i).numpy()
        ox = session.run(None, {names.INPUT_USER: u.numpy(), names.INPUT_ITEM: i.numpy()})[0]
        for key, out in (("torchscript", ts), ("onnx", ox)):
            if out.shape != eager.shape or out.dtype != np.float32:
                raise RuntimeError(
                    f"{key} output {out.shape} {out.dtype}, eager {eager.shape} float32"
                )
            diffs[key] = max(diffs[key], float(np.abs(out - eager).max()))
    return diffs


def to_catalogue(model: NeuMF, meta: dict, export_id: int = 0) -> bytes:
    """Script ``CatalogueNeuMF`` over the metadata's item range; return the serialized module."""
    module = CatalogueNeuMF(model, *meta["item_id_range"], export_id=export_id).eval()
    scripted = torch.jit.script(module)
    args = [a.name for a in scripted.forward.schema.arguments[1:]]
    if args != [names.INPUT_USER]:  # the libtorch backend binds inputs by name
        raise RuntimeError(f"catalogue forward() arguments {args} differ from the Triton input")
    buf = io.BytesIO()
    torch.jit.save(scripted, buf)
    return buf.getvalue()


def check_catalogue(wrapper: ServingNeuMF, cat_bytes: bytes, meta: dict, users: int, seed: int):
    """Max abs difference of the loaded catalogue scorer vs eager PyTorch, every item of
    ``users`` random users (scored as one batch)."""
    scripted = torch.jit.load(io.BytesIO(cat_bytes), map_location="cpu").eval()
    lo, hi = meta["item_id_range"]
    items = torch.arange(lo, hi).unsqueeze(1)  # [C, 1]
    batch = random_ids(meta, users, seed)[0]  # [B, 1]
    with torch.no_grad():
        got, ids = scripted(batch)
    if got.shape != (users, hi - lo) or got.dtype != torch.float32 or ids.shape != (users, 1):
        raise RuntimeError(
            f"catalogue output {tuple(got.shape)} {got.dtype}, ids {tuple(ids.shape)}; "
            f"want ({users}, {hi - lo}) float32 and ({users}, 1)"
        )
    diff = 0.0
    for row, user in enumerate(batch):  # [1] each
        with torch.no_grad():
            eager = wrapper(user.expand(hi - lo, 1), items)[:, 0]  # [C]
        diff = max(diff, float((got[row] - eager).abs().max()))
    return diff


def check_bf16(cat_bytes: bytes, meta: dict, users: int, seed: int, k: int = 10) -> dict:
    """The bf16 catalogue scorer vs fp32 on ``users`` random users: max abs difference of the
    probabilities and the mean share of the fp32 top-``k`` that bf16 also ranks in its top-``k``."""
    fp32 = torch.jit.load(io.BytesIO(cat_bytes), map_location="cpu").eval()
    bf16 = to_precision(torch.jit.load(io.BytesIO(cat_bytes), map_location="cpu").eval(), "bf16")
    batch = random_ids(meta, users, seed)[0]
    with torch.no_grad():
        want, got = fp32(batch)[0], bf16(batch)[0]
    k = min(k, want.shape[1])
    same = [
        len(set(a.tolist()) & set(b.tolist())) / k
        for a, b in zip(want.topk(k).indices, got.topk(k).indices, strict=True)
    ]
    return {
        "max_abs_diff": float((got - want).abs().max()),
        f"top{k}_agreement": round(sum(same) / len(same), 4),
        "users": users,
    }


def gmf_tables(model: NeuMF, meta: dict) -> dict[str, np.ndarray]:
    """Arrays of ``gmf.npz``: ``users [U, F]`` (GMF user vectors times the output weights) and
    ``items [C, F]`` (the catalogue's GMF item vectors): ``users[u] @ items[i]`` is the GMF part
    of the logit, what the two-stage path's candidate index ranks by."""
    f, (lo, hi) = model.cfg.factors, meta["item_id_range"]
    with torch.no_grad():
        users = model.mf_user_embed.weight * model.final.weight[0, :f]
        items = model.mf_item_embed.weight[lo:hi].detach().clone()
    return {"users": users.float().numpy(), "items": items.float().numpy()}


def _check_data_match(ckpt: dict, model: NeuMF, meta: dict, data: Path, force: bool) -> None:
    cfg = model.cfg
    if (cfg.num_users, cfg.num_items) != (meta["num_users"], meta["num_items"]):
        raise ValueError(
            f"checkpoint has num_users={cfg.num_users}, num_items={cfg.num_items} but "
            f"{data / names.METADATA_FILE} has {meta['num_users']}, {meta['num_items']}: pass "
            f"--data the ETL directory the checkpoint was trained on ({ckpt.get('data', {}).get('etl_dir')})"
        )
    want = (ckpt.get("data") or {}).get("metadata_sha256")
    have = sha256_file(data / names.METADATA_FILE)
    if want and want != have and not force:
        raise ValueError(
            f"{data / names.METADATA_FILE} sha256 {have[:12]}.. differs from the one the checkpoint "
            f"was trained on ({want[:12]}..): pass --data {ckpt['data'].get('etl_dir')}, or "
            "--ignore-data-hash if the ids are known to be the same"
        )


EXTRA_EXPORTS = ("merlin-systems",)  # what --with offers beside this project's repository


@dataclasses.dataclass
class ExportConfig(Config):
    """Export a checkpoint to TorchScript + ONNX in a Triton repository (`ncf export`)."""

    checkpoint: Path | None = setting(None, help="training checkpoint (RUN_DIR/best.pt; required)")
    data: Path | None = setting(
        None, help="ETL output directory the model was trained on (required)"
    )
    repo: Path = setting(Path("triton_repo"), help="Triton model repository to fill")
    tolerance: float = setting(1e-5, help="max abs diff vs eager PyTorch")
    check_samples: int = setting(4096, help="random ids compared")
    seed: int = setting(DEFAULT_SEED, help="seed of the random ids")
    template: Path | None = setting(
        None,
        help="repository whose config.pbtxt/model.py files are copied into --repo where missing "
        "(unset: this project's triton_repo/)",
    )
    ignore_data_hash: bool = flag(
        False, help="export even if metadata.json differs from the one recorded in the checkpoint"
    )
    onnx_exporter: Literal["auto", "dynamo", "legacy"] = setting(
        "auto",
        help="ONNX exporter: torch.export-based (dynamo) where available, else TorchScript-based",
    )
    server_url: str | None = setting(
        None,
        help="HTTP host:port of the tritonserver serving --repo: switch it to the new version "
        "(zero failed requests; e.g. 127.0.0.1:8000; unset: no server is switched)",
    )
    keep_versions: int = setting(
        repository.KEEP_VERSIONS, help="exported versions kept in --repo, newest first"
    )
    export_with: list[str] = setting(
        default_factory=list,
        alias="--with",
        choices=EXTRA_EXPORTS,
        nargs="*",
        help="also export the model this way: merlin-systems (its executor ensemble of the ETL's "
        "Workflow and the TorchScript model, into --merlin-repo; docs/MERLIN_SYSTEMS.md)",
    )
    merlin_repo: Path = setting(
        Path("triton_repo_merlin"), help="where --with merlin-systems writes its repository"
    )
    merlin_predict: str = setting(
        merlin_systems.PREDICT[0],
        choices=merlin_systems.PREDICT,
        help="where --with merlin-systems runs the TorchScript model: python (inside its executor "
        "model; any tritonserver) or pytorch (PredictPyTorch's libtorch model; a tritonserver "
        "with the pytorch backend, e.g. NGC's Triton image)",
    )

    def check(self) -> None:
        """Raise ValueError naming the flag of a missing or invalid value."""
        for name in ("checkpoint", "data"):
            if getattr(self, name) is None:
                raise ValueError(f"--{name}: required (see `ncf export --help`)")
        if self.check_samples < 1 or not self.tolerance >= 0:
            raise ValueError(
                f"--check-samples={self.check_samples}, --tolerance={self.tolerance}: need >= 1 "
                "and >= 0"
            )


CONFIG = ExportConfig


def export_repository(
    checkpoint: str | os.PathLike,
    data: str | os.PathLike,
    repo: str | os.PathLike,
    tolerance: float = ExportConfig.tolerance,
    check_samples: int = ExportConfig.check_samples,
    seed: int = ExportConfig.seed,
    template: str | os.PathLike | None = None,
    ignore_data_hash: bool = False,
    onnx_exporter: str = ExportConfig.onnx_exporter,
    server_url: str | None = None,
    keep_versions: int = ExportConfig.keep_versions,
    export_with: Sequence[str] = (),
    merlin_repo: str | os.PathLike = ExportConfig.merlin_repo,
    merlin_predict: str = ExportConfig.merlin_predict,
    config: dict | None = None,
) -> dict:
    """Export ``checkpoint`` and the ETL tables of ``data`` into a new version of ``repo``.

    Parameters
    ----------
    server_url
        HTTP address of a tritonserver serving ``repo`` (explicit model control): it switches to
        the new version before old versions are pruned.
    keep_versions
        Exported versions kept on disk (the newest ones).
    config
        The resolved ``ncf export`` config, recorded in the manifests (``config``).

    Returns
    -------
    dict
        The common manifest (ids, source, checks incl. max abs diffs, version, export_id,
        timings; ``switched`` when a server was switched).

    Raises
    ------
    ValueError
        Checkpoint and ETL disagree, or an artifact differs from eager PyTorch by more than
        ``tolerance`` (nothing is written then).
    ServerError
        No server answers at ``server_url`` (nothing is written then), or it refused the switch
        (the new version stays on disk, nothing is pruned).
    """
    t0 = time.perf_counter()
    if keep_versions < 1:
        raise ValueError(f"--keep-versions {keep_versions}: must be >= 1 (the serving version)")
    if server_url:  # before the work and before anything is written for it
        repository.check_server(server_url)
    if "merlin-systems" in export_with:
        merlin_systems.check_target(Path(merlin_repo))
    data = Path(data)
    model, ckpt = load_model(checkpoint, kinds=("neumf",))
    if model.cfg.towers != "both":  # the catalogue scorer reads both towers' weights
        raise ValueError(
            f"{checkpoint}: a NeuMF with its {model.cfg.towers} tower alone (a pretraining run); "
            "export a NeuMF with both towers, e.g. the run's own best.pt"
        )
    meta, _ = read_metadata(data)
    _check_data_match(ckpt, model, meta, data, ignore_data_hash)
    wrapper = ServingNeuMF(model).eval()
    example = random_ids(meta, 8, seed)
    exporter = resolve_onnx_exporter(onnx_exporter)
    ts_bytes, onnx_bytes = (
        to_torchscript(wrapper, example),
        to_onnx(wrapper, example, exporter),
    )
    diffs = check_artifacts(wrapper, ts_bytes, onnx_bytes, meta, check_samples, seed + 1)
    export_id = secrets.randbits(62)  # positive int64; tells the exports' outputs apart
    cat_bytes = to_catalogue(model, meta, export_id)
    diffs["catalogue"] = check_catalogue(wrapper, cat_bytes, meta, 8, seed + 2)
    fold_bytes = foldin.to_foldin(model, meta)
    diffs["foldin"] = foldin.check_foldin(model, fold_bytes, meta, seed + 5)
    if "merlin-systems" in export_with:  # checked here, written once ours is
        merlin, diffs["merlin_systems"] = merlin_systems.checked_ensemble(
            model, data, meta, check_samples, seed + 6, merlin_predict
        )
    bad = {k: v for k, v in diffs.items() if not v <= tolerance}
    if bad:
        raise ValueError(
            f"exported model differs from eager PyTorch by {bad} (> --tolerance {tolerance}) on "
            f"{check_samples} random ids of {checkpoint}; nothing written to {repo}"
        )
    arrays = _tables(model, meta, data)
    artifacts = {
        names.ARTIFACT_TORCHSCRIPT: ts_bytes,
        names.ARTIFACT_ONNX: onnx_bytes,
        names.ARTIFACT_CATALOGUE: cat_bytes,
        names.ARTIFACT_FOLDIN: fold_bytes,
        **{name: _npz(table) for name, table in arrays.items()},
    }
    checks = {"max_abs_diff": diffs, "tolerance": tolerance, "samples": check_samples, "seed": seed}
    checks["onnx_exporter"] = exporter
    checks["catalogue_bf16"] = check_bf16(cat_bytes, meta, 16, seed + 3)
    params = ann_check.recommend_parameters(_served_configs(repo, template))
    gmf, seen = arrays[names.ARTIFACT_GMF], arrays[names.ARTIFACT_SEEN]
    checks["ann"] = ann_check.check_ann(cat_bytes, gmf, seen, meta, params, seed + 4)
    manifest = _manifest(Path(checkpoint), ckpt, model, meta, data, checks)
    manifest["export_id"] = export_id
    if config is not None:
        manifest["config"] = config
    _publish(repo, artifacts, manifest, template, server_url, keep_versions)
    if "merlin-systems" in export_with:
        merlin_systems.write_repository(merlin, Path(merlin_repo))
        manifest["merlin_systems"] = str(Path(merlin_repo).resolve())
    manifest["seconds"] = round(time.perf_counter() - t0, 2)
    return manifest


def _tables(model: NeuMF, meta: dict, data: Path) -> dict[str, dict[str, np.ndarray]]:
    """The lookup tables of the workflow and recommend models: artifact name -> arrays."""
    return {
        names.ARTIFACT_VOCAB: tables.vocab_tables(data, meta),
        names.ARTIFACT_SEEN: tables.seen_tables(data, meta),
        names.ARTIFACT_POPULARITY: tables.popularity_tables(data, meta),
        names.ARTIFACT_GMF: gmf_tables(model, meta),
    }


def _served_configs(repo, template) -> Path:
    """The repository whose ``recommend`` config the server will load: ``repo`` once it has one,
    else the template it gets its configs from."""
    repo = Path(repo)
    if (repo / names.MODEL_RECOMMEND / "config.pbtxt").is_file():
        return repo
    return Path(template) if template else repository.project_repo()


def _publish(repo, artifacts: dict, manifest: dict, template, server_url, keep: int) -> None:
    """Write the next version, switch the server at ``server_url`` to it, prune old versions;
    records version, switch and pruning in ``manifest``."""
    manifest["version"] = repository.next_version(repo)
    repository.write_repository(repo, artifacts, manifest, template, manifest["version"])
    if server_url:
        manifest["switched"] = repository.activate_version(server_url, manifest["version"])
    manifest["pruned"] = [str(p) for p in repository.prune_versions(repo, keep)]
    manifest["artifact_bytes"] = {k: len(v) for k, v in artifacts.items()}


def _manifest(
    checkpoint: Path, ckpt: dict, model: NeuMF, meta: dict, data: Path, checks: dict
) -> dict:
    """Fields every version folder's manifest shares: ids, where the model came from, checks."""
    return {
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "ids": {k: meta[k] for k in ("num_users", "num_items", "user_id_range", "item_id_range")},
        "source": {
            "checkpoint": str(checkpoint.resolve()),
            "checkpoint_sha256": sha256_file(checkpoint),
            "epoch": ckpt.get("epoch"),
            "metrics": ckpt.get("metrics"),
            "model_config": model.cfg.to_dict(),
            "etl_dir": str(data.resolve()),
            "metadata_sha256": sha256_file(data / names.METADATA_FILE),
        },
        "checks": checks,
        "versions": {
            "torch": torch.__version__,
            "onnx": onnx.__version__,
            "onnxruntime": ort.__version__,
        },
    }


def _npz(arrays: dict[str, np.ndarray]) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


def run(cfg: ExportConfig) -> int:
    """Run ``ncf export``; prints the checks and the written models as JSON on stdout.

    The resolved ``cfg`` is recorded in every version folder's ``manifest.json`` (``config``).
    """
    values = {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg)}
    manifest = export_repository(**values, config=cfg.to_dict())
    summary = {
        "repo": str(Path(cfg.repo).resolve()),
        "models": list(repository.MODEL_ARTIFACTS),
        "version": manifest["version"],
        "export_id": manifest["export_id"],
        "switched": bool(cfg.server_url),
        "max_abs_diff": manifest["checks"]["max_abs_diff"],
        "catalogue_bf16": manifest["checks"]["catalogue_bf16"],
        "ann": manifest["checks"]["ann"],
        "artifact_bytes": manifest["artifact_bytes"],
        "merlin_systems": manifest.get("merlin_systems"),
        "seconds": manifest["seconds"],
    }
    print(json.dumps(summary, indent=2))
    return 0
