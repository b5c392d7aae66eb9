"""PNG of the batch-size sweep: records/s and per-batch latency (p50, p99) against batch size.

matplotlib is imported here only, with the Agg backend, so hosts without a display (and runs without
``--sweep``) never need it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def sweep_png(points: list[dict[str, Any]], path: Path, title: str) -> None:
    """Two panels sharing a log x axis; one line per backend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (rate_ax, lat_ax) = plt.subplots(1, 2, figsize=(11, 4.5), constrained_layout=True)
    for engine in sorted({p["engine"] for p in points}):
        mine = sorted((p for p in points if p["engine"] == engine), key=lambda p: p["batch_size"])
        sizes = [p["batch_size"] for p in mine]
        rate_ax.plot(sizes, [p["records_per_s"] for p in mine], marker="o", label=engine)
        line = lat_ax.plot(sizes, [p["batch_latency_ms_p50"] for p in mine], marker="o", label=f"{engine} p50")
        lat_ax.plot(sizes, [p["batch_latency_ms_p99"] for p in mine], marker="x", linestyle="--",
                    color=line[0].get_color(), label=f"{engine} p99")
    for ax in (rate_ax, lat_ax):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("batch size (records)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    rate_ax.set_ylabel("records/s")
    rate_ax.set_title("throughput")
    lat_ax.set_ylabel("per-batch latency (ms)")
    lat_ax.set_title("per-batch latency")
    fig.suptitle(title, fontsize=10)
    fig.savefig(path, dpi=110)
    plt.close(fig)
