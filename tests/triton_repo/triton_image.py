"""Facts about the NGC Triton image docker-compose.yml runs, read from docs/TRITON_IMAGE.md.

The document holds each fact once, in fenced blocks opened with ```` ```text <name> ````; the tests
and ``make venv`` read them here. ``python -m tests.triton_repo.triton_image fetch-proto`` (run by
``make venv``) downloads that release's tritonclient wheel and keeps its ``model_config_pb2.py``
under ``<venv>/triton-<server>/``; :func:`release_model_config` loads ``ModelConfig`` from it.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import re
import subprocess
import sys
import sysconfig
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "TRITON_IMAGE.md"
PB2 = "model_config_pb2.py"
# The wheel's platform tag; the file taken from it is pure Python, so any host can use it.
WHEEL_PLATFORM = "manylinux1_x86_64"
FETCH = "python -m tests.triton_repo.triton_image fetch-proto"


def doc_block(name: str, doc: Path = DOC) -> list[list[str]]:
    """Lines of the ```` ```text <name> ```` block of ``doc``, each split into words.

    Raises
    ------
    ValueError
        If ``doc`` has no such block, or has it twice.
    """
    text = doc.read_text(encoding="utf-8")
    found = re.findall(rf"^```text {re.escape(name)}\n(.*?)^```$", text, re.M | re.S)
    if len(found) != 1:
        raise ValueError(f"{doc}: expected one ```text {name} block, found {len(found)}")
    return [line.split() for line in found[0].splitlines() if line.strip()]


def release(doc: Path = DOC) -> dict[str, str]:
    """The ``release`` block as a dict (``image``, ``sdk-image``, ``server``, wheel and sha256)."""
    return {words[0].rstrip(":"): " ".join(words[1:]) for words in doc_block("release", doc)}


def backends(doc: Path = DOC) -> dict[str, str]:
    """Every name a config may put in ``backend`` or ``platform``, mapped to what runs it.

    Returns
    -------
    dict
        backend name -> itself, platform -> its backend, core platform (``ensemble``) -> "core".
    """
    names = {}
    for backend, *platforms in doc_block("backends", doc):
        names[backend] = backend
        names.update({p: backend for p in platforms})
    names.update({words[0]: "core" for words in doc_block("core-platforms", doc)})
    return names


def pb_utils_api(doc: Path = DOC) -> dict[str, set[str]]:
    """``pb_utils`` name -> keyword arguments allowed when calling it (the ``pb-utils`` block)."""
    return {name: set(keywords) for name, *keywords in doc_block("pb-utils", doc)}


def release_pb2_path(server: str | None = None, prefix: Path | None = None) -> Path:
    """Where ``make venv`` keeps the release's ``model_config_pb2.py`` for this interpreter."""
    server = server or release()["server"]
    return Path(prefix or sys.prefix) / f"triton-{server}" / PB2


def release_model_config() -> type:
    """The ``ModelConfig`` message class of the release docs/TRITON_IMAGE.md names.

    The serialized ``FileDescriptorProto`` is read from the pb2 module's source (it is never
    run: it would register ``model_config.proto`` in protobuf's default pool, where the venv's
    newer tritonclient has already put its own) and added to a pool of its own.

    Raises
    ------
    FileNotFoundError
        If ``make venv`` has not fetched the file for this interpreter.
    """
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    path = release_pb2_path()
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found: run `make venv` (it fetches it) or `{FETCH}`")
    blob = _serialized_file(path.read_text(encoding="utf-8"), path)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(descriptor_pb2.FileDescriptorProto.FromString(blob))
    desc = pool.FindMessageTypeByName("inference.ModelConfig")
    if hasattr(message_factory, "GetMessageClass"):  # protobuf >= 4.21
        return message_factory.GetMessageClass(desc)
    return message_factory.MessageFactory(pool).GetPrototype(desc)


def _serialized_file(source: str, path: Path) -> bytes:
    """The bytes literal passed to ``AddSerializedFile`` in a protoc-generated pb2 module."""
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Call)
            and getattr(node.func, "attr", None) == "AddSerializedFile"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, bytes)
        ):
            return node.args[0].value
    raise ValueError(
        f"{path}: no AddSerializedFile(b'...') call: not a protoc-generated pb2 module"
    )


def fetch_proto(prefix: Path | None = None) -> Path:
    """Download the release's tritonclient wheel, check its sha256, keep its ``model_config_pb2.py``.

    Returns
    -------
    Path
        The file written (:func:`release_pb2_path`).

    Raises
    ------
    ValueError
        If the wheel's sha256 differs from docs/TRITON_IMAGE.md's.
    """
    rel = release()
    server, wheel_name = rel["server"], rel["tritonclient-wheel"]
    dest = release_pb2_path(server, prefix)
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "-q",
                "--no-deps",
                "--only-binary=:all:",
                "--platform",
                WHEEL_PLATFORM,
                "--dest",
                tmp,
                f"tritonclient=={server}",
            ],
            check=True,
        )
        wheel = Path(tmp) / wheel_name
        digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
        if digest != rel["tritonclient-wheel-sha256"]:
            raise ValueError(
                f"{wheel_name}: sha256 {digest} differs from {DOC.name}'s "
                f"{rel['tritonclient-wheel-sha256']}: check the wheel, then update the document"
            )
        with zipfile.ZipFile(wheel) as z:
            data = z.read(f"tritonclient-{server}.data/purelib/tritonclient/grpc/{PB2}")
    _serialized_file(data.decode("utf-8"), dest)  # refuse to keep anything else
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp_dest = dest.with_suffix(".tmp")
    tmp_dest.write_bytes(data)
    tmp_dest.replace(dest)
    return dest


def bundled_server() -> tuple[Path, dict[str, str]]:
    """The tritonserver binary nvidia-pytriton bundles, and the environment it starts in.

    Raises
    ------
    FileNotFoundError
        If nvidia-pytriton is not installed in this interpreter's environment.
    """
    site = Path(sysconfig.get_paths()["purelib"])
    binary = site / "pytriton" / "tritonserver" / "bin" / "tritonserver"
    if not binary.is_file():
        raise FileNotFoundError(f"{binary} not found: install nvidia-pytriton (pyproject.toml)")
    return binary, {"LD_LIBRARY_PATH": str(site / "nvidia_pytriton.libs"), "PATH": "/usr/bin:/bin"}


def main(argv: list[str] | None = None) -> int:
    """``fetch-proto``: write the release's ``model_config_pb2.py`` into this environment."""
    parser = argparse.ArgumentParser(prog="python -m tests.triton_repo.triton_image")
    parser.add_argument("command", choices=["fetch-proto"])
    parser.parse_args(argv)
    print(f"{DOC.name}: Triton {release()['server']} model config -> {fetch_proto()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
