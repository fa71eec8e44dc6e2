"""bench/entry.py: every bench module runs through it, its command line is generated from its
config, its results record the command as the user typed it (``python -m ncf.bench.X ...`` or
``ncf bench X ...``) and the resolved config, and its errors are one line."""

from __future__ import annotations

import importlib
import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from ncf import cli
from ncf.bench import cli as bench_cli
from ncf.bench import entry, soak
from ncf.core.config import DEFAULT_SEED, resolve, write_config

ROOT = Path(__file__).resolve().parents[2]
MODULES = [m for m, _ in bench_cli.BENCHES.values()] + ["ncf.bench.pa_input"]


def _tiny_inference(results: Path) -> list[str]:
    """A few milliseconds of eager scoring of a random 50 x 40 model (a space in the path)."""
    return [
        "--num-users",
        "50",
        "--num-items",
        "40",
        "--batch-sizes",
        "1",
        "--backends",
        "eager",
        "--precisions",
        "fp32",
        "--warmup",
        "0",
        "--min-iters",
        "1",
        "--max-iters",
        "2",
        "--results-dir",
        str(results),
        "--no-plot",
    ]


def _recorded(results: Path, name: str) -> tuple[str, str]:
    payload = json.loads((results / f"{name}.json").read_text())
    config = payload["config"]  # the resolved config, defaults filled in
    assert config["precisions"] == ["fp32"] and config["results_dir"] == str(results)
    assert config["plot"] is False and config["seed"] == DEFAULT_SEED
    return payload["command"], (results / f"{name}.md").read_text()


def test_python_m_records_python_m(tmp_path: Path) -> None:
    results = tmp_path / "res ults"
    argv = _tiny_inference(results)
    done = subprocess.run(
        [sys.executable, "-m", "ncf.bench.inference", *argv],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    command, md = _recorded(results, "inference")
    assert command == "python -m ncf.bench.inference " + shlex.join(argv)
    assert shlex.split(command)[3:] == argv and f"`{command}`" in md


def test_ncf_bench_records_ncf_bench(tmp_path: Path) -> None:
    results = tmp_path / "res ults"
    argv = _tiny_inference(results)
    assert cli.main(["bench", "inference", *argv]) == 0
    command, md = _recorded(results, "inference")
    assert command == "ncf bench inference " + shlex.join(argv)
    assert f"`{command}`" in md and "python -m" not in md


@pytest.mark.parametrize("name", [*bench_cli.BENCHES, "all"])
def test_every_bench_config_reads_its_own_written_config(name: str, tmp_path: Path) -> None:
    """A config file of stage ``bench NAME`` (as ``ncf bench all`` hands over) gives that config."""
    cls = (
        bench_cli.AllConfig
        if name == "all"
        else importlib.import_module(bench_cli.BENCHES[name][0]).CONFIG
    )
    cfg = resolve(cls, ["--results-dir", "a b"], f"bench {name}")
    path = write_config(tmp_path / "c.json", cfg, f"bench {name}")
    assert resolve(cls, ["--config", str(path)], f"bench {name}") == cfg
    assert cfg.results_dir == Path("a b")


def test_no_bench_declares_a_flag_by_hand() -> None:
    for path in (ROOT / "bench").glob("*.py"):
        if path.name != "train_worker.py":  # its one positional argument: the point file
            assert "add_argument(" not in path.read_text(), path


def test_errors_are_one_line_with_the_program_name(capsys) -> None:
    bad = ["--duration", "0", "--repo", "nowhere"]
    assert cli.main(["bench", "soak", *bad]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("ncf bench soak: error: --duration 0.0, ")
    assert cli.main(["bench", "soak", "--duration", "x"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("ncf bench soak: error: argument --duration")
    assert cli.main(["bench", "nothing"]) == 2
    assert "unknown bench 'nothing'" in capsys.readouterr().err
    assert entry.main(soak, bad) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("python -m ncf.bench.soak: error: --duration 0.0, ")
    assert entry.main("ncf.bench.etl", ["--input", "no.csv"]) == 2
    assert capsys.readouterr().err.startswith("python -m ncf.bench.etl: error: no.csv not found")


@pytest.mark.parametrize("module", MODULES)
def test_every_bench_module_runs_through_the_entry(module: str, capsys) -> None:
    mod = importlib.import_module(module)
    assert not hasattr(mod, "main"), f"{module} has its own main(); use ncf.bench.entry"
    assert "sys.exit(entry.main(sys.modules[__name__]))" in Path(mod.__file__).read_text()
    with pytest.raises(SystemExit) as done:
        entry.main(mod, ["--help"])
    assert done.value.code == 0
    assert capsys.readouterr().out.startswith(f"usage: python -m {module} ")


def test_results_are_written_with_their_plot(tmp_path: Path) -> None:
    rows = [{"x": 1, "y": 2.0, "s": "a"}, {"x": 2, "y": 3.0, "s": "a"}]
    plot = entry.Plot(x="x", y="y", series=("s",), title="t")
    results = entry.Results("demo", rows, ["x", "y"], "Demo", tmp_path, {"k": 1}, plot)
    payload = entry.write(results, "ncf bench demo --x 'a b'")
    assert payload["k"] == 1 and payload["rows"] == rows
    assert "; `ncf bench demo --x 'a b'`_" in (tmp_path / "demo.md").read_text()
    assert (tmp_path / "demo.png").read_bytes()[:4] == b"\x89PNG"
    entry.write(entry.Results("bare", rows, ["x"], "Bare", tmp_path, plot=plot), "c", plot=False)
    assert not (tmp_path / "bare.png").exists()


def test_results_replace_only_an_earlier_bench_result(tmp_path: Path) -> None:
    rows = [{"x": 1}]
    entry.write(entry.Results("demo", rows, ["x"], "Demo", tmp_path), "c")
    entry.write(entry.Results("demo", [{"x": 2}], ["x"], "Demo", tmp_path), "c")  # its own: fine
    assert json.loads((tmp_path / "demo.json").read_text())["rows"] == [{"x": 2}]
    (tmp_path / "notes.md").write_text("mine")
    with pytest.raises(FileExistsError, match=r"notes.md is not a result of `ncf bench`"):
        entry.write(entry.Results("notes", rows, ["x"], "Notes", tmp_path), "c")
    (tmp_path / "other.json").write_text('{"mine": true}')
    with pytest.raises(FileExistsError, match=r"other.json is not a result of `ncf bench`"):
        entry.write(entry.Results("other", rows, ["x"], "Other", tmp_path), "c")
    assert (tmp_path / "notes.md").read_text() == "mine" and not (tmp_path / "notes.json").exists()


def test_a_bench_is_refused_before_it_measures_over_files_it_did_not_write(tmp_path, capsys):
    (tmp_path / "inference.md").write_text("mine")
    code = entry.main("ncf.bench.inference", _tiny_inference(tmp_path))
    err = capsys.readouterr().err
    assert code == 2 and "inference.md is not a result of `ncf bench`" in err, err
    assert (tmp_path / "inference.md").read_text() == "mine"
    assert not (tmp_path / "inference.json").exists()
