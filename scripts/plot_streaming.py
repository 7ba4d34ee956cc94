#!/usr/bin/env python3
"""Figures and a summary table for docs/streaming.md from scripts/streaming_experiments.sh's CSVs.

usage: plot_streaming.py DIR   (DIR: docs/experiments/streaming)

Reads NAME.seedS.csv (pass A: measured compute) and NAME-step100ms.seed1.csv (pass B:
--step-time 100); writes loss.png, peak_bytes.png, wall_time.png and summary.md in DIR.
"""
import os
import statistics
import sys

from plotlib import final_stats, last_row, plt, save

NETWORKS = [("datacenter", "sim_wall_s"), ("cross-region", "sim_wall_s_cross-region"),
            ("internet", "sim_wall_s_internet")]


def configs():
    out = ["diloco"]
    for f in (1, 2, 4, 7):
        for tau in (0, 1, 5):
            out.append(f"stream-F{f}-tau{tau}")
    out += ["stream-F4-tau5-mix0.5", "sparta", "sparta-overlap"]
    return out + CONTROLS


# Pass C: the end-of-run controls (losses only).
CONTROLS = ["diloco-1999", "stream-F1-tau5-2005"]


def main():
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    d = sys.argv[1]
    names = [n for n in configs() if os.path.exists(os.path.join(d, f"{n}.seed1.csv"))]
    if not names:
        raise SystemExit(f"{d}: no CSV files (run scripts/streaming_experiments.sh)")
    stats = {}
    for n in names:
        finals = [last_row(os.path.join(d, f"{n}.seed{s}.csv")) for s in (1, 2, 3)
                  if os.path.exists(os.path.join(d, f"{n}.seed{s}.csv"))]
        loss = final_stats(float(r["eval_loss"]) for r in finals)
        st = {
            "loss_mean": loss.mean,
            "loss_min": loss.lo,
            "loss_max": loss.hi,
            "seeds": loss.n,
            "peak": max(int(r["peak_bytes"]) for r in finals),
            "sent": max(int(r["bytes_sent_per_worker"]) for r in finals),
            "wall_measured": {net: statistics.fmean(float(r[col]) for r in finals) for net, col in NETWORKS},
        }
        b = os.path.join(d, f"{n}-step100ms.seed1.csv")
        if os.path.exists(b):
            rb = last_row(b)
            st["wall_100ms"] = {net: float(rb[col]) for net, col in NETWORKS}
        stats[n] = st

    base = stats.get("diloco")
    # Loss: mean and range over seeds.
    fig, ax = plt.subplots(figsize=(11, 4.5))
    xs = range(len(names))
    means = [stats[n]["loss_mean"] for n in names]
    lo = [stats[n]["loss_mean"] - stats[n]["loss_min"] for n in names]
    hi = [stats[n]["loss_max"] - stats[n]["loss_mean"] for n in names]
    colors = ["tab:gray" if n == "diloco" else "tab:green" if n in CONTROLS else
              "tab:orange" if n.startswith("sparta") else "tab:blue" for n in names]
    ax.bar(xs, means, yerr=[lo, hi], color=colors, capsize=3)
    if base:
        ax.axhspan(base["loss_min"], base["loss_max"], color="tab:gray", alpha=0.25, label="blocking DiLoCo: seed range")
        ax.legend(loc="upper left")
    ax.set_xticks(list(xs))
    ax.set_xticklabels(names, rotation=45, ha="right")
    lows = min(stats[n]["loss_min"] for n in names)
    highs = max(stats[n]["loss_max"] for n in names)
    ax.set_ylim(lows - 0.05, highs + 0.05)
    ax.set_ylabel("final eval loss (nats/char)")
    ax.set_title("License texts, 4 workers, MLP, 2000 steps, H = 100: mean and range of 3 seeds (green: controls)")
    save(fig, os.path.join(d, "loss.png"))

    # Peak bytes per operation.
    fig, ax = plt.subplots(figsize=(11, 4))
    ax.bar(xs, [stats[n]["peak"] / 1024 for n in names], color=colors)
    ax.set_xticks(list(xs))
    ax.set_xticklabels(names, rotation=45, ha="right")
    ax.set_yscale("log")
    ax.set_ylabel("peak KiB one worker sends in one operation")
    ax.set_title("Peak bytes per exchange (stats().last, max over workers and the run)")
    save(fig, os.path.join(d, "peak_bytes.png"))

    # Modelled wall time: two compute settings, three networks.
    panels = [("wall_measured", "compute as measured (MLP, about 1 ms per step)")]
    names = [n for n in names if n not in CONTROLS]
    xs = range(len(names))
    if all("wall_100ms" in stats[n] for n in names):
        panels.append(("wall_100ms", "--step-time 100 (100 ms per step)"))
    fig, axes = plt.subplots(len(panels), 1, figsize=(11, 4 * len(panels)), squeeze=False)
    width = 0.27
    for ax, (key, title) in zip(axes[:, 0], panels):
        for k, (net, _) in enumerate(NETWORKS):
            ax.bar([x + (k - 1) * width for x in xs], [stats[n][key][net] for n in names], width, label=net)
        ax.set_xticks(list(xs))
        ax.set_xticklabels(names, rotation=45, ha="right")
        ax.set_yscale("log")
        ax.set_ylabel("modelled wall time (s)")
        ax.set_title(f"Network model, 2000 steps: {title}")
        ax.legend()
    save(fig, os.path.join(d, "wall_time.png"))

    # The table for the docs.
    lines = ["| configuration | eval loss mean [min, max] (seeds) | peak KiB/op | sent MiB/worker |"
             " wall s, measured compute: dc / x-region / internet | wall s, 100 ms/step: dc / x-region / internet |",
             "|---|---|---|---|---|---|"]
    for n in names:
        st = stats[n]
        wm = " / ".join(f"{st['wall_measured'][net]:.1f}" for net, _ in NETWORKS)
        wb = " / ".join(f"{st['wall_100ms'][net]:.1f}" for net, _ in NETWORKS) if "wall_100ms" in st else "-"
        lines.append(f"| {n} | {st['loss_mean']:.4f} [{st['loss_min']:.4f}, {st['loss_max']:.4f}] ({st['seeds']}) |"
                     f" {st['peak'] / 1024:.1f} | {st['sent'] / 2**20:.2f} | {wm} | {wb} |")
    for n in CONTROLS:
        if n in stats:
            st = stats[n]
            lines.append(f"| {n} (control) | {st['loss_mean']:.4f} [{st['loss_min']:.4f}, {st['loss_max']:.4f}]"
                         f" ({st['seeds']}) | {st['peak'] / 1024:.1f} | {st['sent'] / 2**20:.2f} | - | - |")
    # Paired by seed (the same data order and initialisation): each configuration's final
    # loss minus blocking DiLoCo's, and minus DiLoCo's one step before its last outer step.
    lines += ["", "| configuration | loss − diloco@2000, per seed | loss − diloco@1999, per seed |", "|---|---|---|"]
    for n in names:
        if n == "diloco" or not all(os.path.exists(os.path.join(d, f"{m}.seed{s}.csv"))
                                    for m in (n, "diloco", "diloco-1999") for s in (1, 2, 3)):
            continue
        diffs = []
        for ref in ("diloco", "diloco-1999"):
            ds = [float(last_row(os.path.join(d, f"{n}.seed{s}.csv"))["eval_loss"]) -
                  float(last_row(os.path.join(d, f"{ref}.seed{s}.csv"))["eval_loss"]) for s in (1, 2, 3)]
            diffs.append(", ".join(f"{x:+.3f}" for x in ds))
        lines.append(f"| {n} | {diffs[0]} | {diffs[1]} |")
    with open(os.path.join(d, "summary.md"), "w") as fh:
        fh.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
