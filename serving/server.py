"""Start and stop a real ``tritonserver`` on the model repository (the binary bundled in PyTriton).

The server runs in its own process group on loopback ports (environment and backend folder from
``ncf.serving.triton_env``); ``start()`` waits until every requested model is ready and ``stop()`` ends
the whole group (server + python stubs): SIGTERM, wait, then SIGKILL.

Used by ``ncf serve``, the tests and the Triton benchmark::

    with TritonServer("triton_repo") as server:
        client = tritonclient.http.InferenceServerClient(server.http_url)
"""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path

from ncf.core import names
from ncf.serving.repository import latest_version
from ncf.serving.triton_env import (
    LOOPBACK,
    backend_dir,
    check_stub_numpy,
    free_ports,
    pytriton_dir,
    server_env,
)

# Models that call others (ensemble steps, the BLS scorer of recommend) in config.pbtxt; a test
# checks this against the configs.
COMPOSING_MODELS = {
    names.MODEL_ENSEMBLE: (names.MODEL_WORKFLOW, names.MODEL_NEUMF),
    names.MODEL_RECOMMEND: (names.MODEL_CATALOGUE,),
}


def exported_models(repo: str | os.PathLike) -> list[str]:
    """The CPU-servable models of ``repo`` that ``ncf export`` has filled (manifest present).

    A model without a version folder of its own (the ensemble) counts as exported when every model
    it composes (``COMPOSING_MODELS``) is.
    """
    repo = Path(repo)
    ready = [
        m
        for m in names.CPU_MODELS
        if m != names.MODEL_ENSEMBLE  # an ensemble is ready exactly when its steps are
        and (repo / m / "config.pbtxt").is_file()
        and latest_version(repo / m) is not None  # a version folder with a manifest
    ]
    for model, needs in COMPOSING_MODELS.items():
        composed = model in names.CPU_MODELS and (repo / model / "config.pbtxt").is_file()
        if composed and model not in ready and set(needs) <= set(ready):
            ready.append(model)
    return ready


def server_rss_bytes(pid: int) -> int:
    """Resident memory of process ``pid`` plus all its descendants (the python-backend stubs)."""
    import psutil  # only here: the rest of this module runs where psutil is not installed

    proc = psutil.Process(pid)
    total = 0
    for p in [proc, *proc.children(recursive=True)]:
        try:
            total += p.memory_info().rss
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue  # a stub that just exited
    return total


def _set_pdeathsig() -> None:
    """Runs in the child before exec: SIGTERM the server if the process that started it dies."""
    import ctypes

    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # 1 = PR_SET_PDEATHSIG
    except OSError:
        pass  # not Linux/glibc: stop() and atexit still clean up


class TritonServer:
    """A real tritonserver process serving ``repo`` (python-backend models) on loopback ports.

    Parameters
    ----------
    repo
        Model repository (``triton_repo/``) filled by ``ncf export``.
    models
        Models to load (explicit model control). Default: ``exported_models(repo)``.
    host
        Address to bind HTTP, gRPC and metrics to; anything but 127.0.0.1 exposes the server.
    http_port, grpc_port, metrics_port
        Ports; 0 picks a free one.
    log_path
        Server log file; default a temporary file removed by a clean ``stop()``.
    model_config_name
        Triton's ``--model-config-name`` (e.g. ``gpu`` selects ``<model>/configs/gpu.pbtxt``).
    """

    def __init__(
        self,
        repo: str | os.PathLike,
        models: Sequence[str] | None = None,
        host: str = LOOPBACK,
        http_port: int = 0,
        grpc_port: int = 0,
        metrics_port: int = 0,
        log_path: str | os.PathLike | None = None,
        model_config_name: str | None = None,
    ):
        self.repo = Path(repo).resolve()
        if not self.repo.is_dir():
            raise FileNotFoundError(f"model repository {self.repo} does not exist; run ncf export")
        self.models = list(exported_models(self.repo) if models is None else models)
        if not self.models:
            raise ValueError(
                f"no exported model in {self.repo} (no <model>/1/{names.MANIFEST_FILE}); run "
                "`ncf export --checkpoint RUN/best.pt --data ETL_DIR --repo REPO` first"
            )
        missing = [m for m in self.models if not (self.repo / m / "config.pbtxt").is_file()]
        if missing:
            raise FileNotFoundError(f"{self.repo}: no config.pbtxt for model(s) {missing}")
        if model_config_name is None:
            _check_dependencies(self.models)
        self.host = host
        self._ports = {"http": http_port, "grpc": grpc_port, "metrics": metrics_port}
        self._own_log = log_path is None
        self.log_path = Path(log_path) if log_path else None
        self.model_config_name = model_config_name
        self._proc: subprocess.Popen | None = None

    # -- addresses -------------------------------------------------------------------------
    @property
    def _client_host(self) -> str:
        return LOOPBACK if self.host in ("0.0.0.0", "") else self.host

    @property
    def http_url(self) -> str:
        """``host:port`` of the HTTP endpoint (what ``tritonclient.http`` takes)."""
        return f"{self._client_host}:{self._ports['http']}"

    @property
    def grpc_url(self) -> str:
        """``host:port`` of the gRPC endpoint."""
        return f"{self._client_host}:{self._ports['grpc']}"

    @property
    def metrics_url(self) -> str:
        """``host:port`` of the metrics endpoint (Prometheus text at ``http://{metrics_url}/metrics``)."""
        return f"{self._client_host}:{self._ports['metrics']}"

    @property
    def pid(self) -> int | None:
        """Process id of tritonserver (also its process-group id), None before ``start``."""
        return self._proc.pid if self._proc is not None else None

    def running(self) -> bool:
        """True while the server process is alive."""
        return self._proc is not None and self._proc.poll() is None

    @property
    def returncode(self) -> int | None:
        """The exit code of a server that has exited (negative: the signal), else None."""
        return self._proc.poll() if self._proc is not None else None

    # -- lifecycle -------------------------------------------------------------------------
    def command(self) -> list[str]:
        """The tritonserver command line (ports must be resolved)."""
        cmd = [
            str(pytriton_dir() / "bin" / "tritonserver"),
            f"--model-repository={self.repo}",
            f"--backend-directory={backend_dir()}",
            "--model-control-mode=explicit",
            *[f"--load-model={m}" for m in self.models],
            f"--http-address={self.host}",
            f"--http-port={self._ports['http']}",
            f"--grpc-address={self.host}",
            f"--grpc-port={self._ports['grpc']}",
            f"--metrics-address={self.host}",
            f"--metrics-port={self._ports['metrics']}",
            "--allow-gpu-metrics=false",
            "--strict-readiness=true",
            "--exit-timeout-secs=10",
            "--log-verbose=0",
        ]
        if self.model_config_name:
            cmd.append(f"--model-config-name={self.model_config_name}")
        return cmd

    def start(self, timeout: float = 120.0) -> TritonServer:
        """Start the server and wait until it and every model are ready.

        Raises
        ------
        RuntimeError
            The server exited or did not become ready within ``timeout`` seconds; the message
            ends with the tail of the server log.
        """
        if self.running():
            return self
        check_stub_numpy()
        auto = [k for k, v in self._ports.items() if v == 0]
        attempts = 3 if auto else 1
        for attempt in range(1, attempts + 1):
            # a port picked free may be taken before the server binds it: retry
            self._ports.update(zip(auto, free_ports(len(auto), self._client_host), strict=True))
            self._spawn()
            try:
                self._wait_ready(timeout)
                break
            except RuntimeError:
                busy = "address already in use" in self.log_tail().lower()
                self._terminate()
                if not busy or attempt == attempts:
                    raise
        return self

    def reap(self, timeout: float = 10.0) -> None:
        """Kill what is left of the server's process group (its python stubs) and wait for it."""
        if self._proc is None:
            return
        self._terminate()
        deadline = time.monotonic() + timeout
        while _group_alive(self._proc.pid) and time.monotonic() < deadline:
            time.sleep(0.05)

    def restart(self, timeout: float = 120.0) -> TritonServer:
        """Start a server that has died again, on the same ports, appending to the same log."""
        self.reap()
        self._spawn(append=True)
        self._wait_ready(timeout)
        return self

    def _spawn(self, append: bool = False) -> None:
        if self.log_path is None:
            fd, name = tempfile.mkstemp(prefix="ncf-tritonserver-", suffix=".log")
            os.close(fd)
            self.log_path = Path(name)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab" if append else "wb") as log:
            # Own session/process group: stop() signals the server and its python stubs at once.
            self._proc = subprocess.Popen(
                self.command(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=server_env(),
                start_new_session=True,
                preexec_fn=_set_pdeathsig,  # noqa: PLW1509 (only a prctl call)
            )

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        urls = [f"http://{self.http_url}/v2/health/ready"] + [
            f"http://{self.http_url}/v2/models/{m}/ready" for m in self.models
        ]
        while time.monotonic() < deadline:
            if not self.running():
                raise RuntimeError(
                    f"tritonserver exited with code {self._proc.returncode} before it was ready "
                    f"(models {self.models}); log {self.log_path}:\n{self.log_tail()}"
                )
            if all(_http_ok(u) for u in urls):
                return
            time.sleep(0.1)
        raise RuntimeError(
            f"tritonserver not ready after {timeout:.0f} s (models {self.models}); "
            f"log {self.log_path}:\n{self.log_tail()}"
        )

    def stop(self, timeout: float = 30.0) -> int | None:
        """Stop the server and its stubs: SIGTERM to the group, wait, SIGKILL what is left.

        Returns the server's exit code (None if it was never started). Close HTTP clients first:
        an open keep-alive connection makes tritonserver wait for its exit timeout.
        """
        if self._proc is None:
            return None
        code = self._terminate(timeout)
        if self._own_log and code == 0 and self.log_path is not None:
            self.log_path.unlink(missing_ok=True)
        return code

    def _terminate(self, timeout: float = 30.0) -> int | None:
        proc = self._proc
        if proc is None:
            return None
        if proc.poll() is None:
            _signal_group(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                _signal_group(proc.pid, signal.SIGKILL)
                proc.wait()
        _signal_group(proc.pid, signal.SIGKILL)  # stubs that outlived the server: none left
        return int(proc.returncode)

    def log_tail(self, lines: int = 40) -> str:
        """The last ``lines`` lines of the server log."""
        if self.log_path is None or not self.log_path.exists():
            return ""
        text = self.log_path.read_text(encoding="utf-8", errors="replace")
        return "\n".join(text.splitlines()[-lines:])

    def server_rss_bytes(self) -> int:
        """Resident memory of the server and its stub processes."""
        if not self.running():
            raise RuntimeError("tritonserver is not running")
        return server_rss_bytes(self._proc.pid)

    def __enter__(self) -> TritonServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _check_dependencies(models: Sequence[str]) -> None:
    for model, needs in COMPOSING_MODELS.items():
        lacking = [m for m in needs if model in models and m not in models]
        if lacking:
            raise ValueError(
                f"model {model} needs {lacking} loaded too: add them to the models list"
            )


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass  # the group is already gone


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return r.status == 200
    except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
        return False
