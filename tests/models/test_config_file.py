"""`ncf train --config FILE`: the layers preset < file < flags, presets as files, old files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ncf.core.config import FORMAT, TRAIN_FORMAT_V0, resolve, write_config
from ncf.models import evaluate, train, tune
from ncf.models.presets import CPU_MICRO_BATCH, PRESETS, TrainConfig, preset_config
from ncf.models.train import TrainRunConfig


def _file(path: Path, config: dict, fmt: str = FORMAT) -> Path:
    path.write_text(json.dumps({"format": fmt, "stage": "train", "config": config}))
    return path


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_is_expressible_as_a_config_file(name: str, tmp_path: Path):
    path = _file(tmp_path / f"{name}.json", {"hp": PRESETS[name]})
    via_file = resolve(
        TrainRunConfig, ["--data", "d", "--out", "o", "--config", str(path)], "train"
    )
    assert via_file.hp == preset_config(name)


def test_file_overrides_the_preset_and_flags_override_the_file(tmp_path: Path):
    path = _file(tmp_path / "c.json", {"hp": {"lr": 0.003, "factors": 16, "mlp_layers": [32, 16]}})
    argv = ["--data", "d", "--out", "o", "--preset", "small", "--config", str(path)]
    hp = resolve(TrainRunConfig, argv, "train").hp
    small_epochs = PRESETS["small"]["epochs"]  # from the preset: not in the file
    assert (hp.lr, hp.factors, hp.mlp_layers, hp.epochs) == (0.003, 16, [32, 16], small_epochs)
    argv = ["--data", "d", "--out", "o", "--config", str(path), "-l", "0.1", "--layers", "8", "4"]
    assert resolve(TrainRunConfig, argv, "train").hp.mlp_layers == [8, 4]


def test_an_old_tune_best_json_still_reads(tmp_path: Path):
    # `ncf tune` wrote the hyperparameters flat, in format ncf-train-config/1
    path = _file(tmp_path / "best.json", {**TrainConfig().to_dict(), "lr": 0.02}, TRAIN_FORMAT_V0)
    cfg = resolve(TrainRunConfig, ["--data", "d", "--out", "o", "--config", str(path)], "train")
    assert cfg.hp == TrainConfig(lr=0.02)


def test_the_written_config_reruns_the_same(tmp_path: Path):
    cfg = TrainRunConfig.from_preset("small", data=Path("d"), out=Path("o"), seed=3, amp=True)
    assert (cfg.hp.seed, cfg.hp.epochs, cfg.amp) == (3, PRESETS["small"]["epochs"], True)
    path = write_config(tmp_path / "c.json", cfg, "train")
    doc = json.loads(path.read_text())
    # Every setting is written out; the one unset is the optional starting checkpoint.
    assert {k for k, v in doc["config"].items() if v is None} == {"init_from"}
    assert None not in doc["config"]["hp"].values()
    assert resolve(TrainRunConfig, ["--config", str(path)], "train") == cfg


@pytest.mark.parametrize(
    ("argv", "match"),
    [
        (["--out", "o"], "--data: required"),
        (["--data", "d", "--out", "o", "--epochs", "0"], "--epochs 0: must be >= 1"),
        (["--data", "d", "--out", "o", "--preset", "big"], "--preset 'big'"),
        (["--data", "d", "--out", "o", "--model", "gmf"], "invalid choice: 'gmf'"),
    ],
)
def test_bad_values_name_the_flag(argv: list[str], match: str):
    with pytest.raises(ValueError, match=match):
        resolve(TrainRunConfig, argv, "train")


def test_the_cpu_micro_batch_is_in_the_help(capsys):
    with pytest.raises(SystemExit):
        resolve(TrainRunConfig, ["--help"], "train")
    assert f"{CPU_MICRO_BATCH} on CPU" in " ".join(capsys.readouterr().out.split())


def test_every_stage_of_models_has_a_config_and_run():
    for module in (train, evaluate, tune):
        assert callable(module.run) and not hasattr(module, "add_arguments")
        assert module.CONFIG.__doc__


def test_model_kind_and_mf_settings_resolve():
    cfg = preset_config("mf-small", l2=0.5)
    assert cfg.model == "mf" and cfg.l2 == 0.5
    mc = cfg.model_config(10, 20)
    assert type(mc).__name__ == "MFConfig" and (mc.factors, mc.l2) == (cfg.factors, 0.5)
    assert type(TrainConfig().model_config(10, 20)).__name__ == "NeuMFConfig"
