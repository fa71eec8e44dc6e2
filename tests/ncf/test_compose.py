"""docker-compose.yml only runs commands that exist in this project, with flags they accept."""

from __future__ import annotations

import argparse
import re
import shlex
from pathlib import Path

import pytest
import yaml

from ncf.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
TORCHRUN_FLAGS = {
    "--standalone",
    "--nnodes",
    "--nproc_per_node",
    "--nproc-per-node",
    "--rdzv_backend",
    "--rdzv_endpoint",
    "--node_rank",
    "--master_addr",
    "--master_port",
}


def _expand(text: str) -> str:
    """Replace ${VAR:-default} by its default, as compose does with the variable unset."""
    return re.sub(r"\$\{\w+:-([^}]*)\}", r"\1", text)


def _commands(service: dict) -> list[list[str]]:
    cmd = _expand(service["command"])
    argv = shlex.split(cmd)
    if argv[:2] == ["bash", "-c"]:
        argv = shlex.split(argv[2])
    parts, cur = [], []
    for tok in argv:
        if tok == "&&":
            parts.append(cur)
            cur = []
        else:
            cur.append(tok)
    return [*parts, cur]


def _check_ncf(argv: list[str]) -> None:
    parser = build_parser([argv[0]])
    args, unknown = parser.parse_known_args(argv)
    assert not unknown, f"ncf {argv[0]} does not accept {unknown}"
    assert args.command == argv[0]


SERVICES = sorted(COMPOSE["services"])


def test_expected_services():
    assert {"etl", "train", "export", "triton", "bench"} <= set(SERVICES)


@pytest.mark.parametrize("service", SERVICES)
def test_service_commands_exist(service):
    for argv in _commands(COMPOSE["services"][service]):
        prog = argv[0]
        if prog == "pip":
            assert argv[1] == "install"
        elif prog == "ncf":
            _check_ncf(argv[1:])
        elif prog == "torchrun":
            i = argv.index("-m")
            assert argv[i + 1] == "ncf.cli"
            for flag in argv[1:i]:
                assert flag.split("=")[0] in TORCHRUN_FLAGS, flag
            _check_ncf(argv[i + 2 :])
        elif prog == "python":
            assert argv[1] == "-m" and argv[2] == "bench.pa_input", argv
            from bench import pa_input

            parser = argparse.ArgumentParser()
            pa_input.add_arguments(parser)
            parser.parse_args(argv[3:])
        elif prog == "tritonserver":
            opts = dict(a.split("=", 1) for a in argv[1:] if "=" in a)
            assert opts["--model-repository"] == "/models"
            for a in argv[1:]:
                if a.startswith("--load-model="):
                    model = a.split("=", 1)[1]
                    assert (ROOT / "triton_repo" / model / "config.pbtxt").is_file(), model
        elif prog == "perf_analyzer":
            model = argv[argv.index("-m") + 1]
            assert (ROOT / "triton_repo" / model / "config.pbtxt").is_file(), model
            # its --input-data file is the one the export service writes (real ids)
            export_cmd = COMPOSE["services"]["export"]["command"]
            assert argv[argv.index("--input-data") + 1] in export_cmd
        else:
            pytest.fail(f"service {service} runs unknown program {prog!r}")


def test_triton_serves_the_checkout_repository():
    vols = COMPOSE["services"]["triton"]["volumes"]
    assert any(v.startswith("./triton_repo:/models") for v in vols)
    ports = COMPOSE["services"]["triton"]["ports"]
    assert all(p.startswith("127.0.0.1:") for p in ports), "publish on loopback only by default"


def _gpu_config(model: str):
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2 as mc

    folder = ROOT / "triton_repo" / model
    path = folder / "configs" / "gpu.pbtxt"  # --model-config-name=gpu, else config.pbtxt
    path = path if path.is_file() else folder / "config.pbtxt"
    return text_format.Parse(path.read_text(encoding="utf-8"), mc.ModelConfig())


def test_the_gpu_server_loads_every_model_its_models_call():
    """Ensemble steps and recommend's BLS scorer (GPU variants) are loaded beside them."""
    (argv,) = _commands(COMPOSE["services"]["triton"])
    loaded = {a.split("=", 1)[1] for a in argv if a.startswith("--load-model=")}
    for model in sorted(loaded):
        cfg = _gpu_config(model)
        needs = {step.model_name for step in cfg.ensemble_scheduling.step}
        if "scorer_model" in cfg.parameters:
            needs.add(cfg.parameters["scorer_model"].string_value)
        assert needs <= loaded, f"{model} calls {sorted(needs - loaded)}, not loaded in compose"
        # the python models there run without torch (the NGC tritonserver image has none)
        if cfg.backend == "python":
            source = (ROOT / "triton_repo" / model / "1" / "model.py").read_text(encoding="utf-8")
            assert "import torch" not in source, model
