"""Starting and stopping the server: `ncf serve` on signals, loopback binding, artifact checks."""

from __future__ import annotations

import ipaddress
import json
import shutil
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import psutil
import pytest

from ncf.core import names
from ncf.serving.server import TritonServer

pytestmark = pytest.mark.triton


def _tree(pid: int) -> list[psutil.Process]:
    proc = psutil.Process(pid)
    return [proc, *proc.children(recursive=True)]


def _gone(procs: list[psutil.Process]) -> bool:
    _, alive = psutil.wait_procs(procs, timeout=10)
    return not alive


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_ncf_serve_stops_cleanly_on_signal(repo, sig):
    cmd = [sys.executable, "-m", "ncf.cli", "serve", "--repo", str(repo)]
    cmd += ["--http-port", "0", "--grpc-port", "0", "--metrics-port", "0"]
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as proc:
        try:
            info = json.loads(proc.stdout.readline())  # printed once every model is ready
            assert info["ready"] and sorted(info["models"]) == sorted(names.CPU_MODELS)
            assert info["http"].startswith("127.0.0.1:") and info["grpc"].startswith("127.0.0.1:")
            with urllib.request.urlopen(f"http://{info['http']}/v2/health/ready", timeout=5) as r:
                assert r.status == 200
            procs = _tree(proc.pid)
            stubs = [p for p in procs if "triton_python_backend_stub" in " ".join(p.cmdline())]
            assert len(stubs) == 4  # neumf, neumf_catalogue, workflow, recommend (not the ensemble)
            proc.send_signal(sig)
            assert proc.wait(timeout=60) == 0, proc.stderr.read()
            assert _gone(procs)  # server and python stubs: no orphans
        finally:
            if proc.poll() is None:
                proc.kill()


def test_server_listens_on_loopback_only(server):
    listening = [
        c.laddr
        for c in psutil.Process(server.pid).net_connections("tcp")
        if c.status == psutil.CONN_LISTEN
    ]
    addresses = {ipaddress.ip_address(a.ip) for a in listening}
    # gRPC listens on the IPv4-mapped IPv6 form of 127.0.0.1 (::ffff:127.0.0.1)
    v4 = {getattr(a, "ipv4_mapped", None) or a for a in addresses}
    assert len(listening) == 3 and v4 == {ipaddress.ip_address("127.0.0.1")}


def test_serve_rejects_models_this_server_cannot_run(repo):
    from ncf.cli import main

    assert main(["serve", "--repo", str(repo), "--models", names.MODEL_NEUMF_LIBTORCH]) == 2


def _copy(repo: Path, dst: Path) -> Path:
    shutil.copytree(repo, dst, copy_function=shutil.copy2)
    return dst


def test_python_models_refuse_artifacts_that_do_not_match_the_manifest(repo, tmp_path):
    tampered = _copy(repo, tmp_path / "repo")
    targets = {
        names.MODEL_NEUMF: names.ARTIFACT_TORCHSCRIPT,
        names.MODEL_WORKFLOW: names.ARTIFACT_VOCAB,
        names.MODEL_RECOMMEND: names.ARTIFACT_SEEN,
        names.MODEL_CATALOGUE: names.ARTIFACT_CATALOGUE,
    }
    for model, artifact in targets.items():
        path = tampered / model / "1" / artifact
        data = bytearray(path.read_bytes())
        data[len(data) // 2] ^= 0xFF  # one flipped byte
        path.write_bytes(bytes(data))
    log = tmp_path / "server.log"
    with pytest.raises(RuntimeError, match="before it was ready"):
        TritonServer(tampered, models=list(targets), log_path=log).start(timeout=60)
    text = log.read_text()
    for model, artifact in targets.items():
        assert f"refusing to load {tampered / model / '1' / artifact}: sha256" in text


def test_python_model_without_manifest_fails_with_a_clear_error(repo, tmp_path):
    broken = _copy(repo, tmp_path / "repo")
    (broken / names.MODEL_WORKFLOW / "1" / names.MANIFEST_FILE).unlink()
    with pytest.raises(RuntimeError, match=f"{names.MANIFEST_FILE} not found: run `ncf export`"):
        TritonServer(broken, models=[names.MODEL_WORKFLOW], log_path=tmp_path / "log").start(
            timeout=60
        )


def test_server_without_exported_models_is_refused(tmp_path):
    with pytest.raises(ValueError, match="no exported model"):
        TritonServer(tmp_path)


def test_metrics_endpoint_counts_inferences(server):
    with urllib.request.urlopen(f"http://{server.metrics_url}/metrics", timeout=5) as r:
        text = r.read().decode()
    assert f'nv_inference_request_success{{model="{names.MODEL_NEUMF}"' in text


@pytest.mark.parametrize(
    ("flags", "match"),
    [
        (["--http-port", "9000", "--grpc-port", "9000"], "must differ"),
        (["--http-port", "70000"], "65535"),
    ],
)
def test_serve_rejects_bad_ports(repo, capsys, flags, match):
    from ncf.cli import main

    assert main(["serve", "--repo", str(repo), *flags]) == 2
    assert match in capsys.readouterr().err


@pytest.mark.parametrize(("version", "ok"), [("1.26.4", True), ("2.0.0", False), ("2.5.2", False)])
def test_numpy_2_is_refused_before_starting(version, ok):
    from ncf.serving.triton_env import check_stub_numpy

    if ok:
        check_stub_numpy(version)
    else:
        with pytest.raises(RuntimeError, match=f"numpy {version} .* needs numpy<2"):
            check_stub_numpy(version)


def test_models_that_call_others_need_them_loaded(repo):
    with pytest.raises(ValueError, match=r"recommend needs \['neumf_catalogue'\]"):
        TritonServer(repo, models=[names.MODEL_RECOMMEND])
    with pytest.raises(ValueError, match=r"ncf needs \['workflow'\]"):
        TritonServer(repo, models=[names.MODEL_NEUMF, names.MODEL_ENSEMBLE])
