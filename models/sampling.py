"""Training negatives, drawn on the training device without a per-user loop.

* ``approximate``: DLE's draw, items uniform in ``item_id_range``; may hit a user's own positive.
* ``exact``: the same uniform draw, then a vectorized membership check of every ``(user, item)``
  against the training positives; only the colliding positions are drawn again, until none is
  left. The result is the uniform distribution over the user's non-positive items.

The membership set is a bitmap of ``num_users x num_items`` bits (one gather per query; 462 MB
for ML-20m) where it takes at most ``BITMAP_FREE_FRACTION`` of the device's free memory, and
otherwise the sorted ``user * num_items + item`` keys with ``torch.searchsorted`` (8 bytes per
positive, any catalogue size). Only the membership test differs: both draw the same uniform
candidates and reject the same ones, so the negatives are identical for the same generator
whichever set each rank chose (ranks with different free memory may choose differently).
"""

from __future__ import annotations

import torch

SAMPLING_MODES = ("exact", "approximate")
# The largest share of the free memory the bitmap may take: its construction briefly needs a few
# int64 temporaries per positive besides (keys, bit values, their running sum), and training keeps
# the rest (model, Adam state, activations, the epoch's negatives and order).
BITMAP_FREE_FRACTION = 0.25
CHUNK = 1 << 22  # draws per chunk: bounds the int64 temporaries of a check to ~100 MB
MAX_ROUNDS = 10_000


class PositiveSet:
    """Vectorized membership test for ``(user, item)`` pairs.

    Parameters
    ----------
    users, items
        Integer tensors ``[P]`` of the known positives (any order, duplicates allowed).
    num_users
        Users in the key space (``metadata.json`` ``num_users``).
    num_items
        Items per user row of the key space (``metadata.json`` ``num_items``).
    backend
        ``"bitmap"``, ``"sorted"`` or ``"auto"`` (``choose_backend`` with the free memory of the
        device ``users`` is on).
    """

    def __init__(
        self,
        users: torch.Tensor,
        items: torch.Tensor,
        num_users: int,
        num_items: int,
        backend: str = "auto",
    ):
        if backend not in ("auto", "bitmap", "sorted"):
            raise ValueError(f"backend={backend!r}: use 'auto', 'bitmap' or 'sorted'")
        self.num_items = int(num_items)
        bits = int(num_users) * self.num_items
        if backend == "auto":
            backend = choose_backend(bitmap_bytes(num_users, num_items), free_memory(users.device))
        self.backend = backend
        keys = torch.unique(users.long() * self.num_items + items.long())  # sorted, [P'] int64
        # Distinct positives per user [num_users]: a user with every item positive has no negative.
        self.user_counts = torch.bincount(keys // self.num_items, minlength=int(num_users))
        if backend == "sorted":
            self.keys = keys
            self.bitmap = None
            return
        self.bitmap = _bitmap(keys, (bits + 31) // 32)
        self.keys = None

    def contains(self, users: torch.Tensor, items: torch.Tensor) -> torch.Tensor:
        """Bool ``[n]``: whether each ``(users[i], items[i])`` is a known positive."""
        q = users.long() * self.num_items + items.long()  # [n] int64
        if self.bitmap is not None:
            word = self.bitmap[q >> 5]
            return word.bitwise_right_shift((q & 31).int()).bitwise_and_(1).bool()
        if self.keys.numel() == 0:
            return torch.zeros_like(q, dtype=torch.bool)
        idx = torch.searchsorted(self.keys, q).clamp_(max=self.keys.numel() - 1)
        return self.keys[idx] == q


def bitmap_bytes(num_users: int, num_items: int) -> int:
    """Bytes of the bitmap of a ``num_users x num_items`` key space (whole int32 words)."""
    return (int(num_users) * int(num_items) + 31) // 32 * 4


def free_memory(device: torch.device) -> int:
    """Bytes free for new tensors on ``device``: CUDA's free memory, or the host's available memory."""
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    import psutil

    return int(psutil.virtual_memory().available)


def choose_backend(bitmap: int, free: int, fraction: float = BITMAP_FREE_FRACTION) -> str:
    """``"bitmap"`` if a bitmap of ``bitmap`` bytes takes at most ``fraction`` of ``free`` bytes,
    else ``"sorted"``."""
    return "bitmap" if bitmap <= fraction * free else "sorted"


def _bitmap(keys: torch.Tensor, n_words: int) -> torch.Tensor:
    """int32 words ``[n_words]`` with bit ``key & 31`` of word ``key >> 5`` set for each sorted unique key.

    Distinct keys are distinct powers of two within a word, so a word's sum is its bitwise OR; the
    per-word sums come from a cumulative sum (deterministic on every device, unlike index_add_).
    """
    word = keys >> 5  # [P] non-decreasing
    values = torch.ones_like(keys).bitwise_left_shift(keys & 31)  # [P] int64 in [1, 2^31]
    cum = values.cumsum(0)
    uniq, counts = torch.unique_consecutive(word, return_counts=True)
    ends = counts.cumsum(0) - 1
    sums = cum[ends] - torch.cat((cum.new_zeros(1), cum[ends[:-1]]))  # [W'] in [0, 2^32)
    sums = torch.where(sums >= 2**31, sums - 2**32, sums)  # the same 32 bits as a signed int32
    out = torch.zeros(n_words, dtype=torch.int32, device=keys.device)
    out[uniq] = sums.int()
    return out


def sample_approximate(
    users: torch.Tensor, item_range: tuple[int, int], generator: torch.Generator | None = None
) -> torch.Tensor:
    """DLE's negatives: one uniform item in ``[lo, hi)`` per entry of ``users`` (int32 ``[n]``)."""
    lo, hi = item_range
    return torch.randint(
        lo, hi, users.shape, generator=generator, device=users.device, dtype=torch.int32
    )


def sample_exact(
    users: torch.Tensor,
    positives: PositiveSet,
    item_range: tuple[int, int],
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Uniform negatives that are never one of the user's positives (int32 ``[n]``).

    Draws every position uniformly, then redraws only the positions that hit a positive until none
    does: each accepted item is uniform over the user's non-positive items (rejection sampling).
    Callers check first that every user has at least one non-positive item (``check_sampleable``).
    """
    items = sample_approximate(users, item_range, generator)
    todo = torch.nonzero(positives.contains(users, items)).squeeze(1)  # [m] positions to redraw
    for _ in range(MAX_ROUNDS):
        if todo.numel() == 0:
            return items
        redraw = sample_approximate(todo, item_range, generator)
        items[todo] = redraw
        todo = todo[positives.contains(users[todo], redraw)]
    raise RuntimeError(f"{todo.numel()} negatives still collide after {MAX_ROUNDS} rounds")


def check_sampleable(
    positives: PositiveSet, users: torch.Tensor, item_range: tuple[int, int]
) -> None:
    """Raise ValueError if a user in ``users`` has every item of ``item_range`` as a positive."""
    full = positives.user_counts >= item_range[1] - item_range[0]
    if bool(full.any()):
        bad = int(torch.nonzero(full)[0])
        if bool((users == bad).any()):
            raise ValueError(
                f"user_id {bad} has all {item_range[1] - item_range[0]} items of item_id_range as training "
                "positives, so no exact negative exists; use --negative-sampling approximate or drop the user"
            )


def sample_negatives(
    users: torch.Tensor,
    mode: str,
    positives: PositiveSet | None,
    item_range: tuple[int, int],
    generator: torch.Generator | None = None,
    chunk: int = CHUNK,
) -> torch.Tensor:
    """Negatives for ``users`` (int32 ``[n]``), drawn chunk by chunk to bound temporary memory.

    The draws are a pure function of the generator state and ``users``: the same on every rank.
    """
    if mode not in SAMPLING_MODES:
        raise ValueError(f"--negative-sampling {mode!r}: use one of {SAMPLING_MODES}")
    if mode == "exact" and positives is None:
        raise ValueError("exact negative sampling needs the training positives (a PositiveSet)")
    out = torch.empty(users.shape, dtype=torch.int32, device=users.device)
    for start in range(0, users.numel(), chunk):
        part = users[start : start + chunk]
        if mode == "exact":
            out[start : start + chunk] = sample_exact(part, positives, item_range, generator)
        else:
            out[start : start + chunk] = sample_approximate(part, item_range, generator)
    return out
