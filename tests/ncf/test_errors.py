"""The error boundary (ncf.core.errors): every CLI entry answers an unwritable output, a missing
input and a corrupt input with one line naming the path, exit code 1 (environment) or 2 (bad
input), and no traceback unless NCF_DEBUG=1.

The stages run in-process through ``ncf.cli.main`` (the boundary every ``ncf`` command goes
through); one subprocess per entry point (``python -m ncf.cli``, ``python -m ncf.models.train``,
``python -m ncf.bench.X``) checks the real process. Tests run as root, where ``chmod`` does not stop
a write: the unwritable folder is ``chattr +i`` (undone at teardown), skipped where chattr fails.
"""

from __future__ import annotations

import dataclasses
import errno
import os
import shutil
import subprocess
import sys
import types
import zipfile
from pathlib import Path

import pytest

from ncf.bench import entry
from ncf.cli import main
from ncf.core import errors, textfile
from ncf.core.config import DEFAULT_SEED, Config, setting
from ncf.sources.synth import SynthConfig
from tests.triton_repo import etl_fixture

ROOT = Path(__file__).resolve().parents[2]
GARBAGE = b"\x00\x9c\xff garbage \x01\x02\n\xfe\n"


def _ratings(path: Path) -> Path:
    """30 users x 12 items of 40, distinct timestamps: a tiny ratings.csv."""
    rows = ["userId,movieId,rating,timestamp"]
    for u in range(1, 31):
        rows += [f"{u},{(u * 7 + k * 3) % 40 + 1},4.0,{1000 + u * 100 + k}" for k in range(12)]
    path.write_text("\n".join(rows) + "\n")
    return path


def _engine() -> str:
    try:
        import nvtabular  # noqa: F401  (export reads the NVTabular workflow)
    except ImportError:
        return "pandas"
    return "nvtabular"


def _chattr(flag: str, path: Path) -> bool:
    res = subprocess.run(["chattr", flag, str(path)], capture_output=True)
    return res.returncode == 0


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory):
    """Tiny inputs (ratings, ETL, checkpoint), their corrupt twins, and an immutable folder."""
    d = tmp_path_factory.mktemp("errors")
    f = {"ratings": _ratings(d / "ratings.csv"), "engine": _engine()}
    f["etl"] = d / "etl"
    argv = ["etl", "--input", str(f["ratings"]), "--out", str(f["etl"]), "--min-ratings", "2"]
    with etl_fixture.quiet_merlin():
        assert main([*argv, "--eval-negatives", "3", "--engine", f["engine"]]) == 0
    f["ckpt"] = etl_fixture.make_checkpoint(d / "best.pt", f["etl"])
    f["bad_ckpt"] = d / "bad.pt"
    f["bad_ckpt"].write_bytes(f["ckpt"].read_bytes()[:300])  # truncated
    f["bad_meta"] = d / "etl-bad-meta"
    shutil.copytree(f["etl"], f["bad_meta"])
    (f["bad_meta"] / "metadata.json").write_text('{"num_users": 30,\n  "num_')
    f["bad_parquet"] = d / "etl-bad-parquet"
    shutil.copytree(f["etl"], f["bad_parquet"])
    part = f["bad_parquet"] / "train" / "part_0.parquet"
    part.write_bytes(part.read_bytes()[:64])
    f["garbage"] = d / "garbage.bin"
    f["garbage"].write_bytes(GARBAGE)
    f["bad_csv"] = d / "bad.csv"
    f["bad_csv"].write_text("userId,movieId,rating,timestamp\n1,2,4.0,100\n1,3\n")
    f["zip"] = d / "small.zip"
    with zipfile.ZipFile(f["zip"], "w") as zf:  # ml-latest-small pins no md5: accepted
        zf.writestr("ml-latest-small/ratings.csv", f["ratings"].read_text())
    f["bad_results"] = d / "results"
    f["bad_results"].mkdir()
    (f["bad_results"] / "etl.json").write_text('{"rows": [')
    f["results"] = ROOT / "bench" / "results"
    f["missing"] = d / "missing"  # never created
    f["out"] = d / "out"  # outputs of commands whose input is bad
    f["inter"] = d / "ok.inter"
    f["inter"].write_text(
        "user_id:token\titem_id:token\trating:float\ttimestamp:float\n1\t2\t3\t4\n"
    )
    ro = f["ro"] = d / "ro"
    ro.mkdir()
    shutil.copy(ROOT / "README.md", ro / "README.md")
    f["immutable"] = _chattr("+i", ro) and not _writable(ro)
    try:
        yield f
    finally:
        _chattr("-i", ro)


def _writable(folder: Path) -> bool:
    try:
        (folder / ".probe").touch()
    except OSError:
        return False
    (folder / ".probe").unlink()
    return True


# (entry, case) -> (command line, exit code, the path its error line names); {key} is files[key]
CASES = {
    ("download", "unwritable"): (
        "download ml-latest-small --quiet --out {ro}/dl --archive {zip}", 1, "{ro}/dl"),
    ("download", "missing"): (
        "download ml-latest-small --out {out}/dl1 --archive {missing}/a.zip", 2, "{missing}/a.zip"),
    ("download", "corrupt"): (
        "download ml-latest-small --out {out}/dl2 --archive {garbage}", 2, "{garbage}"),
    ("synth", "unwritable"): ("synth --scale 0.0003 --out {ro}/r.csv", 1, "{ro}/r.csv"),
    ("synth", "missing"): ("synth --config {missing}/c.json", 2, "{missing}/c.json"),
    ("synth", "corrupt"): ("synth --config {garbage}", 2, "{garbage}"),
    ("convert", "unwritable"): ("convert {inter} --out {ro}/c.csv", 1, "{ro}/c.csv"),
    ("convert", "missing"): ("convert {missing}/x.inter --out {out}/c1.csv", 2, "{missing}/x.inter"),
    ("convert", "corrupt"): ("convert {garbage} --out {out}/c2.csv", 2, "{garbage}"),
    ("expand", "unwritable"): (
        "expand {ratings} --out {ro}/x.parquet --users 2 --items 2", 1, "{ro}/x.parquet"),
    ("expand", "missing"): ("expand {missing}/r.csv --out {out}/x1.parquet", 2, "{missing}/r.csv"),
    ("expand", "corrupt"): ("expand {bad_csv} --out {out}/x2.parquet", 2, "{bad_csv}"),
    ("etl", "unwritable"): (
        "etl --input {ratings} --out {ro}/etl --engine pandas --min-ratings 2 --eval-negatives 3",
        1, "{ro}/etl"),
    ("etl", "missing"): ("etl --input {missing}/r.csv --out {out}/e1", 2, "{missing}/r.csv"),
    ("etl", "corrupt"): ("etl --input {bad_csv} --out {out}/e2 --engine pandas", 2, "{bad_csv}"),
    ("train", "unwritable"): (
        "train --data {etl} --out {ro}/run --epochs 1 --device cpu", 1, "{ro}/run"),
    ("train", "missing"): ("train --data {missing} --out {out}/run1 --device cpu", 2, "{missing}"),
    ("train", "corrupt"): (
        "train --data {bad_meta} --out {out}/run2 --device cpu", 2, "{bad_meta}/metadata.json"),
    ("evaluate", "unwritable"): (
        "evaluate --data {etl} --checkpoint {ckpt} --device cpu --out {ro}/e.json",
        1, "{ro}/e.json"),
    ("evaluate", "missing"): (
        "evaluate --data {etl} --checkpoint {missing}/b.pt --device cpu", 2, "{missing}/b.pt"),
    ("evaluate", "corrupt"): (
        "evaluate --data {etl} --checkpoint {bad_ckpt} --device cpu", 2, "{bad_ckpt}"),
    ("tune", "unwritable"): (
        "tune --data {etl} --out {ro}/tune --trials 1 --device cpu", 1, "{ro}/tune"),
    ("tune", "missing"): ("tune --data {missing} --out {out}/tune1 --device cpu", 2, "{missing}"),
    ("tune", "corrupt"): (
        "tune --data {bad_parquet} --out {out}/tune2 --trials 1 --epochs 1 --device cpu",
        2, "{bad_parquet}/train/part_0.parquet"),
    ("export", "unwritable"): (
        "export --checkpoint {ckpt} --data {etl} --repo {ro}/repo --check-samples 64",
        1, "{ro}/repo"),
    ("export", "missing"): (
        "export --checkpoint {missing}/b.pt --data {etl} --repo {out}/repo1", 2, "{missing}/b.pt"),
    ("export", "corrupt"): (
        "export --checkpoint {bad_ckpt} --data {etl} --repo {out}/repo2", 2, "{bad_ckpt}"),
    # recommend writes nothing and needs a server for the rest: its input file is its --config
    ("recommend", "missing"): ("recommend --config {missing}/c.json", 2, "{missing}/c.json"),
    ("recommend", "corrupt"): ("recommend --config {garbage}", 2, "{garbage}"),
    ("bench readme", "unwritable"): (
        "bench readme --readme {ro}/README.md --results-dir {results}", 1, "{ro}/README.md"),
    ("bench readme", "missing"): (
        "bench readme --readme {missing}/README.md", 2, "{missing}/README.md"),
    ("bench readme", "corrupt"): (
        "bench readme --readme {ro}/README.md --results-dir {bad_results}",
        2, "{bad_results}/etl.json"),
}  # fmt: skip


def _fill(text: str, f: dict) -> str:
    return text.format(**{k: str(v) for k, v in f.items()})


def _skip_unless_possible(f: dict, case: tuple[str, str]) -> None:
    if case[1] == "unwritable" and not f["immutable"]:
        pytest.skip(f"chattr +i does not make {f['ro']} read-only on this filesystem")
    if case == ("export", "unwritable") and f["engine"] != "nvtabular":
        pytest.skip("export reads an NVTabular workflow: NVTabular is not installed here")


def _one_error_line(err: str, prog: str, named: str) -> str:
    assert "Traceback" not in err, err
    lines = [line for line in err.splitlines() if ": error: " in line]
    assert len(lines) == 1 and lines[0] == err.strip().splitlines()[-1], err
    assert lines[0].startswith(f"{prog}: error: ") and named in lines[0], err
    return lines[0]


@pytest.mark.parametrize("case", list(CASES), ids=["-".join(c).replace(" ", "-") for c in CASES])
def test_each_entry_fails_with_one_line(files, case, capsys):
    _skip_unless_possible(files, case)
    command, code, named = CASES[case]
    with etl_fixture.quiet_merlin():
        rc = main(_fill(command, files).split())
    line = _one_error_line(capsys.readouterr().err, f"ncf {case[0]}", _fill(named, files))
    assert rc == code, line
    if case[1] == "unwritable":
        assert "writable" in line


def _run(cmd: list[str], **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *cmd], capture_output=True, text=True, cwd=ROOT, timeout=300,
        env={**os.environ, **env},
    )  # fmt: skip


@pytest.mark.parametrize(
    "cmd, prog",
    [
        (["-m", "ncf.cli", "synth", "--scale", "0.0003", "--out", "{ro}/r.csv"], "ncf synth"),
        (["-m", "ncf.models.train", "--data", "{etl}", "--out", "{ro}/run"], "ncf train"),
        (["-m", "ncf.bench.readme", "--readme", "{ro}/README.md"], "python -m ncf.bench.readme"),
    ],
    ids=["ncf.cli", "ncf.models.train", "ncf.bench"],
)
def test_each_entry_point_process_exits_1_with_one_line(files, cmd, prog):
    _skip_unless_possible(files, ("any", "unwritable"))
    cmd = [c.format(ro=files["ro"], etl=files["etl"]) for c in cmd]
    res = _run(cmd)
    _one_error_line(res.stderr, prog, str(files["ro"]))
    assert res.returncode == 1, res.stderr


def test_ncf_debug_shows_the_traceback(files):
    missing, out = files["missing"] / "x.inter", files["out"] / "debug.csv"
    res = _run(["-m", "ncf.cli", "convert", str(missing), "--out", str(out)], NCF_DEBUG="1")
    assert res.returncode == 1 and "Traceback" in res.stderr  # python's own exit code
    assert res.stderr.strip().splitlines()[-1].startswith("FileNotFoundError")


def test_a_full_disk_is_an_environment_fault_naming_flag_and_fix(tmp_path):
    cfg = SynthConfig(out=tmp_path / "synth", seed=DEFAULT_SEED)
    exc = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(tmp_path / "synth" / "r.csv"))
    line = errors.error_line(exc, cfg)
    assert errors.exit_code(exc) == 1
    assert line.startswith(f"{tmp_path / 'synth' / 'r.csv'}: No space left on device; free space")
    assert "--out" in line


def test_an_atomic_temp_is_named_as_the_output_it_was_for(tmp_path):
    tmp = tmp_path / ".tmp-ratings.csv-x1_y2z3w"
    exc = PermissionError(errno.EROFS, os.strerror(errno.EROFS), str(tmp))
    assert errors.error_line(exc).startswith(f"{tmp_path / 'ratings.csv'}: Read-only file system;")


def test_a_malformed_json_file_is_named_with_its_line_and_column(tmp_path):
    path = tmp_path / "m.json"
    path.write_text('{\n  "a": 1,\n  "b": }\n')
    with pytest.raises(ValueError) as info:
        textfile.read_json(path)
    line = errors.error_line(info.value)
    assert line.startswith(f"{path}: line 3 column 8: not valid JSON (Expecting value")
    assert errors.exit_code(info.value) == 2


@dataclasses.dataclass
class _BenchConfig(Config):
    """A bench that raises what it is given."""

    out: Path = setting(Path("results"), help="where it writes")


@pytest.mark.parametrize(
    "raised, code",
    [
        (PermissionError(errno.EACCES, os.strerror(errno.EACCES), "results/x.json"), 1),
        (subprocess.CalledProcessError(1, ["python", "-m", "ncf.bench.etl"]), 1),
        (subprocess.CalledProcessError(2, ["python", "-m", "ncf.bench.etl"]), 2),
        (entry.BenchError("no GPU here: run it on a GPU host"), 2),
    ],
    ids=["unwritable", "child-environment", "child-bad-input", "bench-error"],
)
def test_bench_entry_exit_codes(raised, code, capsys):
    def run(cfg):
        raise raised

    module = types.SimpleNamespace(run=run)
    assert entry.execute(module, _BenchConfig(), "ncf bench x", "ncf bench x") == code
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("ncf bench x: error: ")
    if code == 1 and isinstance(raised, OSError):
        assert err[0].startswith("ncf bench x: error: results/x.json: Permission denied; ")
        assert "--out" in err[0]
