"""bench/scaling.py: the step-time model of docs/SCALING.md against hand-computed cases."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import pytest

from ncf.bench import scaling
from ncf.models.neumf import NeuMF, NeuMFConfig

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("ranks", "factor"), [(1, 0.0), (2, 1.0), (4, 1.5), (8, 1.75), (64, 1.96875)]
)
def test_ring_factor(ranks: int, factor: float):
    assert scaling.ring_factor(ranks) == factor


def test_allreduce_link_and_compute_by_hand():
    # 100 MB over 4 ranks at 50 GB/s: 1.5 x 100e6 / 50e9 = 3 ms; one rank sends nothing
    assert scaling.allreduce_seconds(100e6, 4, 50e9) == pytest.approx(3e-3)
    assert scaling.allreduce_seconds(100e6, 1, 50e9) == 0.0
    # inside a node NVLink; across nodes the slower of NVLink and the node's NICs together
    assert scaling.ring_link(8, 8, 450e9, 50e9, 8) == 450e9
    assert scaling.ring_link(16, 8, 450e9, 50e9, 8) == 400e9
    assert scaling.ring_link(16, 8, 450e9, 50e9, 1) == 50e9
    # c + (t1 - c) / p = 2 + 8 / 4
    assert scaling.compute_seconds(10.0, 2.0, 4) == 4.0
    # the fit inverts it: a 4-GPU step of 4 + 0.5 (all-reduce) gives c = 2
    assert scaling.fit_replicated(10.0, 4.5, 4, 0.5) == pytest.approx(2.0)


def test_samples_per_second_by_hand():
    # compute 0.002 + 0.008 / 8 = 0.003 s; all-reduce 1.75 x 4e6 B / 400e9 B/s = 1.75e-5 s
    setup = scaling.Setup(batch=1000, one_gpu_step=0.01, replicated=0.002, params=10**6,
                          bytes_per_param=4)  # fmt: skip
    assert scaling.samples_per_second(setup, 8, 400e9) == pytest.approx(1000 / 0.0030175)


def test_alltoall_seconds_by_hand():
    # one node of 8: 1000 / 8 samples a rank, 7/8 of them remote, 100 B each, all over NVLink
    assert scaling.alltoall_seconds(1000, 8, 100, 1e9, 1e8, 8) == pytest.approx(10_937.5 / 1e9)
    # two nodes: 1000 / 16 x 15/16 x 100 = 5,859.375 B; 8 of the 15 other ranks are off the node
    # (through the NIC at 1e8 B/s), 7 on it (NVLink at 1e9 B/s): the NIC is the slower
    assert scaling.alltoall_seconds(1000, 16, 100, 1e9, 1e8, 8) == pytest.approx(
        5_859.375 * 8 / 15 / 1e8
    )
    assert scaling.alltoall_seconds(1000, 1, 100, 1e9, 1e8, 8) == 0.0
    # no repeated id: 4 tables x (8-byte id + 4 bytes x width x 2 (row, gradient)), widths
    # 64 + 64 + 128 + 128
    assert scaling.alltoall_bytes_bound() == 4 * 8 + 8 * 384 == 3104
    # NeuMF's tables at ML-20m: (138,496 + 26,747) rows x (64 + 128)
    assert scaling.table_params(138_496, 26_747) == 165_243 * 192


def test_neumf_params_counts_the_real_model():
    cfg = NeuMFConfig(num_users=7, num_items=5, factors=4, mlp_layers=[8, 6, 2])
    real = sum(p.numel() for p in NeuMF(cfg).parameters())
    assert scaling.neumf_params(7, 5, 4, (8, 6, 2)) == real
    # ML-20m with Categorify's reserved ids, by hand: (138,496 + 26,747) x (64 + 128) embeddings,
    # MLP 256x256+256, 256x128+128, 128x64+64, output 128+1
    assert scaling.neumf_params(138_496, 26_747) == 165_243 * 192 + 65_792 + 32_896 + 8_256 + 129


def test_sampler_bytes_by_hand():
    assert scaling.sampler_bytes(10, 16, 12, ranks=4) == {
        "bitmap": 20.0, "sorted": 96, "bitmap_sharded": 5.0, "sorted_sharded": 24.0
    }  # fmt: skip
    # the expanded set: a 235 GB bitmap, 9.8 GB of keys; sharded over 64 ranks 3.7 GB / 153 MB
    big = scaling.sampler_bytes(**scaling.EXPANDED, ranks=64)
    assert big["bitmap"] == pytest.approx(235.04e9, rel=1e-4)
    assert big["sorted_sharded"] == pytest.approx(153.0e6, rel=1e-3)


def test_epoch_plan_bytes_by_hand():
    # 10 positives, 4 negatives each: pairs 2 x 4 x 10, negatives 4 x 40, int32 order 4 x 50
    assert scaling.epoch_plan_bytes(10, 4) == 80 + 160 + 200
    # from 2**31 samples on the order is int64
    p = 2**31 // 5 + 1
    assert scaling.epoch_plan_bytes(p, 4) == 8 * p + 16 * p + 8 * 5 * p


def test_the_model_predicts_dle_16_gpus_from_its_1_and_8_within_5_percent():
    for row in scaling.validate_on_dle():
        assert row["predicted_16"] == pytest.approx(row["published_16"], rel=0.05)


def test_measured_bytes_per_parameter_and_the_tables_of_the_doc():
    _, per_param = scaling._measured(scaling.RESULTS_DIR)
    assert per_param["none"] == pytest.approx(4.0, rel=1e-3)  # fp32 gradients
    assert per_param["fp16"] == pytest.approx(2.0, rel=1e-3)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert scaling.run(scaling.CONFIG()) == 0
    doc = (REPO / "docs" / "SCALING.md").read_text()
    missing = [line for line in out.getvalue().splitlines() if line and line not in doc]
    assert missing == [], "docs/SCALING.md is out of date: rerun python -m ncf.bench.scaling"
