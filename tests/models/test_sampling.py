"""Training negatives: exact never returns a positive, approximate stays in range, seeded draws repeat."""

from __future__ import annotations

import pytest
import torch

from ncf.models.sampling import (
    BITMAP_FREE_FRACTION,
    PositiveSet,
    bitmap_bytes,
    check_sampleable,
    choose_backend,
    free_memory,
    sample_approximate,
    sample_negatives,
)

N_USERS, N_ITEMS, LO = 50, 40, 3


def _positives(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Random positives; user 7 has every item but one of [LO, N_ITEMS), so exact draws must find it."""
    g = torch.Generator().manual_seed(seed)
    users = torch.randint(0, N_USERS, (600,), generator=g)
    items = torch.randint(LO, N_ITEMS, (600,), generator=g)
    dense = torch.arange(LO, N_ITEMS - 1)
    return torch.cat((users, torch.full_like(dense, 7))), torch.cat((items, dense))


@pytest.mark.parametrize("backend", ["bitmap", "sorted"])
def test_exact_never_returns_a_positive(backend):
    users, items = _positives()
    pos = PositiveSet(users, items, N_USERS, N_ITEMS, backend)
    queries = torch.arange(N_USERS).repeat_interleave(400)
    negs = sample_negatives(
        queries, "exact", pos, (LO, N_ITEMS), torch.Generator().manual_seed(1), chunk=1000
    )
    known = set(zip(users.tolist(), items.tolist(), strict=True))
    hits = [(u, i) for u, i in zip(queries.tolist(), negs.tolist(), strict=True) if (u, i) in known]
    assert hits == []
    assert int(negs.min()) >= LO and int(negs.max()) < N_ITEMS
    assert set(negs[queries == 7].tolist()) == {N_ITEMS - 1}  # the one item user 7 lacks


def test_exact_is_uniform_over_the_non_positives():
    users = torch.zeros(3, dtype=torch.long)
    items = torch.tensor([3, 4, 5])  # user 0 knows items 3-5 of [3, 10): 6, 7, 8, 9 remain
    pos = PositiveSet(users, items, 1, 10)
    negs = sample_negatives(
        torch.zeros(40_000, dtype=torch.long),
        "exact",
        pos,
        (3, 10),
        torch.Generator().manual_seed(0),
    )
    freq = torch.bincount(negs.long(), minlength=10)[6:].double() / negs.numel()
    assert torch.bincount(negs.long(), minlength=10)[:6].sum() == 0
    assert torch.allclose(freq, torch.full((4,), 0.25, dtype=torch.float64), atol=0.01)  # ~6 sigma


def test_approximate_is_in_range_and_may_hit_positives():
    users, items = _positives()
    pos = PositiveSet(users, items, N_USERS, N_ITEMS)
    q = torch.full((5000,), 7)
    negs = sample_approximate(q, (LO, N_ITEMS), torch.Generator().manual_seed(0))
    assert negs.dtype == torch.int32 and int(negs.min()) >= LO and int(negs.max()) < N_ITEMS
    assert pos.contains(q, negs).float().mean() > 0.9  # DLE's draw ignores user 7's positives


@pytest.mark.parametrize("mode", ["exact", "approximate"])
def test_same_seed_same_draws(mode):
    users, items = _positives()
    pos = PositiveSet(users, items, N_USERS, N_ITEMS)
    q = torch.arange(N_USERS).repeat(20)

    def draw(seed: int) -> torch.Tensor:
        return sample_negatives(
            q, mode, pos, (LO, N_ITEMS), torch.Generator().manual_seed(seed), chunk=333
        )

    assert torch.equal(draw(5), draw(5))
    assert not torch.equal(draw(5), draw(6))


def test_backends_agree_including_bit_31_of_a_word():
    g = torch.Generator().manual_seed(3)
    users = torch.randint(0, 300, (5000,), generator=g)
    items = torch.randint(0, 64, (5000,), generator=g)
    users = torch.cat(
        (users, torch.tensor([0, 0]))
    )  # keys 31 and 63: the sign bit of words 0 and 1
    items = torch.cat((items, torch.tensor([31, 63])))
    a, b = (
        PositiveSet(users, items, 300, 64, "bitmap"),
        PositiveSet(users, items, 300, 64, "sorted"),
    )
    qu, qi = (
        torch.randint(0, 300, (20_000,), generator=g),
        torch.randint(0, 64, (20_000,), generator=g),
    )
    assert torch.equal(a.contains(qu, qi), b.contains(qu, qi))
    assert a.contains(users, items).all() and b.contains(users, items).all()
    assert torch.equal(a.user_counts, b.user_counts)


def test_user_with_every_item_positive_is_rejected():
    users = torch.zeros(4, dtype=torch.long)
    items = torch.arange(3, 7)
    pos = PositiveSet(users, items, 2, 7)
    with pytest.raises(ValueError, match="user_id 0 has all 4 items"):
        check_sampleable(pos, torch.tensor([0, 1]), (3, 7))
    check_sampleable(pos, torch.tensor([1]), (3, 7))  # user 1 alone is fine


def test_bad_mode_and_backend():
    with pytest.raises(ValueError, match="'uniform'"):
        sample_negatives(torch.zeros(1), "uniform", None, (0, 5))
    with pytest.raises(ValueError, match="'dense'"):
        PositiveSet(torch.zeros(1), torch.zeros(1), 1, 1, "dense")


def test_both_backends_draw_the_same_negatives_for_the_same_seed():
    # Only the membership test differs: the same uniform candidates, the same rejections. User 7
    # knows all but one item, so its draws take many rejection rounds.
    users, items = _positives()
    q = torch.arange(N_USERS).repeat_interleave(300)

    def draw(backend: str) -> torch.Tensor:
        pos = PositiveSet(users, items, N_USERS, N_ITEMS, backend)
        assert pos.backend == backend
        gen = torch.Generator().manual_seed(11)
        return sample_negatives(q, "exact", pos, (LO, N_ITEMS), gen, chunk=4000)

    bitmap, keys = draw("bitmap"), draw("sorted")
    assert torch.equal(bitmap, keys)
    assert set(bitmap[q == 7].tolist()) == {N_ITEMS - 1}  # not vacuous: rejections happened


@pytest.mark.parametrize(
    ("num_users", "num_items", "free", "want"),
    [
        (138_493 + 3, 26_744 + 3, 8 << 30, "bitmap"),  # ML-20m: 463 MB of 2 GiB allowed
        (138_493 + 3, 26_744 + 3, 1 << 30, "sorted"),  # 463 MB over 256 MiB
        (2_197_225, 855_776, 141 << 30, "sorted"),  # expanded ML-20m: 235 GB, never a bitmap
        (64, 64, 2048, "bitmap"),  # 512 bytes = exactly a quarter of 2,048
        (64, 65, 2048, "sorted"),  # 520 bytes
    ],
)
def test_the_bitmap_is_chosen_by_free_memory(num_users, num_items, free, want):
    assert choose_backend(bitmap_bytes(num_users, num_items), free) == want


def test_bitmap_bytes_are_whole_words_and_free_memory_is_real():
    assert bitmap_bytes(1, 1) == 4 and bitmap_bytes(2, 16) == 4 and bitmap_bytes(3, 11) == 8
    assert bitmap_bytes(138_496, 26_747) == 463_044_064  # ML-20m with Categorify's 3 reserved ids
    free = free_memory(torch.device("cpu"))
    assert isinstance(free, int) and free > 0
    # the automatic choice on this machine follows the same rule
    users, items = _positives()
    want = choose_backend(bitmap_bytes(N_USERS, N_ITEMS), free, BITMAP_FREE_FRACTION)
    assert PositiveSet(users, items, N_USERS, N_ITEMS).backend == want == "bitmap"
