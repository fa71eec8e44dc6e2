"""docker-compose.yml is valid under the Compose specification's JSON schema.

Validated by check-jsonschema (pinned in the ``test`` extra) with the compose-spec schema it
vendors (``--builtin-schema vendor.compose-spec``), offline: any network access is pointed at a
closed local port. Its YAML loader resolves the ``<<: *merlin`` merge keys first, so the shared
block is checked inside every service it is merged into.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
COMPOSE = ROOT / "docker-compose.yml"
OFFLINE = {"http_proxy": "http://127.0.0.1:9", "https_proxy": "http://127.0.0.1:9", "no_proxy": ""}


def check_compose(path: Path) -> subprocess.CompletedProcess:
    """Run check-jsonschema's compose-spec check on ``path``, without network."""
    env = {**os.environ, **OFFLINE, **{k.upper(): v for k, v in OFFLINE.items()}}
    cmd = [sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.compose-spec"]
    return subprocess.run(
        [*cmd, str(path)], env=env, capture_output=True, text=True, timeout=120, check=False
    )


def test_docker_compose_is_valid_under_the_compose_spec():
    result = check_compose(COMPOSE)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "validation done" in result.stdout


# (text in docker-compose.yml, what it becomes, service paths the validator must report)
BROKEN = {
    "misplaced deploy key": (
        "    shm_size: 1gb\n",
        "    shm_size: 1gb\n    restart_policy: always\n",
        ["$.services.triton"],
    ),
    "typo inside the merged x-merlin block": (
        "  shm_size: 16gb\n",
        "  shm_size: 16gb\n  shm-size: 16gb\n",
        ["$.services.etl", "$.services.train", "$.services.export"],
    ),
    "ports not a list": (
        '      - "127.0.0.1:8000:8000"\n      - "127.0.0.1:8001:8001"\n      - "127.0.0.1:8002:8002"\n',
        '      "127.0.0.1:8000:8000"\n',
        ["$.services.triton.ports"],
    ),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_the_check_rejects_a_broken_compose_file(case, tmp_path):
    old, new, paths = BROKEN[case]
    text = COMPOSE.read_text(encoding="utf-8")
    assert text.count(old) == 1, f"{case}: docker-compose.yml changed, update the case"
    broken = tmp_path / "docker-compose.yml"
    broken.write_text(text.replace(old, new), encoding="utf-8")
    result = check_compose(broken)
    assert result.returncode == 1, result.stdout + result.stderr
    for path in paths:
        assert f"::{path}:" in result.stdout, result.stdout
