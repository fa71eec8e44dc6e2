"""docker-compose.yml only runs commands that exist, with flags they accept.

Each command is parsed by its program's own parser where the project has it (``ncf``, torchrun's
``torch.distributed.run``, ``ncf.bench.pa_input``); ``tritonserver`` and ``perf_analyzer`` options are
checked against the lists for the image's release in docs/TRITON_IMAGE.md.
"""

from __future__ import annotations

import argparse
import ast
import re
import shlex
import subprocess
from pathlib import Path

import pytest
import yaml

from ncf.cli import parse_command
from tests.triton_repo.triton_image import bundled_server, doc_block

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def _expand(text: str) -> str:
    """Replace ${VAR:-default} by its default, as compose does with the variable unset."""
    return re.sub(r"\$\{\w+:-([^}]*)\}", r"\1", text)


def _words(value: str | list[str] | None) -> list[str]:
    """A compose ``command``/``entrypoint``: a shell-like string or a list, variables expanded."""
    if value is None:
        return []
    return shlex.split(_expand(value)) if isinstance(value, str) else [_expand(v) for v in value]


def _commands(service: dict) -> list[list[str]]:
    # compose runs the entrypoint with the command as its arguments
    argv = _words(service.get("entrypoint")) + _words(service.get("command"))
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
    parse_command(argv)  # raises (one line) or exits (argparse) on a flag the stage does not take


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
            from torch.distributed.run import get_args_parser

            args = get_args_parser().parse_args(argv[1:])  # exits (SystemExit) on a bad flag
            assert args.module and args.training_script == "ncf.cli", argv
            _check_ncf(args.training_script_args)
        elif prog == "python":
            assert argv[1] == "-m" and argv[2] == "ncf.bench.pa_input", argv
            from ncf.bench import pa_input
            from ncf.core.config import resolve

            resolve(pa_input.CONFIG, argv[3:], "bench pa_input")
        elif prog == "tritonserver":
            _check_tritonserver(argv[1:])
        elif prog == "perf_analyzer":
            _check_perf_analyzer(argv[1:])
        else:
            pytest.fail(f"service {service} runs unknown program {prog!r}")


def tritonserver_parser() -> argparse.ArgumentParser:
    """Parser of the tritonserver options docs/TRITON_IMAGE.md lists (each takes a value)."""
    parser = argparse.ArgumentParser(prog="tritonserver", add_help=False, allow_abbrev=False)
    for (flag,) in doc_block("tritonserver-flags"):
        parser.add_argument(flag, action="append" if flag == "--load-model" else "store")
    return parser


def perf_analyzer_parser() -> argparse.ArgumentParser:
    """Parser of the perf_analyzer options docs/TRITON_IMAGE.md lists (``VALUE``: takes one)."""
    parser = argparse.ArgumentParser(prog="perf_analyzer", add_help=False, allow_abbrev=False)
    for flag, *value in doc_block("perf-analyzer-flags"):
        parser.add_argument(flag, action="store" if value else "store_true")
    return parser


def _check_tritonserver(argv: list[str]) -> None:
    args = tritonserver_parser().parse_args(argv)
    assert args.model_repository == "/models"
    assert args.model_control_mode == "explicit" and args.load_model
    for model in args.load_model:
        assert (ROOT / "triton_repo" / model / "config.pbtxt").is_file(), model


def _check_perf_analyzer(argv: list[str]) -> None:
    args = perf_analyzer_parser().parse_args(argv)
    (server,) = _commands(COMPOSE["services"]["triton"])
    loaded = tritonserver_parser().parse_args(server[1:]).load_model
    assert args.m in loaded, f"perf_analyzer -m {args.m}: not loaded by the triton service"
    # -u names the triton service on the compose network, at the port of the -i protocol
    host, port = args.u.split(":")
    assert host == "triton" and host in COMPOSE["services"]
    assert (args.i, port) in {("grpc", "8001"), ("http", "8000")}, (args.i, port)
    assert any(p.endswith(f":{port}") for p in COMPOSE["services"]["triton"]["ports"])
    # its --input-data file is the one the export service writes (real ids)
    assert args.input_data in COMPOSE["services"]["export"]["command"]


@pytest.mark.parametrize(
    ("parser", "argv"),
    [
        (tritonserver_parser, ["--model-repository=/m", "--no-such-option=1"]),
        (tritonserver_parser, ["--model-repo=/m"]),  # no abbreviations: tritonserver has none
        (perf_analyzer_parser, ["-m", "x", "--no-such-option"]),
    ],
)
def test_unknown_options_are_rejected(parser, argv):
    with pytest.raises(SystemExit):  # argparse reports unrecognized arguments and exits
        parser().parse_args(argv)


def test_documented_tritonserver_options_exist_in_the_release():
    """The list in docs/TRITON_IMAGE.md against ``tritonserver --help`` of the bundled 2.51.0."""
    binary, env = bundled_server()
    out = subprocess.run([binary, "--help"], env=env, capture_output=True, text=True, timeout=60)
    # option lines are indented by two spaces; their descriptions by a tab
    options = set(re.findall(r"^  (--[a-z0-9-]+)", out.stdout + out.stderr, re.M))
    assert {"--model-repository", "--load-model", "--grpc-port"} <= options, out.stderr[-2000:]
    documented = {flag for (flag,) in doc_block("tritonserver-flags")}
    assert documented - options == set()


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
        # the python models there run without torch (the NGC tritonserver image has none):
        # none imports it at the top; recommend imports it only for the cold start, whose
        # foldin_artifact parameter the GPU variant does not have
        if cfg.backend == "python":
            source = (ROOT / "triton_repo" / model / "1" / "model.py").read_text(encoding="utf-8")
            top = [n for n in ast.parse(source).body if isinstance(n, (ast.Import, ast.ImportFrom))]
            names = {a.name for n in top for a in n.names} | {
                n.module for n in top if isinstance(n, ast.ImportFrom)
            }
            assert not any(str(m).split(".")[0] == "torch" for m in names), model
            assert "foldin_artifact" not in cfg.parameters, model


def test_triton_is_restarted_and_health_checked():
    triton = COMPOSE["services"]["triton"]
    assert triton["restart"] == "on-failure:5"
    probe = triton["healthcheck"]["test"]
    assert probe[:2] == ["CMD", "python3"] and "/v2/health/ready" in probe[-1]
    compile(probe[-1], "healthcheck", "exec")  # the probe is valid Python
    assert COMPOSE["services"]["bench"]["depends_on"]["triton"]["condition"] == "service_healthy"
