"""``ncf run``'s config: the stage configs it builds, its config file, and a rerun from it."""

from __future__ import annotations

import datetime
import json
from pathlib import Path
from types import SimpleNamespace

from ncf.cli import main, pipeline
from ncf.cli.pipeline import RunConfig, etl_stage, export_stage, stages
from ncf.core.config import Config, read_config, resolve, write_config
from ncf.core.names import CONFIG_FILE
from ncf.models.evaluate import EvaluateConfig
from ncf.models.train import TrainRunConfig
from ncf.serving.export import ExportConfig
from ncf.workflows.etl import EtlConfig


def test_the_etl_gets_the_run_settings_as_a_config(tmp_path):
    cfg = resolve(RunConfig, ["--eval-negatives", "50", "--seed", "3", "--holdout", "test"], "run")
    etl = etl_stage(cfg, tmp_path / "etl")
    assert isinstance(etl, EtlConfig)
    assert (etl.eval_negatives, etl.seed, etl.holdout, etl.out) == (50, 3, "test", tmp_path / "etl")
    assert etl.min_ratings == cfg.min_ratings and etl.input == cfg.input
    export = export_stage(cfg, tmp_path / "etl", tmp_path / "best.pt")
    assert isinstance(export, ExportConfig) and export.repo == cfg.repo


def test_stages_in_order_and_skip_serving(tmp_path):
    names = [n for n, _, _ in stages(RunConfig(), tmp_path / "etl", tmp_path / "run")]
    assert names == ["etl", "train", "train-mf", "evaluate", "evaluate-mf", "export", "serve+bench"]
    quick = stages(RunConfig(skip_serving=True), tmp_path / "etl", tmp_path / "run")
    assert [n for n, _, _ in quick][-1] == "export"


def test_train_and_evaluate_get_their_configs(tmp_path):
    cfg = RunConfig(epochs=2, seed=5)
    mf = pipeline.train_stage(cfg, tmp_path / "etl", tmp_path / "train", "mf-small")
    assert isinstance(mf, TrainRunConfig) and (mf.preset, mf.data) == ("mf-small", tmp_path / "etl")
    assert (mf.hp.model, mf.hp.epochs, mf.hp.seed) == ("mf", 2, 5)
    assert mf.hp.lr == TrainRunConfig.from_preset("mf-small").hp.lr  # the preset's, not DLE's
    default = pipeline.train_stage(RunConfig(), tmp_path / "etl", tmp_path / "t", "small")
    assert default.hp.epochs == TrainRunConfig.from_preset("small").hp.epochs
    ev = pipeline.evaluate_stage(tmp_path / "etl", tmp_path / "best.pt", tmp_path / "e.json")
    assert isinstance(ev, EvaluateConfig) and ev.full_ranking and ev.out == tmp_path / "e.json"
    bench = pipeline.bench_stage(RunConfig(bench_seconds=0.3), tmp_path / "run")
    assert bench.duration == 0.3 and bench.results_dir == tmp_path / "run" / "bench"


def test_tune_runs_before_training_and_training_takes_its_best(tmp_path):
    cfg = RunConfig(tune=3, seed=4, epochs=7)
    steps = stages(cfg, tmp_path / "etl", tmp_path / "run")
    assert [n for n, _, _ in steps][:3] == ["etl", "tune", "train"]
    tune_cfg = steps[1][2]()
    assert (tune_cfg.trials, tune_cfg.startup_trials, tune_cfg.enqueue_base) == (3, 3, True)
    assert (tune_cfg.hp.seed, tune_cfg.hp.epochs, tune_cfg.out) == (4, 7, tmp_path / "run" / "tune")
    assert tune_cfg.hp.lr == TrainRunConfig.from_preset(cfg.preset).hp.lr
    tune_cfg.check()
    best = TrainRunConfig.from_preset("small", data=tmp_path / "elsewhere", epochs=2, lr=0.01)
    write_config(tmp_path / "run" / "tune" / "best.json", best, "train")
    train = steps[2][2]()  # built when it runs: after the search wrote best.json
    assert (train.hp.lr, train.hp.epochs) == (0.01, 2)
    assert (train.data, train.out) == (tmp_path / "etl", tmp_path / "run" / "train")


def test_bad_run_settings_are_one_line(capsys):
    assert main(["run", "--epochs", "0"]) == 2
    assert capsys.readouterr().err.strip() == (
        "ncf run: error: --epochs 0: must be >= 1 (or unset: the preset's)"
    )
    assert main(["run", "--tune", "2", "--holdout", "test"]) == 2
    assert capsys.readouterr().err.strip() == (
        "ncf run: error: --tune 2 needs --holdout valid,test (it searches on validation)"
    )


def test_run_writes_its_resolved_config_and_reruns_from_it(tmp_path, monkeypatch):
    """The stages are replaced by a recorder: what each would be handed, and the run's config."""
    ratings = tmp_path / "ratings.csv"
    ratings.write_text("userId,movieId,rating,timestamp\n")
    handed: list[tuple[str, object]] = []

    def fake_run(self, name, stage, cfg):
        handed.append((name, cfg))
        self.records.append({"stage": name, "command": f"ncf {stage} --config x", "seconds": 0})

    monkeypatch.setattr(pipeline.Runner, "run", fake_run)
    monkeypatch.setattr(pipeline, "write_report", lambda *a, **k: {})
    argv = ["--input", str(ratings), "--runs", str(tmp_path / "runs"), "--skip-serving",
            "--eval-negatives", "7"]  # fmt: skip
    assert main(["run", *argv]) == 0
    (run_dir,) = (tmp_path / "runs").iterdir()
    values = read_config(run_dir / CONFIG_FILE, "run")
    assert values["eval_negatives"] == 7 and values["etl_dir"] == "work/etl/" + tmp_path.name + (
        "-valid-test"
    )
    first = list(handed)
    handed.clear()
    monkeypatch.setattr(pipeline, "_dt", SimpleNamespace(datetime=_Later))
    assert main(["run", "--config", str(run_dir / CONFIG_FILE)]) == 0
    second = next(p for p in (tmp_path / "runs").iterdir() if p != run_dir)
    # The same stages with the same settings, in the new run directory.
    assert _plain(handed).replace(second.name, run_dir.name) == _plain(first)


def _plain(handed: list) -> str:
    return json.dumps([(n, c.to_dict() if isinstance(c, Config) else c) for n, c in handed])


class _Later:
    """A clock one day on: the rerun gets its own run directory."""

    @staticmethod
    def now() -> datetime.datetime:
        return datetime.datetime.now() + datetime.timedelta(days=1)


def test_the_old_evaluation_negatives_flag_is_refused(capsys):
    assert main(["run", "--negatives", "3"]) == 2
    assert "unrecognized arguments" in capsys.readouterr().err


def test_config_file_of_another_stage_is_refused(tmp_path, capsys):
    from ncf.core.config import write_config

    path = write_config(tmp_path / "c.json", EtlConfig(), "etl")
    assert main(["run", "--config", str(path)]) == 2
    assert "is the config of `ncf etl`" in capsys.readouterr().err
    assert json.loads(Path(path).read_text())["stage"] == "etl"
