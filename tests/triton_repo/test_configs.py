"""The committed triton_repo/ definitions parse as Triton ModelConfig and use ncf/core/names.py."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from ncf.core import names
from ncf.serving.repository import MODEL_ARTIFACTS, project_repo

REPO = project_repo()
ALL_MODELS = sorted(MODEL_ARTIFACTS)
PYTHON_MODELS = [
    names.MODEL_NEUMF,
    names.MODEL_CATALOGUE,
    names.MODEL_WORKFLOW,
    names.MODEL_RECOMMEND,
]
CATALOGUE_MODELS = [names.MODEL_CATALOGUE, names.MODEL_CATALOGUE_LIBTORCH]
NEUMF_MODELS = [names.MODEL_NEUMF, names.MODEL_NEUMF_LIBTORCH, names.MODEL_NEUMF_ONNX]
# What triton_repo/*/1/model.py may import (docs/ARCHITECTURE.md).
ALLOWED_IMPORTS = {
    "hashlib",
    "json",
    "os",
    "numpy",
    "torch",
    "onnxruntime",
    "triton_python_backend_utils",
    "faiss",  # recommend's two-stage path only (candidates "ann"), imported when configured
    names.PYTHON_MODEL_HELPER.removesuffix(".py"),  # artifact_check, copied beside by export
    "retrieval",  # serving/retrieval.py, copied beside by export (tests/serving/test_retrieval.py)
}


def parse(path: Path) -> mc.ModelConfig:
    return text_format.Parse(path.read_text(encoding="utf-8"), mc.ModelConfig())


def config(model: str) -> mc.ModelConfig:
    return parse(REPO / model / "config.pbtxt")


def io(tensors) -> list[tuple[str, str, list[int]]]:
    return [(t.name, mc.DataType.Name(t.data_type), list(t.dims)) for t in tensors]


def params(cfg: mc.ModelConfig) -> dict[str, str]:
    return {k: v.string_value for k, v in cfg.parameters.items()}


def test_repository_holds_exactly_the_shared_model_names():
    dirs = sorted(p.name for p in REPO.iterdir() if p.is_dir() and not p.name.startswith("."))
    shared = sorted(getattr(names, n) for n in dir(names) if n.startswith("MODEL_"))
    assert dirs == shared == ALL_MODELS
    assert set(names.CPU_MODELS) == {*PYTHON_MODELS, names.MODEL_ENSEMBLE}
    assert set(names.OFFICIAL_BACKEND_MODELS) == set(ALL_MODELS) - set(names.CPU_MODELS)


@pytest.mark.parametrize("model", ALL_MODELS)
def test_every_config_parses_and_is_named_after_its_folder(model):
    assert config(model).name == model


@pytest.mark.parametrize("model", NEUMF_MODELS)
def test_neumf_models_take_model_ids_and_return_a_score(model):
    cfg = config(model)
    assert io(cfg.input) == [
        (names.INPUT_USER, "TYPE_INT64", [1]),
        (names.INPUT_ITEM, "TYPE_INT64", [1]),
    ]
    assert io(cfg.output) == [(names.OUTPUT_SCORE, "TYPE_FP32", [1])]
    assert cfg.max_batch_size == config(names.MODEL_NEUMF).max_batch_size > 1
    assert cfg.HasField("dynamic_batching")


@pytest.mark.parametrize("model", CATALOGUE_MODELS)
def test_catalogue_models_score_every_item_for_a_batch_of_users(model):
    cfg = config(model)
    assert cfg.max_batch_size >= config(names.MODEL_RECOMMEND).max_batch_size  # one BLS call
    assert io(cfg.input)[0] == (names.INPUT_USER, "TYPE_INT64", [1])
    assert io(cfg.output) == [
        (names.OUTPUT_ITEM_SCORES, "TYPE_FP32", [-1]),
        (names.OUTPUT_EXPORT_ID, "TYPE_INT64", [1]),
    ]
    assert cfg.version_policy.latest.num_versions == 1
    if model == names.MODEL_CATALOGUE:  # the python scorer also re-ranks given items
        assert io(cfg.input)[1:] == [(names.INPUT_ITEM_IDS, "TYPE_INT64", [-1])]
        assert cfg.input[1].optional and params(cfg)["precision"] in ("auto", "fp32", "bf16")
    else:
        assert len(cfg.input) == 1


def test_official_backend_configs_name_the_exported_artifacts():
    libtorch, onnx = config(names.MODEL_NEUMF_LIBTORCH), config(names.MODEL_NEUMF_ONNX)
    catalogue = config(names.MODEL_CATALOGUE_LIBTORCH)
    assert (libtorch.platform, libtorch.default_model_filename) == (
        "pytorch_libtorch",
        names.ARTIFACT_TORCHSCRIPT,
    )
    assert (onnx.platform, onnx.default_model_filename) == ("onnxruntime_onnx", names.ARTIFACT_ONNX)
    assert (catalogue.platform, catalogue.default_model_filename) == (
        "pytorch_libtorch",
        names.ARTIFACT_CATALOGUE,
    )
    for model in names.OFFICIAL_BACKEND_MODELS:
        assert config(model).default_model_filename in MODEL_ARTIFACTS[model]


@pytest.mark.parametrize("model", PYTHON_MODELS)
def test_python_models_run_on_cpu_and_name_shared_artifacts(model):
    cfg = config(model)
    assert cfg.backend == "python" and (REPO / model / "1" / "model.py").is_file()
    assert [g.kind for g in cfg.instance_group] == [mc.ModelInstanceGroup.KIND_CPU]
    p = params(cfg)
    assert p["manifest"] == names.MANIFEST_FILE
    shared = {
        "torchscript_artifact": names.ARTIFACT_TORCHSCRIPT,
        "onnx_artifact": names.ARTIFACT_ONNX,
        "vocab_artifact": names.ARTIFACT_VOCAB,
        "seen_artifact": names.ARTIFACT_SEEN,
        "catalogue_artifact": names.ARTIFACT_CATALOGUE,
        "popularity_artifact": names.ARTIFACT_POPULARITY,
        "gmf_artifact": names.ARTIFACT_GMF,
        "foldin_artifact": names.ARTIFACT_FOLDIN,
    }
    named = {k: v for k, v in p.items() if k.endswith("_artifact")}
    assert named and named == {k: shared[k] for k in named}
    assert set(named.values()) <= set(MODEL_ARTIFACTS[model])  # export writes what it loads


def test_neumf_runtime_parameter():
    assert params(config(names.MODEL_NEUMF))["runtime"] in ("torchscript", "onnx")


def test_workflow_maps_raw_ids_to_model_ids():
    cfg = config(names.MODEL_WORKFLOW)
    assert io(cfg.input) == [
        (names.INPUT_RAW_USER, "TYPE_INT64", [1]),
        (names.INPUT_RAW_ITEM, "TYPE_INT64", [1]),
    ]
    assert io(cfg.output) == [
        (names.INPUT_USER, "TYPE_INT64", [1]),
        (names.INPUT_ITEM, "TYPE_INT64", [1]),
        (names.OUTPUT_KNOWN, "TYPE_BOOL", [1]),
    ]


def test_ensemble_chains_workflow_into_neumf():
    cfg = config(names.MODEL_ENSEMBLE)
    assert cfg.platform == "ensemble"
    assert io(cfg.input) == io(config(names.MODEL_WORKFLOW).input)
    assert [t.name for t in cfg.output] == [names.OUTPUT_SCORE, names.OUTPUT_KNOWN]
    steps = cfg.ensemble_scheduling.step
    assert [s.model_name for s in steps] == [names.MODEL_WORKFLOW, names.MODEL_NEUMF]
    produced = {t.name for t in cfg.input}
    for step in steps:
        step_cfg = config(step.model_name)
        assert set(step.input_map) == {t.name for t in step_cfg.input}
        assert set(step.input_map.values()) <= produced  # every step input exists by then
        assert set(step.output_map) <= {t.name for t in step_cfg.output}
        produced |= set(step.output_map.values())
        assert cfg.max_batch_size <= step_cfg.max_batch_size
    assert {t.name for t in cfg.output} <= produced


def test_recommend_io_and_scorer():
    cfg = config(names.MODEL_RECOMMEND)
    assert cfg.max_batch_size > 1 and cfg.HasField("dynamic_batching")
    assert cfg.version_policy.latest.num_versions == 1
    assert io(cfg.input) == [
        (names.INPUT_RAW_USER, "TYPE_INT64", [1]),
        (names.INPUT_K, "TYPE_INT64", [1]),
        (names.INPUT_EXCLUDE, "TYPE_INT64", [-1]),
        (names.INPUT_INCLUDE_RATED, "TYPE_BOOL", [1]),
        (names.INPUT_HISTORY, "TYPE_INT64", [-1]),
    ]
    assert [t.optional for t in cfg.input] == [False, False, True, True, True]
    assert io(cfg.output) == [
        (names.OUTPUT_RAW_ITEMS, "TYPE_INT64", [-1]),
        (names.OUTPUT_SCORES, "TYPE_FP32", [-1]),
        (names.OUTPUT_KNOWN, "TYPE_BOOL", [1]),
        (names.OUTPUT_EXPORT_ID, "TYPE_INT64", [1]),
    ]
    p = params(cfg)
    scorer = config(p["scorer_model"])
    assert p["scorer_model"] == names.MODEL_CATALOGUE
    assert [t.name for t in scorer.input] == [p["scorer_user_input"], p["scorer_items_input"]]
    assert [p["scorer_user_input"], p["scorer_items_input"]] == [
        names.INPUT_USER,
        names.INPUT_ITEM_IDS,
    ]
    assert [t.name for t in scorer.output] == [p["scorer_output"], p["scorer_export_id_output"]]
    assert p["scorer_output"] == names.OUTPUT_ITEM_SCORES
    assert p["scorer_export_id_output"] == names.OUTPUT_EXPORT_ID
    assert p["candidates"] == "auto" and int(p["ann_candidates"]) > 0
    assert 0 < float(p["ann_min_recall"]) <= 1


def _gpu_normalized(model: str, gpu: mc.ModelConfig) -> mc.ModelConfig:
    """The GPU variant with its intended differences undone (must then equal config.pbtxt)."""
    if model == names.MODEL_NEUMF:  # the python neumf on the GPU
        assert [g.kind for g in gpu.instance_group] == [mc.ModelInstanceGroup.KIND_GPU]
        gpu.instance_group[0].kind = mc.ModelInstanceGroup.KIND_CPU
    elif model == names.MODEL_ENSEMBLE:  # the network step on the official PyTorch backend
        step = gpu.ensemble_scheduling.step[1]
        assert step.model_name == names.MODEL_NEUMF_LIBTORCH
        step.model_name = names.MODEL_NEUMF
    elif model == names.MODEL_RECOMMEND:  # scored by the official PyTorch backend
        assert gpu.parameters["scorer_model"].string_value == names.MODEL_CATALOGUE_LIBTORCH
        gpu.parameters["scorer_model"].string_value = names.MODEL_CATALOGUE
        # the libtorch scorer has no item_ids input: the GPU variant scores the whole catalogue
        assert gpu.parameters["candidates"].string_value == "exact"
        gpu.parameters["candidates"].string_value = "auto"
        # no torch in the image's python stub: no cold start (no history input, no foldin_*)
        cpu = config(model)
        assert [i.name for i in gpu.input] == [i.name for i in cpu.input][:-1]
        assert cpu.input[-1].name == names.INPUT_HISTORY
        gpu.input.append(cpu.input[-1])
        for key, value in cpu.parameters.items():
            if key.startswith("foldin_"):
                assert key not in gpu.parameters
                gpu.parameters[key].CopyFrom(value)
    return gpu


GPU_VARIANTS = sorted(REPO.glob("*/configs/*.pbtxt"))


def test_gpu_variants_exist_for_the_models_the_gpu_container_changes():
    assert sorted(p.parent.parent.name for p in GPU_VARIANTS) == sorted(
        [names.MODEL_NEUMF, names.MODEL_ENSEMBLE, names.MODEL_RECOMMEND]
    )
    assert {p.name for p in GPU_VARIANTS} == {"gpu.pbtxt"}


@pytest.mark.parametrize("path", GPU_VARIANTS, ids=lambda p: p.parent.parent.name)
def test_gpu_variant_differs_only_where_intended(path):
    model = path.parent.parent.name
    assert _gpu_normalized(model, parse(path)) == config(model)


@pytest.mark.parametrize("path", [f"{m}/1/model.py" for m in PYTHON_MODELS] + ["artifact_check.py"])
def test_python_models_import_only_what_the_architecture_allows(path):
    tree = ast.parse((REPO / path).read_text(encoding="utf-8"))
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            imported.add((node.module or "").split(".")[0])
    assert imported <= ALLOWED_IMPORTS


def test_composing_models_match_the_configs():
    """ncf.serving.server.COMPOSING_MODELS (what must be loaded beside a model) is what the CPU
    configs call: ensemble steps and BLS scorers."""
    from ncf.serving.server import COMPOSING_MODELS

    calls = {}
    for model in ALL_MODELS:
        cfg = config(model)
        needs = [step.model_name for step in cfg.ensemble_scheduling.step]
        needs += [v for k, v in params(cfg).items() if k == "scorer_model"]
        if needs:
            calls[model] = tuple(needs)
    assert calls == COMPOSING_MODELS
