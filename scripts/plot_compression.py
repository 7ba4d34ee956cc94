#!/usr/bin/env python3
"""scripts/plot_compression.py: the compression frontier (docs/experiments/compression/frontier.png)
and its table (frontier.md) from the CSVs scripts/compression_experiments.sh writes.

usage: python3 scripts/plot_compression.py [DIR]   (DIR defaults to docs/experiments/compression)
Each point is a configuration's final evaluation: mean eval loss over its seeds against the
traffic reduction relative to ddp; the bars span the seeds' lowest and highest loss.
"""
import csv
import glob
import os
import statistics
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def final_rows(directory):
    """{configuration: [last CSV row of each seed]}"""
    points = {}
    for path in sorted(glob.glob(os.path.join(directory, "*.seed*.csv"))):
        name = os.path.basename(path).split(".seed")[0]
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
        if not rows:
            sys.exit(f"plot_compression: {path} has no rows")
        points.setdefault(name, []).append({k: (v if k == "strategy" else float(v)) for k, v in rows[-1].items()})
    if not points:
        sys.exit(f"plot_compression: no CSVs in {directory}; run scripts/compression_experiments.sh first")
    return points


def main():
    directory = sys.argv[1] if len(sys.argv) > 1 else "docs/experiments/compression"
    points = final_rows(directory)
    ddp = statistics.mean(r["eval_loss"] for r in points["ddp"])
    table = ["| configuration | seeds | vs ddp (bytes) | eval loss, mean | min .. max | gap to ddp |",
             "|---|---:|---:|---:|---:|---:|"]
    fig, ax = plt.subplots(figsize=(8, 5))
    for name, rows in sorted(points.items(), key=lambda kv: statistics.mean(r["reduction_vs_ddp"] for r in kv[1])):
        losses = [r["eval_loss"] for r in rows]
        red = statistics.mean(r["reduction_vs_ddp"] for r in rows)
        mean = statistics.mean(losses)
        table.append(f"| {name} | {len(rows)} | {red:,.0f}x | {mean:.4f} | {min(losses):.4f} .. {max(losses):.4f} | "
                     f"{100 * (mean / ddp - 1):+.1f}% |")
        x = max(red, 1.0)
        ax.errorbar([x], [mean], yerr=[[mean - min(losses)], [max(losses) - mean]], fmt="o", capsize=3)
        ax.annotate(name, (x, mean), textcoords="offset points", xytext=(5, 4), fontsize=7)
    ax.set_xscale("log")
    ax.set_xlabel("bytes sent per worker, reduction vs ddp (log)")
    ax.set_ylabel("eval loss (nats/char), mean of 3 seeds; bars: min..max")
    ax.axhline(ddp, color="#222222", lw=0.8, ls="--")
    ax.axvline(1000, color="#999999", lw=0.6, ls=":")
    ax.axvline(10000, color="#999999", lw=0.6, ls=":")
    ax.set_title("Compression frontier: trickle-sim, license texts, 4 workers, 2000 steps")
    fig.tight_layout()
    fig.savefig(os.path.join(directory, "frontier.png"), dpi=110)
    with open(os.path.join(directory, "frontier.md"), "w") as f:
        f.write("\n".join(table) + "\n")
    print("\n".join(table))


if __name__ == "__main__":
    main()
