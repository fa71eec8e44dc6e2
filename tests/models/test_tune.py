"""`ncf tune`: a real Optuna search on planted data, SIGKILLed mid-trial and resumed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from ncf.core.config import FORMAT
from ncf.models import presets, train, tune
from tests.models.conftest import parse
from tests.models.etl_data import planted_ratings
from tests.models.valid_split import write_valid_etl_dir

TRIALS = 4
# All trials random and unpruned (startup 10 > TRIALS): the trial count is exact.
FLAGS = ["--model", "mf", "--epochs", "3", "--eval-batch-size", "4096", "--threads", "1",
         "--device", "cpu", "--startup-trials", "10", "--seed", "3"]  # fmt: skip


@pytest.fixture(scope="module")
def valid_etl(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_valid_etl_dir(planted_ratings(), tmp_path_factory.mktemp("etl") / "valid")


def _tune(etl: Path, out: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "ncf.cli", "tune", "--data", str(etl), "--out", str(out),
           "--trials", str(TRIALS), *FLAGS]  # fmt: skip
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)


def _trials(out: Path) -> list:
    study = optuna.load_study(
        study_name="ncf-tune-mf", storage=f"sqlite:///{out / tune.STUDY_FILE}"
    )
    return sorted(study.get_trials(), key=lambda t: t.number)


def test_killed_search_resumes_to_the_requested_trials(valid_etl: Path, tmp_path: Path):
    out = tmp_path / "tune"
    killed = _tune(valid_etl, out, {**os.environ, tune.KILL_ENV: "2"})
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    states = [t.state for t in _trials(out)]
    assert states == [TrialState.COMPLETE, TrialState.COMPLETE, TrialState.RUNNING]
    assert killed.stdout.count("complete: valid HR@10") == 2  # a progress line per trial
    first_best = json.loads((out / tune.BEST_FILE).read_text())
    assert first_best["about"]["trials"]["complete"] == 2

    resumed = _tune(valid_etl, out)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "trials [2] were cut short" in resumed.stdout
    trials = _trials(out)
    complete = [t for t in trials if t.state == TrialState.COMPLETE]
    assert len(complete) == TRIALS and [t.state for t in trials].count(TrialState.FAIL) == 1
    retry = next(t for t in trials if t.user_attrs.get("retry_of") == 2)
    assert retry.params == trials[2].params and retry.state == TrialState.COMPLETE

    best = json.loads((out / tune.BEST_FILE).read_text())
    assert best["format"] == first_best["format"] == FORMAT and best["stage"] == "train"
    about = best["about"]
    assert about["trials"]["complete"] == TRIALS and about["trials"]["target"] == TRIALS
    assert about["search_space"] == tune.SEARCH_SPACES["mf"]
    top = max(complete, key=lambda t: t.value)
    assert about["best_value"] == top.value and best["config"]["hp"]["lr"] == top.params["lr"]
    assert best["config"]["hp"]["epochs"] == top.user_attrs["best_epoch"] + 1 <= 3
    assert (out / tune.PLOT_FILE).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    again = _tune(valid_etl, out)  # already done: runs nothing
    assert again.returncode == 0 and f"{TRIALS}/{TRIALS} trials done; 0 to run" in again.stdout
    assert len(_trials(out)) == len(trials)

    run = tmp_path / "train"
    argv = ["--data", valid_etl, "--out", run, "--config", out / tune.BEST_FILE, "--threads", "1",
            "--device", "cpu", "--no-progress"]  # fmt: skip
    assert train.run(parse(train, argv)) == 0
    config = json.loads((run / "metrics.json").read_text())["config"]
    assert config["model"] == "mf" and config["lr"] == top.params["lr"]


def test_without_a_validation_split_tune_refuses(etl_dir: Path, tmp_path: Path):
    args = parse(tune, ["--data", etl_dir, "--out", tmp_path / "t", *FLAGS])
    with pytest.raises(ValueError, match="tune needs `ncf etl --holdout valid,test`"):
        tune.run(args)


def test_searched_settings_are_not_flags(valid_etl: Path, tmp_path: Path):
    with pytest.raises(ValueError, match="--lr: searched by `ncf tune --model mf`"):
        parse(tune, ["--data", valid_etl, "--out", tmp_path / "t", *FLAGS, "--lr", "0.1"])


def test_the_search_writes_its_resolved_config(valid_etl: Path, tmp_path: Path):
    out = tmp_path / "t"
    assert tune.run(parse(tune, ["--data", valid_etl, "--out", out, "--trials", "1", *FLAGS])) == 0
    doc = json.loads((out / "config.json").read_text())
    assert doc["stage"] == "tune" and None not in doc["config"].values()
    assert doc["config"]["study_name"] == "ncf-tune-mf" and doc["config"]["hp"]["seed"] == 3
    assert parse(tune, ["--config", out / "config.json"]) == tune.TuneConfig.from_dict(
        doc["config"]
    )


def test_a_study_resumes_only_the_same_search(valid_etl: Path, tmp_path: Path, capsys):
    out = tmp_path / "t"
    args = [*FLAGS, "--study-name", "s"]
    assert tune.run(parse(tune, ["--data", valid_etl, "--out", out, "--trials", "1", *args])) == 0
    assert "trial 0 complete" in capsys.readouterr().out
    other = [*args, "--negative-sampling", "approximate"]
    with pytest.raises(ValueError, match="other \\['base_config'\\]"):
        tune.run(parse(tune, ["--data", valid_etl, "--out", out, "--trials", "2", *other]))


def test_validation_split_replaces_the_test_split(valid_etl: Path):
    from ncf.models.data import load_etl

    data = load_etl(valid_etl)
    valid = tune.load_validation(data)
    assert valid.test_users.tolist() == data.test_users.tolist()
    assert (valid.test_items != data.test_items).all()  # the second-latest item, not the latest
    assert valid.eval_negatives.shape == data.eval_negatives.shape
    assert valid.train_items is data.train_items


def test_full_ranking_on_test_also_excludes_the_validation_item(valid_etl: Path, tmp_path: Path):
    from ncf.models import evaluate

    run = tmp_path / "mf"
    argv = ["--data", valid_etl, "--out", run, "--model", "mf", "--epochs", "1", "--threads", "1",
            "--device", "cpu", "--no-progress"]  # fmt: skip
    assert train.run(parse(train, argv)) == 0
    out = tmp_path / "e.json"
    argv = ["--data", valid_etl, "--checkpoint", run / "best.pt", "--full-ranking", "--out", out,
            "--device", "cpu"]  # fmt: skip
    assert evaluate.run(parse(evaluate, argv)) == 0
    # 80 items; 10 training items and 1 validation item known per user: 69 candidates, not 70
    assert json.loads(out.read_text())["full_candidates_per_user"] == pytest.approx(69.0)


def test_enqueue_base_tries_the_preset_itself_once(valid_etl: Path, tmp_path: Path):
    out = tmp_path / "t"
    args = ["--data", valid_etl, "--out", out, *FLAGS, "--preset", "mf-small", "--enqueue-base"]
    assert tune.run(parse(tune, [*args, "--trials", "1"])) == 0
    assert tune.run(parse(tune, [*args, "--trials", "2"])) == 0  # resumed: not queued again
    first, second = _trials(out)
    want = presets.preset_config("mf-small")
    assert first.params == {name: getattr(want, name) for name in tune.SEARCH_SPACES["mf"]}
    assert first.user_attrs["base"] == "mf-small" and second.params != first.params


@pytest.mark.parametrize("preset", sorted(presets.PRESETS))
def test_every_preset_can_be_queued_as_a_trial(preset: str):
    """`--enqueue-base` (and `ncf run --tune`) queue the preset's own values: every one of them must
    be a value the search can propose, or Optuna refuses the trial (a categorical's choices)."""
    base = presets.preset_config(preset)
    space = tune.space_holding(tune.SEARCH_SPACES[base.model], base)
    study = optuna.create_study(direction="maximize")
    want = {name: getattr(base, name) for name in space}
    study.enqueue_trial(want)
    study.optimize(lambda t: float(tune.suggest(t, space) == want), n_trials=1)
    assert study.trials[0].state == TrialState.COMPLETE and study.trials[0].value == 1.0


LR_LOW = tune.SEARCH_SPACES["neumf"]["lr"]["low"]
NEG_HIGH = tune.SEARCH_SPACES["neumf"]["negatives"]["high"]


def test_space_holding_adds_the_base_value_where_the_space_lacks_it():
    base = presets.preset_config("small")  # 128 factors, not among SEARCH_SPACES's choices
    space = tune.space_holding(tune.SEARCH_SPACES["neumf"], base)
    assert space["factors"]["choices"] == [8, 16, 32, 64, 128]
    assert tune.SEARCH_SPACES["neumf"]["factors"]["choices"] == [8, 16, 32, 64]  # not changed
    for name in ("lr", "negatives", "dropout", "batch_size"):  # the base's value already inside
        assert space[name] == tune.SEARCH_SPACES["neumf"][name]
    assert tune.space_holding(space, base) == space  # already there: the same space
    wide = tune.space_holding(tune.SEARCH_SPACES["neumf"], base.replace(lr=0.05, negatives=1))
    assert (wide["lr"]["low"], wide["lr"]["high"]) == (LR_LOW, 0.05)  # a range stretches to it
    assert (wide["negatives"]["low"], wide["negatives"]["high"]) == (1, NEG_HIGH)


def test_a_base_no_search_can_hold_is_refused_before_the_search(valid_etl: Path, tmp_path: Path):
    """MF on DLE's defaults has l2 0, which no log range holds: one line, nothing written."""
    out = tmp_path / "t"
    args = ["--data", valid_etl, "--out", out, "--trials", "1", *FLAGS, "--enqueue-base"]
    with pytest.raises(ValueError, match=r"^--enqueue-base: the base's --l2 0.0 cannot be tried"):
        tune.run(parse(tune, args))
    assert not out.exists()


def test_the_small_preset_queued_first_is_its_first_trial(valid_etl: Path, tmp_path: Path):
    """`ncf run --tune N`'s search (tests/ncf/test_run_config.py: `small`, --enqueue-base): its
    first trial is the preset itself, 128 factors included; without --enqueue-base the study's
    space is SEARCH_SPACES's own."""
    out = tmp_path / "t"
    args = ["--data", valid_etl, "--model", "neumf", "--preset", "small", "--epochs", "1",
            "--eval-batch-size", "4096", "--threads", "1", "--device", "cpu",
            "--startup-trials", "10", "--seed", "3", "--trials", "1"]  # fmt: skip
    assert tune.run(parse(tune, [*args, "--out", out, "--enqueue-base"])) == 0
    (trial,) = optuna.load_study(
        study_name="ncf-tune-neumf", storage=f"sqlite:///{out / tune.STUDY_FILE}"
    ).get_trials()
    want = presets.preset_config("small")
    assert trial.params == {name: getattr(want, name) for name in tune.SEARCH_SPACES["neumf"]}
    best = json.loads((out / tune.BEST_FILE).read_text())
    assert best["config"]["hp"]["factors"] == 128
    assert best["about"]["search_space"]["factors"]["choices"] == [8, 16, 32, 64, 128]
    plain = tmp_path / "plain"
    assert tune.run(parse(tune, [*args, "--out", plain])) == 0
    about = json.loads((plain / tune.BEST_FILE).read_text())["about"]
    assert about["search_space"] == tune.SEARCH_SPACES["neumf"]


def test_out_must_be_a_search_or_absent(valid_etl: Path, tmp_path: Path):
    """A search writes config.json, best.json, trials.png into OUT: never into another's folder."""
    out = tmp_path / "mine"
    out.mkdir()
    (out / "config.json").write_text("{}")  # a user's file of a name the search writes
    with pytest.raises(FileExistsError, match=r"not written by this project \(config.json\)"):
        tune.run(parse(tune, ["--data", valid_etl, "--out", out, "--trials", "1", *FLAGS]))
    assert [p.name for p in out.iterdir()] == ["config.json"]
    with pytest.raises(FileExistsError, match="replaces only its own output"):
        tune.run(parse(tune, ["--data", valid_etl, "--out", valid_etl, "--trials", "1", *FLAGS]))
    (out / "config.json").unlink()
    tune.check_out(out)  # empty: used
    (out / tune.LOCK_FILE).touch()  # a search killed before it wrote config.json: resumed
    tune.check_out(out)


def test_patience_ends_a_trial_and_the_cost_is_printed_first(
    valid_etl: Path, tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
):
    """--patience 1 with learning rates too small to move the HR: every trial stops after its
    second epoch of 6 (the first stays the best), and the worst-case cost line precedes them."""
    tiny = {**tune.SEARCH_SPACES["mf"], "lr": {"type": "float", "low": 1e-9, "high": 2e-9}}
    monkeypatch.setitem(tune.SEARCH_SPACES, "mf", tiny)
    out = tmp_path / "t"
    args = ["--data", valid_etl, "--out", out, *FLAGS, "--epochs", "6", "--patience", "1",
            "--trials", "2"]  # fmt: skip
    assert tune.run(parse(tune, args)) == 0
    printed = capsys.readouterr().out
    assert printed.index("ncf tune: cost: 2 trials x at most 6 epochs") < printed.index("trial 0")
    assert [len(t.intermediate_values) for t in _trials(out)] == [2, 2]


@pytest.mark.parametrize(("threads", "minutes"), [(1, 8), (2, 4)])
def test_cost_line_is_the_worst_case(threads: int, minutes: int):
    base = presets.preset_config("small", epochs=10)
    space = {"negatives": {"type": "int", "low": 2, "high": 10}}  # 6 negatives on average
    rate = tune.CPU_SAMPLES_PER_S_PER_THREAD
    # 8 trials x 10 epochs x 6 * rate samples (rows x 7), at rate x threads samples/s
    line = tune.cost_line(rate * 6 // 7, base, space, trials=8, threads=threads)
    assert f"at most {minutes} min on {threads} CPU" in line, line
