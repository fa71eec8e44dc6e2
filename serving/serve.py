"""``ncf serve``: run a real tritonserver on the exported model repository until Ctrl-C/SIGTERM.

Binds 127.0.0.1 unless ``--host`` says otherwise, loads the models this machine can run (the
python-backend models that ``ncf export`` filled; the CPU server here has no libtorch/ONNX Runtime
backend), waits until they are ready, prints the endpoints as one JSON line, and on SIGINT or
SIGTERM stops the server and its python stubs (one process group; nothing is left behind).

While it runs, ``ncf.serving.supervisor.Supervisor`` keeps the server up: a server that dies (one
malformed request can abort tritonserver) is restarted on the same ports, each restart logged with
the exit cause, and the JSON status line is printed again once it is ready. While it is down its
``/v2/health/ready`` does not answer (readiness false). When the restart policy gives up (more
than 5 deaths in 10 minutes) ``ncf serve`` exits 1.
"""

from __future__ import annotations

import dataclasses
import json
import signal
import sys
import threading
from pathlib import Path
from types import FrameType

from ncf.core import names
from ncf.core.config import Config, flag_name, setting
from ncf.serving.server import LOOPBACK, TritonServer
from ncf.serving.supervisor import Supervisor


@dataclasses.dataclass
class ServeConfig(Config):
    """Run a real tritonserver on the model repository (127.0.0.1) (`ncf serve`)."""

    repo: Path = setting(Path("triton_repo"), help="model repository (ncf export --repo)")
    models: list[str] = setting(
        default_factory=list,
        help=f"models to load (none given: the exported ones of {', '.join(names.CPU_MODELS)})",
    )
    host: str = setting(
        LOOPBACK,
        help="address to bind (e.g. 0.0.0.0 exposes the server to the network)",
    )
    http_port: int = setting(8000, help="HTTP port (0 = any free port)")
    grpc_port: int = setting(8001, help="gRPC port (0 = any free port)")
    metrics_port: int = setting(8002, help="metrics port (0 = any free)")
    log_file: Path | None = setting(None, help="server log (unset: a temporary file)")
    model_config_name: str | None = setting(
        None,
        help="tritonserver --model-config-name (e.g. gpu: <model>/configs/gpu.pbtxt, KIND_GPU; "
        "unset: config.pbtxt)",
    )
    timeout: float = setting(120.0, help="seconds to wait for readiness")

    def check(self) -> None:
        """Raise ValueError naming the flag of a port or model this server cannot use."""
        for name in ("http_port", "grpc_port", "metrics_port"):
            port = getattr(self, name)
            if not 0 <= port <= 65535:
                raise ValueError(f"{flag_name(name)}={port}: must be in [0, 65535]")
        ports = [p for p in (self.http_port, self.grpc_port, self.metrics_port) if p]
        if len(set(ports)) != len(ports):
            raise ValueError(f"--http-port/--grpc-port/--metrics-port {ports}: must differ")
        unknown = sorted(set(self.models) - set(names.CPU_MODELS))
        if unknown:
            raise ValueError(
                f"--models {unknown}: this CPU server runs only {list(names.CPU_MODELS)} "
                f"({'/'.join(names.OFFICIAL_BACKEND_MODELS)} need the NGC tritonserver)"
            )


CONFIG = ServeConfig


def run(cfg: ServeConfig) -> int:
    """Run ``ncf serve``: start, report the endpoints, block until SIGINT/SIGTERM, stop cleanly."""
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    server = TritonServer(
        cfg.repo,
        models=cfg.models or None,
        host=cfg.host,
        http_port=cfg.http_port,
        grpc_port=cfg.grpc_port,
        metrics_port=cfg.metrics_port,
        log_path=cfg.log_file,
        model_config_name=cfg.model_config_name,
    )
    try:
        if cfg.host != LOOPBACK:
            print(f"ncf serve: warning: binding {cfg.host}, not loopback", file=sys.stderr)
        server.start(timeout=cfg.timeout)
        _report(server)
        supervisor = Supervisor(server, wait=stop.wait)
        if not supervisor.keep_up(stop, on_restart=lambda: _report(server)):
            return 1
        print("ncf serve: stopping", file=sys.stderr, flush=True)
        return 0
    finally:
        code = server.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if code not in (None, 0):
            print(
                f"ncf serve: tritonserver exit code {code}; log {server.log_path}", file=sys.stderr
            )


def _report(server: TritonServer) -> None:
    # CPU models not loaded (not exported, or left out by --models), then the GPU-container ones.
    skipped = [m for m in names.CPU_MODELS if m not in server.models]
    info = {
        "ready": True,
        "pid": server.pid,
        "models": server.models,
        "not_loaded": skipped + list(names.OFFICIAL_BACKEND_MODELS),
        "http": server.http_url,
        "grpc": server.grpc_url,
        "metrics": f"http://{server.metrics_url}/metrics",
        "log": str(server.log_path),
    }
    print(json.dumps(info), flush=True)
