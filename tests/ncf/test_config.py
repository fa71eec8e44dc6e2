"""The typed-config machinery: layers, type checks, the one file format, one-line parse errors."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Literal

import pytest

from ncf.core.config import (
    FORMAT,
    TRAIN_FORMAT_V0,
    Config,
    ParseError,
    flag,
    merge,
    read_config,
    resolve,
    setting,
    write_config,
)


@dataclass
class Inner(Config):
    """Inner settings."""

    lr: float = setting(0.5, help="learning rate", alias="-l")
    widths: list[int] = setting(default_factory=lambda: [4, 2], alias="--layers", help="widths")


@dataclass
class Outer(Config):
    """A stage."""

    PRE_FIELDS: ClassVar[tuple[str, ...]] = ("preset",)
    data: Path | None = setting(None, help="input")
    preset: str = setting("base", help="preset", choices=["base", "fast"])
    mode: Literal["a", "b"] = setting("a", help="mode")
    amp: bool = flag(False, help="amp")
    tf32: bool = flag(True, help="tf32")
    inner: Inner = field(default_factory=Inner)

    @classmethod
    def base(cls, chosen):
        return {"inner": {"lr": 0.25}, "mode": "b"} if chosen.get("preset") == "fast" else {}

    def check(self) -> None:
        if self.inner.lr <= 0:
            raise ValueError(f"--lr {self.inner.lr}: must be > 0")


def test_defaults_then_flags():
    cfg = resolve(
        Outer, ["--data", "d", "-l", "0.1", "--layers", "8", "3", "--amp", "--no-tf32"], "x"
    )
    assert cfg == Outer(data=Path("d"), amp=True, tf32=False, inner=Inner(lr=0.1, widths=[8, 3]))


def test_layers_preset_then_file_then_flags(tmp_path):
    # the preset sets lr 0.25 and mode b; the file sets lr 0.2; the flag sets mode a
    path = tmp_path / "c.json"
    path.write_text(
        json.dumps(
            {"format": FORMAT, "stage": "x", "config": {"preset": "fast", "inner": {"lr": 0.2}}}
        )
    )
    cfg = resolve(Outer, ["--config", str(path), "--mode", "a"], "x")
    assert (cfg.preset, cfg.mode, cfg.inner.lr, cfg.inner.widths) == ("fast", "a", 0.2, [4, 2])
    # the preset given as a flag wins over the file's
    assert resolve(Outer, ["--config", str(path), "--preset", "base"], "x").mode == "a"


def test_written_config_reproduces_the_resolved_one(tmp_path):
    cfg = resolve(Outer, ["--preset", "fast", "--data", "d", "--layers", "1"], "x")
    path = write_config(tmp_path / "c.json", cfg, "x", about={"why": "test"})
    doc = json.loads(path.read_text())
    assert doc["format"] == FORMAT and doc["stage"] == "x" and doc["about"] == {"why": "test"}
    assert doc["config"]["data"] == "d" and None not in doc["config"].values()
    assert resolve(Outer, ["--config", str(path)], "x") == cfg


@pytest.mark.parametrize(
    "config, match",
    [
        ({"bogus": 1}, "unknown setting 'bogus'"),
        ({"inner": {"lr": "fast"}}, "lr='fast': must be float"),
        ({"amp": 1}, "amp=1: must be bool"),
        ({"mode": "c"}, r"must be one of \['a', 'b'\]"),
        ({"inner": {"widths": 3}}, "must be a list"),
        ({"inner": 3}, "must be an object of Inner settings"),
    ],
)
def test_a_bad_config_file_value_is_named(tmp_path, config, match):
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"format": FORMAT, "stage": "x", "config": config}))
    with pytest.raises(ValueError, match=match):
        resolve(Outer, ["--config", str(path)], "x")


def test_ints_pass_as_floats_and_check_runs(tmp_path):
    path = write_config(tmp_path / "c.json", Outer(), "x")
    doc = json.loads(path.read_text())
    doc["config"]["inner"]["lr"] = 1  # JSON writes 1.0 as 1 in places
    path.write_text(json.dumps(doc))
    assert resolve(Outer, ["--config", str(path)], "x").inner.lr == 1.0
    with pytest.raises(ValueError, match="--lr -1.0: must be > 0"):
        resolve(Outer, ["-l", "-1"], "x")


@pytest.mark.parametrize(
    "argv, match",
    [
        (["-l", "abc"], "invalid float value: 'abc'"),
        (["--mode", "z"], "invalid choice: 'z'"),
        (["--bogus"], "unrecognized arguments: --bogus"),
    ],
)
def test_parse_errors_are_one_line(argv, match):
    with pytest.raises(ParseError, match=match) as info:
        resolve(Outer, argv, "x", prog="ncf x")
    assert "\n" not in str(info.value) and "ncf x --help" in str(info.value)


def test_config_file_format_and_stage_are_checked(tmp_path):
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"format": FORMAT, "stage": "etl", "config": {}}))
    with pytest.raises(ValueError, match="config of `ncf etl`, not train"):
        read_config(path, "train")
    path.write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        read_config(path, "train")
    with pytest.raises(FileNotFoundError, match="no such file"):
        read_config(tmp_path / "missing.json", "train")
    # what `ncf tune` wrote before every stage had a config is still a train config
    path.write_text(json.dumps({"format": TRAIN_FORMAT_V0, "config": {"lr": 0.1}, "about": {}}))
    assert read_config(path, "train") == {"lr": 0.1}
    with pytest.raises(ValueError, match="needs"):
        read_config(path, "etl")


def test_merge_is_deep():
    assert merge({"a": {"b": 1, "c": 2}, "d": 1}, {"a": {"b": 3}}) == {
        "a": {"b": 3, "c": 2},
        "d": 1,
    }


def test_help_shows_resolved_defaults(capsys):
    with pytest.raises(SystemExit) as info:
        resolve(Outer, ["--preset", "fast", "--help"], "x")
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert "--no-tf32" in out and "(default: 0.25)" in out and "--config FILE" in out
