"""``ncf serve``: run a real tritonserver on the exported model repository until Ctrl-C/SIGTERM.

Binds 127.0.0.1 unless ``--host`` says otherwise, loads the models this machine can run (the
python-backend models that ``ncf export`` filled; the CPU server here has no libtorch/ONNX Runtime
backend), waits until they are ready, prints the endpoints, and on SIGINT or SIGTERM stops the
server and its python stubs (one process group; nothing is left behind).
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from types import FrameType

from ncf.core import names
from ncf.core.options import call_with_args
from ncf.serving.server import LOOPBACK, TritonServer


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``ncf serve``."""
    parser.add_argument(
        "--repo", default="triton_repo", help="model repository (ncf export --repo)"
    )
    parser.add_argument(
        "--models",
        nargs="+",
        default=None,
        help=f"models to load (default: the exported ones of {', '.join(names.CPU_MODELS)})",
    )
    parser.add_argument(
        "--host",
        default=LOOPBACK,
        help="address to bind (default 127.0.0.1; e.g. 0.0.0.0 exposes the server to the network)",
    )
    parser.add_argument("--http-port", type=int, default=8000, help="HTTP port (0 = any free port)")
    parser.add_argument("--grpc-port", type=int, default=8001, help="gRPC port (0 = any free port)")
    parser.add_argument(
        "--metrics-port", type=int, default=8002, help="metrics port (0 = any free)"
    )
    parser.add_argument("--log-file", default=None, help="server log (default: a temporary file)")
    parser.add_argument(
        "--model-config-name",
        default=None,
        help="tritonserver --model-config-name (e.g. gpu: <model>/configs/gpu.pbtxt, KIND_GPU)",
    )
    parser.add_argument(
        "--timeout", type=float, default=120.0, help="seconds to wait for readiness"
    )


def _check_args(args: argparse.Namespace) -> None:
    for flag in ("http_port", "grpc_port", "metrics_port"):
        port = getattr(args, flag)
        if not 0 <= port <= 65535:
            raise ValueError(f"--{flag.replace('_', '-')}={port}: must be in [0, 65535]")
    ports = [p for p in (args.http_port, args.grpc_port, args.metrics_port) if p]
    if len(set(ports)) != len(ports):
        raise ValueError(f"--http-port/--grpc-port/--metrics-port {ports}: must differ")
    unknown = sorted(set(args.models or []) - set(names.CPU_MODELS))
    if unknown:
        raise ValueError(
            f"--models {unknown}: this CPU server runs only {list(names.CPU_MODELS)} "
            f"({'/'.join(names.OFFICIAL_BACKEND_MODELS)} need the NGC tritonserver)"
        )


def run(args: argparse.Namespace) -> int:
    """Run ``ncf serve``: start, report the endpoints, block until SIGINT/SIGTERM, stop cleanly."""
    _check_args(args)
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    server = call_with_args(TritonServer, args, log_path=args.log_file)
    try:
        if args.host != LOOPBACK:
            print(f"ncf serve: warning: binding {args.host}, not loopback", file=sys.stderr)
        server.start(timeout=args.timeout)
        _report(server)
        while not stop.wait(0.5):
            if not server.running():
                print(f"ncf serve: tritonserver exited:\n{server.log_tail()}", file=sys.stderr)
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
