"""``--plot``: each queue's share over time against its fair share, and utilisation (matplotlib, Agg)."""

from __future__ import annotations

from typing import Mapping

LEGEND_MAX = 12


def _hours(report: Mapping) -> tuple[float, str]:
    end = float(report["simulatedSeconds"]) or 1.0
    if end >= 2 * 86400:
        return 86400.0, "days"
    if end >= 2 * 3600:
        return 3600.0, "hours"
    if end >= 120:
        return 60.0, "minutes"
    return 1.0, "seconds"


def _step(series, end: float, scale: float):
    xs = [t / scale for t, _ in series]
    ys = [v for _, v in series]
    if xs:
        xs.append(end / scale)
        ys.append(ys[-1])
    return xs, ys


def _shares(ax, report: Mapping, scale: float, title: str) -> None:
    end = float(report["simulatedSeconds"])
    queues = report["queues"]
    colours = _colours(len(queues))
    for (name, q), colour in zip(queues.items(), colours):
        xs, ys = _step(q["share"], end, scale)
        ax.step(xs, ys, where="post", color=colour, linewidth=1.4, label=f"{name} (w={q['weight']:g})")
        xs, ys = _step(q.get("fairShareSeries", []), end, scale)
        if xs:
            ax.step(xs, ys, where="post", color=colour, linewidth=1.0, linestyle="--", alpha=0.8)
    ax.set_ylabel("share of the pool")
    ax.set_ylim(0, max(1.0, ax.get_ylim()[1]))
    ax.set_title(title, loc="left", fontsize=10)
    ax.grid(True, alpha=0.3)
    if len(queues) <= LEGEND_MAX:
        ax.legend(loc="upper right", fontsize=8, title="solid: share, dashed: fair share", title_fontsize=8)


def _colours(n: int):
    import matplotlib

    cmap = matplotlib.colormaps["tab10" if n <= 10 else "tab20" if n <= 20 else "viridis"]
    if n <= 20:
        return [cmap(i % cmap.N) for i in range(n)]
    return [cmap(i / max(1, n - 1)) for i in range(n)]


def plot_runs(reports: Mapping[str | None, Mapping], path: str, title: str = "") -> None:
    """One figure: a share panel per run (policy), then one utilisation panel for all of them."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = list(reports.items())
    scale, unit = _hours(max((r for _, r in runs), key=lambda r: r["simulatedSeconds"]))
    fig, axes = plt.subplots(len(runs) + 1, 1, figsize=(10, 3.2 * len(runs) + 2.4), sharex=True,
                             gridspec_kw={"height_ratios": [3] * len(runs) + [2]}, squeeze=False)
    axes = axes[:, 0]
    for ax, (policy, report) in zip(axes, runs):
        heading = f"{policy}: " if policy else ""
        _shares(ax, report, scale, f"{heading}share of the pool over time")
    ax = axes[-1]
    for (policy, report), colour in zip(runs, _colours(max(len(runs), 1))):
        end = float(report["simulatedSeconds"])
        xs, ys = _step(report.get("utilisationSeries", []), end, scale)
        label = f"{policy or 'utilisation'} (mean {report['utilisation'] * 100:.1f}%)"
        ax.step(xs, ys, where="post", color=colour if policy else "black", linewidth=1.2, label=label)
    ax.set_ylabel("utilisation")
    ax.set_ylim(0, 1.05)
    ax.set_xlabel(f"simulated time ({unit})")
    ax.grid(True, alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    if title:
        fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


__all__ = ["plot_runs"]
