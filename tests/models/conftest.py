"""Fixtures of the training tests: small ETL directories and in-process `ncf train` runs."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from ncf.core.config import Config, resolve
from tests.models.etl_data import planted_ratings, write_etl_dir


@pytest.fixture(scope="session")
def etl_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """120 users x 80 items in 4 planted clusters, 12 interactions each, 20 eval negatives."""
    return write_etl_dir(
        planted_ratings(), tmp_path_factory.mktemp("etl") / "planted", negatives=20
    )


@pytest.fixture(autouse=True)
def _restore_torch_globals():
    """`ncf train` in-process sets threads and deterministic mode globally: undo it after each test."""
    threads = torch.get_num_threads()
    deterministic = torch.are_deterministic_algorithms_enabled()
    yield
    torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(deterministic)


def parse(module, argv: list[str]) -> Config:
    """The config of an `ncf` stage module (``ncf.models.train``: ``ncf train``), resolved from
    ``argv`` as its subcommand would."""
    argv = [str(a) for a in argv]
    return resolve(module.CONFIG, argv, module.__name__.rsplit(".", 1)[-1])


# Fast settings for the planted data: small batches, a few epochs, one thread, no progress bar.
FAST = [
    "--batch-size",
    "256",
    "--eval-batch-size",
    "4096",
    "--lr",
    "0.01",
    "--threads",
    "1",
    "--no-progress",
    "--device",
    "cpu",
]
