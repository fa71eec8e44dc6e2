"""Learning-curve PNG of a training run (matplotlib, Agg backend: no display needed)."""

from __future__ import annotations

from pathlib import Path

from ncf.core.atomic import write_figure


def learning_curve(
    history: list[dict],
    path: str | Path,
    k: int = 10,
    itempop: dict[str, float] | None = None,
    title: str = "",
) -> None:
    """Write HR@k / NDCG@k per epoch (ItemPop as dashed lines) and the training loss, atomically.

    Parameters
    ----------
    history
        One dict per epoch with ``epoch``, ``loss``, ``hr@k`` and ``ndcg@k``.
    path
        PNG to write.
    itempop
        ``{"hr": .., "ndcg": ..}`` of the popularity baseline on the same split, or None.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    epochs = [h["epoch"] for h in history]
    fig, (ax, ax_loss) = plt.subplots(1, 2, figsize=(10, 4))
    for key, color in ((f"hr@{k}", "tab:blue"), (f"ndcg@{k}", "tab:orange")):
        ax.plot(
            epochs, [h[key] for h in history], marker="o", color=color, label=f"NeuMF {key.upper()}"
        )
        if itempop is not None:
            base = itempop["hr" if key.startswith("hr") else "ndcg"]
            ax.axhline(
                base,
                linestyle="--",
                color=color,
                alpha=0.6,
                label=f"ItemPop {key.upper()} {base:.3f}",
            )
    ax.set_xlabel("epoch")
    ax.set_ylabel("evaluation metric (split in the title)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax_loss.plot(epochs, [h["loss"] for h in history], marker="o", color="tab:green")
    ax_loss.set_xlabel("epoch")
    ax_loss.set_ylabel("training BCE loss")
    ax_loss.grid(alpha=0.3)
    fig.suptitle(title or "NeuMF learning curve")
    fig.tight_layout()
    write_figure(path, fig)
