"""`ncf train --config FILE`: the layers preset < file < flags, presets as files, bad files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ncf.models import presets, train
from ncf.models.presets import PRESETS, TrainConfig, read_config_file, resolve, write_config_file
from tests.models.conftest import parse


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_is_expressible_as_a_config_file(name: str, tmp_path: Path):
    path = tmp_path / f"{name}.json"
    write_config_file(path, PRESETS[name], about={"preset": name})
    assert resolve("dle", {"config": path}) == resolve(name, {})


def test_file_overrides_the_preset_and_flags_override_the_file(tmp_path: Path):
    path = tmp_path / "c.json"
    write_config_file(path, {"lr": 0.003, "factors": 16, "mlp_layers": [32, 16]})
    args = parse(train, ["--data", "d", "--out", "o", "--preset", "small", "--config", path])
    cfg = presets.resolve(args.preset, vars(args))
    small_epochs = PRESETS["small"]["epochs"]  # from the preset: not in the file
    assert (cfg.lr, cfg.factors, cfg.mlp_layers, cfg.epochs) == (0.003, 16, [32, 16], small_epochs)
    args = parse(train, ["--data", "d", "--out", "o", "--config", path, "--lr", "0.1"])
    assert presets.resolve(args.preset, vars(args)).lr == 0.1


def test_ints_are_accepted_for_float_fields(tmp_path: Path):
    path = tmp_path / "c.json"
    write_config_file(path, {"lr": 1, "dropout": 0})
    assert read_config_file(path) == {"lr": 1.0, "dropout": 0.0}


@pytest.mark.parametrize(
    ("doc", "match"),
    [
        (
            {"format": presets.CONFIG_FORMAT, "config": {"learning_rate": 0.1}},
            "unknown setting 'learning_rate'",
        ),
        ({"format": presets.CONFIG_FORMAT, "config": {"lr": "0.1"}}, "lr='0.1' must be float"),
        ({"format": presets.CONFIG_FORMAT, "config": {"epochs": 2.5}}, "epochs=2.5 must be int"),
        ({"format": presets.CONFIG_FORMAT, "config": {"epochs": True}}, "epochs=True must be int"),
        ({"format": presets.CONFIG_FORMAT, "config": {"mlp_layers": [64, "32"]}}, "mlp_layers"),
        ({"config": {"lr": 0.1}}, 'needs {"format"'),
        ({"format": presets.CONFIG_FORMAT, "config": {}, "lr": 0.1}, "unknown keys \\['lr'\\]"),
        ({"format": presets.CONFIG_FORMAT, "config": {"model": "gmf"}}, "--model 'gmf'"),
    ],
)
def test_bad_files_name_the_file_and_the_setting(doc: dict, match: str, tmp_path: Path):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(ValueError, match=match) as info:
        resolve("dle", {"config": path})
    if "--model" not in match:
        assert str(path) in str(info.value)


def test_missing_and_non_json_files(tmp_path: Path):
    with pytest.raises(FileNotFoundError, match="no such file"):
        read_config_file(tmp_path / "nope.json")
    (tmp_path / "x.json").write_text("{lr: 1}")
    with pytest.raises(ValueError, match="x.json: not JSON"):
        read_config_file(tmp_path / "x.json")


def test_model_kind_and_mf_settings_resolve(tmp_path: Path):
    cfg = resolve("mf-small", {"l2": 0.5})
    assert cfg.model == "mf" and cfg.l2 == 0.5
    mc = cfg.model_config(10, 20)
    assert type(mc).__name__ == "MFConfig" and (mc.factors, mc.l2) == (cfg.factors, 0.5)
    assert type(TrainConfig().model_config(10, 20)).__name__ == "NeuMFConfig"
