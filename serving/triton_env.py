"""Where the tritonserver bundled in nvidia-pytriton lives, and what it needs to run here.

``nvidia-pytriton`` 0.7.0 ships Triton 2.51.0 with the python backend only (docs/FACTS.md). The
server wants a backend folder holding the python backend and the stub built for this Python, the
interpreter's own libpython first on ``LD_LIBRARY_PATH``, and the venv's ``bin/`` first on
``PATH`` (the stub finds torch/onnxruntime through the ``python3`` there).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import socket
import sys
import sysconfig
import tempfile
from pathlib import Path

# Files the python backend needs side by side (the stub must match this interpreter's version).
_PY_BACKEND_FILES = ("libtriton_python.so", "triton_python_backend_utils.py")
_STUB = "triton_python_backend_stub"
LOOPBACK = "127.0.0.1"


def _site() -> Path:
    """Where the nvidia-pytriton wheel is installed: ``$NCF_PYTRITON_SITE`` or site-packages.

    The variable lets a machine without the wheel installed use an unpacked copy of it.
    """
    return Path(os.environ.get("NCF_PYTRITON_SITE") or sysconfig.get_paths()["purelib"])


def pytriton_dir() -> Path:
    """Folder of the tritonserver bundle inside the installed ``nvidia-pytriton`` wheel.

    Raises
    ------
    FileNotFoundError
        If ``nvidia-pytriton`` is not installed (``pip install nvidia-pytriton==0.7.0``).
    """
    root = _site() / "pytriton" / "tritonserver"
    if not (root / "bin" / "tritonserver").is_file():
        raise FileNotFoundError(
            f"{root}/bin/tritonserver not found: install nvidia-pytriton==0.7.0 into {sys.prefix} "
            "(it bundles the tritonserver binary; see pyproject.toml)"
        )
    return root


def cache_dir() -> Path:
    """Per-user cache for the assembled backend folder (``$NCF_CACHE`` or ``~/.cache/ncf``)."""
    base = os.environ.get("NCF_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "ncf"
    )
    return Path(base)


def backend_dir() -> Path:
    """Assemble (once) a Triton backend folder holding the python backend and this Python's stub.

    Returns
    -------
    Path
        ``<cache>/triton-backends/<key>``; its ``python/`` subfolder holds symlinks to the bundle's
        ``libtriton_python.so``, ``triton_python_backend_utils.py`` and the stub for this
        interpreter. The key hashes the bundle path, so two virtual environments do not collide.
    """
    bundle = pytriton_dir()
    ver = f"{sys.version_info.major}.{sys.version_info.minor}"
    stub = bundle / "python_backend_stubs" / ver / _STUB
    if not stub.is_file():
        raise FileNotFoundError(f"{stub} not found: nvidia-pytriton has no stub for Python {ver}")
    sources = {f: bundle / "backends" / "python" / f for f in _PY_BACKEND_FILES} | {_STUB: stub}
    key = hashlib.sha1(str(bundle.resolve()).encode()).hexdigest()[:12]
    target = cache_dir() / "triton-backends" / key
    python = target / "python"
    if all((python / f).resolve() == src.resolve() for f, src in sources.items()):
        return target
    # Build beside the target and rename: concurrent starts (pytest-xdist, two shells) are safe.
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{key}-", dir=target.parent))
    try:
        (tmp / "python").mkdir()
        for f, src in sources.items():
            (tmp / "python" / f).symlink_to(src.resolve())
        if target.exists():
            shutil.rmtree(target, ignore_errors=True)
        os.replace(tmp, target)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
        if not (python / _STUB).exists():  # lost a race and nobody else finished either
            raise
    return target


def server_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """Environment for tritonserver: this interpreter's libpython first, venv ``bin/`` first on PATH.

    Without the interpreter's own ``LIBDIR`` first, the stub loads the system libpython against
    this interpreter's stdlib and model loading fails (docs/FACTS.md). The stub finds the venv's
    packages (torch, onnxruntime) through the ``python3`` first on ``PATH``.
    """
    env = dict(os.environ if base is None else base)
    libs = [sysconfig.get_config_var("LIBDIR") or "", str(_pytriton_libs())]
    old = env.get("LD_LIBRARY_PATH")
    env["LD_LIBRARY_PATH"] = os.pathsep.join([p for p in libs if p] + ([old] if old else []))
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return env


def _pytriton_libs() -> Path:
    return _site() / "nvidia_pytriton.libs"


def free_ports(n: int, host: str = LOOPBACK) -> list[int]:
    """``n`` distinct TCP ports free on ``host`` right now (the OS picks them).

    All ``n`` sockets stay bound until every port is picked: one picked and released at a time,
    the OS may hand out the same port twice."""
    with contextlib.ExitStack() as stack:
        socks = [
            stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) for _ in range(n)
        ]
        for s in socks:
            s.bind((host, 0))
        return [int(s.getsockname()[1]) for s in socks]


def free_port(host: str = LOOPBACK) -> int:
    """A TCP port that is free on ``host`` right now (the OS picks it)."""
    return free_ports(1, host)[0]


def check_stub_numpy(version: str | None = None) -> None:
    """Refuse numpy 2 in the environment the python-backend stub runs in.

    The stub bundled with nvidia-pytriton 0.7.0 (which itself requires numpy<2) answers every
    request with "output tensor shape does not match size of output" under numpy 2 (seen with
    numpy 2.5.2 on Python 3.12); the error appears only at inference, so check before starting.

    Parameters
    ----------
    version
        numpy version to check; default: the one installed for this interpreter.

    Raises
    ------
    RuntimeError
        If the major version is 2 or more.
    """
    if version is None:
        from importlib.metadata import version as installed

        version = installed("numpy")
    if int(version.split(".")[0]) >= 2:
        raise RuntimeError(
            f"numpy {version} in {sys.prefix}: the tritonserver python stub of nvidia-pytriton 0.7.0 "
            "needs numpy<2 (with numpy 2 every response fails with 'output tensor shape does not "
            "match size of output'); install numpy==1.26.4 (pyproject.toml pins it)"
        )
