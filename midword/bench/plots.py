"""PNG plots for the benchmark folders (matplotlib, headless Agg backend)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path


def _pyplot():  # noqa: ANN202 - matplotlib has no useful static type here
    import matplotlib

    matplotlib.use("Agg")  # headless: no display on servers and CI
    import matplotlib.pyplot as plt

    return plt


def grouped_bars(
    path: Path,
    groups: Sequence[str],
    series: Mapping[str, Sequence[float]],
    title: str,
    ylabel: str,
) -> Path:
    """One bar per (group, series): e.g. methods x prompt-cut kinds. NaN bars are left out.

    >>> import tempfile, pathlib
    >>> p = grouped_bars(pathlib.Path(tempfile.mkdtemp()) / "x.png", ["a", "b"],
    ...                  {"all": [0.5, 0.25]}, "t", "y")       # doctest: +SKIP
    """
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(max(6.0, 1.1 * len(groups) + 2), 4.0))
    width = 0.8 / max(1, len(series))
    for i, (name, values) in enumerate(series.items()):
        xs = [g + (i - (len(series) - 1) / 2) * width for g in range(len(groups))]
        ax.bar(xs, [0.0 if v != v else v for v in values], width, label=name)
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels(groups, rotation=25, ha="right")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    if len(series) > 1:
        ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def histogram(
    path: Path, samples: Mapping[str, Sequence[float]], title: str, xlabel: str, bins: int = 30
) -> Path:
    """Overlaid histograms, one per named sample set."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 4.0))
    for name, values in samples.items():
        if values:
            ax.hist(values, bins=bins, alpha=0.6, label=name)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("count")
    ax.set_title(title)
    ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def tradeoff(
    path: Path,
    curves: Mapping[str, tuple[Sequence[float], Sequence[float]]],
    points: Mapping[str, tuple[float, float]],
    title: str,
    xlabel: str,
    ylabel: str,
    logx: bool = False,
) -> Path:
    """Curves (e.g. a threshold sweep) with single policies as labelled markers."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7.0, 4.8))
    for name, (xs, ys) in curves.items():
        ax.plot(xs, ys, marker=".", label=name)
    markers = "osD^v<>ph*"
    for i, (name, (x, y)) in enumerate(points.items()):
        ax.scatter([x], [y], marker=markers[i % len(markers)], s=50, zorder=3, label=name)
    if logx:
        ax.set_xscale("symlog", linthresh=1.0)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize="x-small", framealpha=0.6)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
