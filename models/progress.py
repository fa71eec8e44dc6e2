"""When ``ncf train`` draws its tqdm bar: one pure decision, tested without a terminal."""

from __future__ import annotations


def show_bar(requested: bool, stderr_is_terminal: bool, is_main: bool) -> bool:
    """Whether to draw the per-epoch progress bar.

    Parameters
    ----------
    requested
        False with ``--no-progress``.
    stderr_is_terminal
        ``sys.stderr.isatty()``. A bar redraws itself with carriage returns, which fill log files
        and CI output with partial lines: only a terminal gets one.
    is_main
        Rank 0 of a distributed run: one bar per run, not one per process.

    Returns
    -------
    bool
        True only when all three hold.
    """
    return requested and stderr_is_terminal and is_main
