"""triton_repo/ works on the Triton release docker-compose.yml runs (docs/TRITON_IMAGE.md).

Every config (``config.pbtxt`` and the ``configs/*.pbtxt`` variants the GPU container selects)
parses as that release's ``ModelConfig`` and names a backend its image ships; the python models
call only python-backend API that release has.
"""

from __future__ import annotations

import ast
import importlib.metadata
import sys
from pathlib import Path

import pytest
import yaml
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as newer_mc

from tests.triton_repo.triton_image import (
    ROOT,
    backends,
    pb_utils_api,
    release,
    release_model_config,
)

REPO = ROOT / "triton_repo"
CONFIGS = sorted(REPO.rglob("*.pbtxt"))
PYTHON_SOURCES = sorted([*REPO.glob("*/1/model.py"), REPO / "artifact_check.py"])
PB_UTILS_MODULE = "triton_python_backend_utils"
# nvidia-pytriton 0.7.0 bundles tritonserver 2.51.0 with its python backend (docs/TRITON_IMAGE.md)
PYTRITON_OF_RELEASE = {"2.51.0": "0.7.0"}


def _id(path: Path) -> str:
    return str(path.relative_to(REPO))


@pytest.fixture(scope="module")
def model_config():
    return release_model_config()


def test_the_document_names_the_images_compose_runs():
    services = yaml.safe_load((ROOT / "docker-compose.yml").read_text(encoding="utf-8"))["services"]
    rel = release()
    assert services["triton"]["image"] == rel["image"]
    assert services["bench"]["image"] == rel["sdk-image"]
    assert rel["sdk-image"] == rel["image"] + "-sdk"


def test_the_release_proto_is_that_releases(model_config):
    desc = model_config.DESCRIPTOR
    assert (desc.full_name, desc.file.name) == ("inference.ModelConfig", "model_config.proto")
    assert desc.file.pool is not newer_mc.DESCRIPTOR.pool  # the venv's 2.73 proto stays apart


def test_configs_sit_where_triton_reads_them():
    """<model>/config.pbtxt, or <model>/configs/<name>.pbtxt for --model-config-name=<name>."""
    for path in CONFIGS:
        rel = path.relative_to(REPO).parts
        assert rel[1:] == ("config.pbtxt",) or (len(rel) == 3 and rel[1] == "configs"), rel
    assert any(p.parent.name == "configs" for p in CONFIGS) and len(CONFIGS) > 8


@pytest.mark.parametrize("path", CONFIGS, ids=_id)
def test_config_parses_with_the_release_proto(path, model_config):
    cfg = text_format.Parse(path.read_text(encoding="utf-8"), model_config())
    folder = path.parent if path.name == "config.pbtxt" else path.parent.parent
    assert cfg.name == folder.name


def test_unknown_and_newer_fields_fail_to_parse(model_config):
    # A field newer tritonclients (2.73 in the CPU venv) know but 2.51.0 does not: the check is on
    # the release. (The NGC lane's own tritonclient is 2.51.0, which rejects it too.)
    newer = 'name: "m" platform: "ensemble" ensemble_scheduling { max_inflight_requests: 4 }'
    if "max_inflight_requests" in newer_mc.ModelEnsembling.DESCRIPTOR.fields_by_name:
        text_format.Parse(newer, newer_mc.ModelConfig())  # a real field, just a newer one
    with pytest.raises(text_format.ParseError, match="max_inflight_requests"):
        text_format.Parse(newer, model_config())
    with pytest.raises(text_format.ParseError, match="no_such_field"):
        text_format.Parse('name: "m" no_such_field: 1', model_config())


@pytest.mark.parametrize("path", CONFIGS, ids=_id)
def test_config_names_a_backend_the_image_ships(path, model_config):
    cfg = text_format.Parse(path.read_text(encoding="utf-8"), model_config())
    shipped = backends()
    named = [n for n in (cfg.backend, cfg.platform) if n]
    assert named, f"{_id(path)}: names neither backend nor platform"
    for name in named:
        assert name in shipped, f"{_id(path)}: {name!r} is not in the image ({sorted(shipped)})"
    if cfg.backend and cfg.platform:
        assert shipped[cfg.platform] == cfg.backend, f"{_id(path)}: platform and backend disagree"


def pb_utils_misuse(source: str, api: dict[str, set[str]]) -> list[str]:
    """Uses of ``triton_python_backend_utils`` in ``source`` outside ``api`` (name -> keywords)."""
    tree = ast.parse(source)
    aliases, problems = set(), []  # problems: (line, text)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            aliases |= {a.asname or a.name for a in node.names if a.name == PB_UTILS_MODULE}
        elif isinstance(node, ast.ImportFrom) and node.module == PB_UTILS_MODULE:
            problems += [(node.lineno, f"from-import of {a.name}") for a in node.names]
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and getattr(node.value, "id", None) in aliases:
            if node.attr not in api:
                problems.append((node.lineno, f"pb_utils.{node.attr}"))
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute):
            inner = node.value  # pb_utils.Class.attribute: the dotted name must be listed
            dotted = f"{inner.attr}.{node.attr}"
            if getattr(inner.value, "id", None) in aliases and dotted not in api:
                problems.append((node.lineno, f"pb_utils.{dotted}"))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            func = node.func
            if getattr(func.value, "id", None) in aliases and func.attr in api:
                extra = {k.arg for k in node.keywords} - api[func.attr]
                problems += [(node.lineno, f"{func.attr}({k}=...)") for k in extra]
    return [f"line {line}: {text}" for line, text in sorted(problems)]


@pytest.mark.parametrize("path", PYTHON_SOURCES, ids=_id)
def test_python_models_use_only_the_release_python_backend_api(path):
    source = path.read_text(encoding="utf-8")
    assert PB_UTILS_MODULE in source
    assert pb_utils_misuse(source, pb_utils_api()) == [], f"{_id(path)}: see docs/TRITON_IMAGE.md"


def test_the_api_check_catches_names_and_keywords_outside_the_list():
    source = (
        "import triton_python_backend_utils as pbu\n"
        "from triton_python_backend_utils import Tensor\n"
        "pbu.InferenceRequest(model_name='m', inputs=[], newer_option=1)\n"
        "pbu.InferenceResponse(output_tensors=[])\n"
        "pbu.newer_helper()\n"
        "pbu.TritonError('bad', pbu.TritonError.INVALID_ARG)\n"
        "pbu.TritonError('bad', pbu.TritonError.NEWER_CODE)\n"
    )
    assert pb_utils_misuse(source, pb_utils_api()) == [
        "line 2: from-import of Tensor",
        "line 3: InferenceRequest(newer_option=...)",
        "line 5: pb_utils.newer_helper",
        "line 7: pb_utils.TritonError.NEWER_CODE",
    ]


def _bundled_python_backend() -> tuple[set[str], bytes]:
    """Top-level names of the bundled ``triton_python_backend_utils.py``, and the stub binary."""
    site = Path(importlib.metadata.distribution("nvidia-pytriton").locate_file(""))
    bundle = site / "pytriton" / "tritonserver"
    tree = ast.parse((bundle / "backends" / "python" / f"{PB_UTILS_MODULE}.py").read_text())
    names = {n.name for n in tree.body if isinstance(n, ast.FunctionDef | ast.ClassDef)}
    names |= {
        t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets if hasattr(t, "id")
    }
    ver = f"{sys.version_info.major}.{sys.version_info.minor}"
    return names, (
        bundle / "python_backend_stubs" / ver / "triton_python_backend_stub"
    ).read_bytes()


def test_the_documented_api_exists_in_the_release_python_backend():
    """Every name and keyword in the list is in the 2.51.0 python backend nvidia-pytriton ships."""
    server = release()["server"]
    assert importlib.metadata.version("nvidia-pytriton") == PYTRITON_OF_RELEASE[server]
    py_names, stub = _bundled_python_backend()
    assert {"get_input_tensor_by_name", "triton_string_to_numpy"} <= py_names  # parsed right
    # pybind11 keeps the names it registers (classes, attributes, keywords) as C strings
    for name, keywords in pb_utils_api().items():
        cls, _, attr = name.partition(".")  # Class.attribute: pybind11 registers both names
        for part in filter(None, (cls, attr)):
            assert part in py_names or part.encode() + b"\0" in stub, f"{name} not in {server}"
        for kw in keywords:
            assert kw.encode() + b"\0" in stub, f"{name}({kw}=...) not in Triton {server}"
    assert b"no_such_pb_utils_name\0" not in stub
