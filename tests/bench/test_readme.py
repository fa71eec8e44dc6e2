"""README results section: only the text between the markers is replaced, clear errors otherwise."""

from __future__ import annotations

from pathlib import Path

import pytest

from ncf import cli
from ncf.bench import cli as bench_cli
from ncf.bench.readme import END, START, replace_section, section, update_readme
from ncf.core.config import resolve

README = f"# Title\n\nintro\n\n{START}\nold results\n{END}\n\n## After\nkept\n"


def test_replace_section_keeps_everything_outside_the_markers() -> None:
    out = replace_section(README, "new table")
    assert out == f"# Title\n\nintro\n\n{START}\nnew table\n{END}\n\n## After\nkept\n"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("no markers at all", "found 0 and 0"),
        (f"{START}\n{START}\n{END}", "found 2 and 1"),
        (f"{START}\nonly the start", "found 1 and 0"),
        (f"{END}\nx\n{START}", "comes before"),
    ],
)
def test_missing_or_misordered_markers_fail(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        replace_section(text, "body", "X.md")


def test_section_orders_results_and_links_plots(tmp_path: Path) -> None:
    res = tmp_path / "bench" / "results"
    res.mkdir(parents=True)
    for name in ("triton", "zeta", "etl"):
        (res / f"{name}.md").write_text(f"#### {name}\n\n| a |\n|---|\n| 1 |\n")
    (res / "triton.png").write_bytes(b"\x89PNG")
    text = section(res, tmp_path)
    assert text.index("#### etl") < text.index("#### triton") < text.index("#### zeta")
    assert "![triton](bench/results/triton.png)" in text
    assert "etl.png" not in text
    assert "make bench" in section(tmp_path / "empty", tmp_path)


def test_update_readme_rewrites_once_and_cli_reports_bad_readme(tmp_path: Path, capsys) -> None:
    readme, res = tmp_path / "README.md", tmp_path / "res"
    res.mkdir()
    (res / "inference.md").write_text("#### inference\n\n| x |\n|---|\n| 2 |\n")
    readme.write_text(README)
    assert update_readme(readme, res) is True
    text = readme.read_text()
    assert "| 2 |" in text and "old results" not in text and text.endswith("## After\nkept\n")
    assert update_readme(readme, res) is False  # idempotent
    broken = tmp_path / "BROKEN.md"
    broken.write_text("no markers")
    assert cli.main(["bench", "readme", "--readme", str(broken), "--results-dir", str(res)]) == 2
    assert "BROKEN.md: expected exactly one" in capsys.readouterr().err
    assert broken.read_text() == "no markers"


def test_all_plan_quick_never_touches_committed_results(tmp_path: Path) -> None:
    def plan(*argv: str) -> bench_cli.Plan:
        return bench_cli.plan_from(resolve(bench_cli.AllConfig, argv, "bench all"))

    quick = plan("--quick")
    assert quick.scale == 0.01 and quick.readme is None
    assert quick.results == Path("work/bench/quick/results")
    full = plan()
    assert full.ratings == Path("data/synth/ml20m/ratings.csv") and full.readme == Path("README.md")
    steps = bench_cli.bench_configs(full, skip=["etl"])
    assert [n for n, _ in steps] == ["train", "inference", "triton", "soak"]
    assert all(cfg.results_dir == full.results for _, cfg in steps if cfg is not None)
    assert dict(steps)["train"].data == full.etl
    with pytest.raises(ValueError, match="--scale -1"):
        plan("--scale", "-1")
