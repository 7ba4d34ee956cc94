#!/usr/bin/env python3
"""Figures and a summary table for docs/elastic.md from scripts/elastic_experiments.sh's CSVs.

usage: plot_elastic.py DIR [--fail-at F] [--join-at J]   (DIR: docs/experiments/elastic)

Reads STRATEGY.NAME.seedS.csv for the configurations of the script (fixed, fail-K,
fail-K-norejoin for diloco and sparta-diloco; deadline, wait, fast-only for diloco); writes
failures.png, speeds.png and summary.md in DIR. A fixed run's CSV has no membership
columns: its workers are all alive, its modelled time is its step and its goodput 1.
"""
import argparse
import os
import re
import statistics

from plotlib import band, final_stats, plt, read_rows, save, seed_paths

FAILS = (1, 2, 4)
SPEEDS = ["deadline", "wait", "fast-only"]
STRATEGIES = ["diloco", "sparta-diloco"]


def read(path):
    """One run's evaluations; a fixed run (no membership columns) has all 8 workers alive,
    modelled time = step and goodput 1."""
    out = []
    for r in read_rows(path):
        step = int(r["step"])
        out.append({
            "step": step,
            "loss": r["eval_loss"],
            "time": r["model_time"] if "model_time" in r else float(step),
            "goodput": r["goodput"] if "goodput" in r else 1.0,
            "workers": int(r["live_workers"]) if "live_workers" in r else None,
            "bytes": int(r["bytes_sent_per_worker"]),
        })
    return out


def runs(d, name):
    """{seed: rows} of one configuration."""
    paths = seed_paths(d, re.escape(name) + r"\.seed(?P<seed>\d+)\.csv")
    return {seed: read(path) for seed, path in paths.items()}


def mean_curve(per_seed, key="step"):
    """The mean loss at each x (step or modelled time) the seeds share."""
    xs, mean, _, _ = band(per_seed, key="loss", x=key)
    return xs, mean


def loss_at_time(rows, t):
    """The eval loss at modelled time t, linear between evaluations (None past the run)."""
    prev = None
    for r in rows:
        if r["time"] >= t:
            if prev is None or r["time"] == t:
                return r["loss"]
            f = (t - prev["time"]) / (r["time"] - prev["time"])
            return prev["loss"] + f * (r["loss"] - prev["loss"])
        prev = r
    return None


def window_mean(rows, lo, hi):
    """The mean eval loss of the evaluations with modelled time in [lo, hi] (None if none)."""
    xs = [r["loss"] for r in rows if lo <= r["time"] <= hi]
    return statistics.fmean(xs) if xs else None


def summarize(per_seed, horizon):
    finals = [rows[-1] for rows in per_seed.values()]
    loss = final_stats(r["loss"] for r in finals)
    at_t = [loss_at_time(rows, horizon) for rows in per_seed.values()]
    # The last third of the fixed run's time: less noisy than one evaluation.
    window = [window_mean(rows, 2 * horizon / 3, horizon) for rows in per_seed.values()]
    return {
        "seeds": loss.n,
        "loss": loss.mean,
        "lo": loss.lo,
        "hi": loss.hi,
        "goodput": statistics.fmean(r["goodput"] for r in finals),
        "time": finals[0]["time"],
        "steps": finals[0]["step"],
        "workers": finals[0]["workers"] if finals[0]["workers"] is not None else 8,
        "at_t": statistics.fmean(at_t) if all(v is not None for v in at_t) else None,
        "window": statistics.fmean(window) if all(v is not None for v in window) else None,
        "bytes": statistics.fmean(r["bytes"] for r in finals),
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--fail-at", type=int, default=1050)
    ap.add_argument("--join-at", type=int, default=2050)
    a = ap.parse_args()
    d = a.dir
    data = {}  # (strategy, name) -> {seed: rows}
    for strategy in STRATEGIES:
        for name in ["fixed"] + [f"fail-{k}{x}" for k in FAILS for x in ("", "-norejoin")] + SPEEDS:
            r = runs(d, f"{strategy}.{name}")
            if r:
                data[(strategy, name)] = r
    strategies = [st for st in STRATEGIES if (st, "fixed") in data]
    if not strategies:
        raise SystemExit(f"{d}: no STRATEGY.fixed.seed*.csv (run scripts/elastic_experiments.sh)")
    first = data[(strategies[0], "fixed")]
    horizon = first[min(first)][-1]["time"]  # the fixed run's duration
    stats = {key: summarize(r, horizon) for key, r in data.items()}
    admitted = (a.join_at // 100 + 1) * 100

    # Failures: per strategy, the curves and the final loss against the failed workers.
    fig, axes = plt.subplots(len(strategies), 2, figsize=(12, 4.4 * len(strategies)), squeeze=False)
    colors = {0: "black", 1: "tab:blue", 2: "tab:orange", 4: "tab:red"}
    for row, st in enumerate(strategies):
        ax, bx = axes[row]
        xs, ys = mean_curve(data[(st, "fixed")])
        ax.plot(xs, ys, color=colors[0], label="fixed world (8)")
        for k in FAILS:
            for suffix, style in (("", "-"), ("-norejoin", "--")):
                key = (st, f"fail-{k}{suffix}")
                if key in data:
                    xs, ys = mean_curve(data[key])
                    ax.plot(xs, ys, style, color=colors[k],
                            label=f"{k} fail{'s' if k > 1 else ''}" + (", rejoin" if not suffix else ", no rejoin"))
        mine = [v for (s2, _), v in stats.items() if s2 == st]
        lo = min(v["loss"] for v in mine)
        ax.set_ylim(lo - 0.05, lo + 0.45)
        for x, label in ((a.fail_at, "fail"), (admitted, "rejoin")):
            ax.axvline(x, color="grey", lw=0.8, ls=":")
            ax.text(x, 0.98, " " + label, va="top", fontsize=8, color="grey", transform=ax.get_xaxis_transform())
        ax.set_xlabel("inner step")
        ax.set_ylabel("eval loss (nats/char), mean over seeds")
        ax.set_title(f"{st}, 8 workers: failures mid-run")
        ax.legend(fontsize=8, loc="upper right")
        ax.grid(alpha=0.3)
        for suffix, marker, label in (("", "o", "rejoin"), ("-norejoin", "s", "no rejoin")):
            ks, mean, err_lo, err_hi = [], [], [], []
            for k in (0,) + FAILS:
                key = (st, "fixed" if k == 0 else f"fail-{k}{suffix}")
                if key not in stats:
                    continue
                v = stats[key]
                ks.append(k + (0.04 if suffix else -0.04))
                mean.append(v["loss"])
                err_lo.append(v["loss"] - v["lo"])
                err_hi.append(v["hi"] - v["loss"])
            bx.errorbar(ks, mean, yerr=[err_lo, err_hi], marker=marker, capsize=3, label=label)
        bx.set_xticks((0,) + FAILS)
        bx.set_xlabel("workers failed at step %d (of 8)" % a.fail_at)
        bx.set_ylabel("final eval loss (mean; bars: min-max over seeds)")
        bx.set_title(f"{st}: final loss")
        bx.legend(fontsize=8)
        bx.grid(alpha=0.3)
    save(fig, os.path.join(d, "failures.png"))

    # Speeds (DiLoCo): loss against modelled time, and goodput.
    if any(("diloco", n) in data for n in SPEEDS):
        fig, (ax, bx) = plt.subplots(1, 2, figsize=(12, 4.6), gridspec_kw={"width_ratios": [2, 1]})
        styles = {"fixed": ("black", "fixed world, all speed 1 (reference)"),
                  "deadline": ("tab:green", "deadline rounds (k_i = floor(H s_i) steps)"),
                  "wait": ("tab:purple", "wait for the slowest"),
                  "fast-only": ("tab:brown", "the 4 speed-1 workers alone")}
        for n in ["fixed"] + SPEEDS:
            if ("diloco", n) not in data:
                continue
            xs, ys = mean_curve(data[("diloco", n)], key="time")
            ax.plot(xs, ys, color=styles[n][0], label=styles[n][1], ls="--" if n == "fixed" else "-")
        ax.axvline(horizon, color="grey", lw=0.8, ls=":")
        ax.set_xscale("log")
        lo = min(stats[("diloco", n)]["loss"] for n in ["fixed"] + SPEEDS if ("diloco", n) in stats)
        ax.set_ylim(lo - 0.05, lo + 1.0)
        ax.set_xlabel("modelled time (inner steps of a speed-1 worker), log scale")
        ax.set_ylabel("eval loss (nats/char), mean over seeds")
        ax.set_title("diloco, speeds 1,1,1,1,0.5,0.5,0.25,0.25")
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3, which="both")
        names = [n for n in SPEEDS if ("diloco", n) in stats]
        bx.bar(range(len(names)), [stats[("diloco", n)]["goodput"] for n in names],
               color=[styles[n][0] for n in names])
        for i, n in enumerate(names):
            g = stats[("diloco", n)]["goodput"]
            bx.text(i, g, f"{g:.3f}", ha="center", va="bottom", fontsize=9)
        bx.set_xticks(range(len(names)))
        bx.set_xticklabels(names)
        bx.set_ylim(0, 1.1)
        bx.set_ylabel("goodput (useful steps / worker time)")
        bx.set_title("goodput")
        save(fig, os.path.join(d, "speeds.png"))

    with open(os.path.join(d, "summary.md"), "w") as fh:
        fh.write("| strategy | configuration | seeds | final eval loss (min-max) | vs fixed | loss at time %d | "
                 "mean loss, time %d-%d | vs fixed | goodput | modelled time | workers at end |\n"
                 % (horizon, 2 * horizon / 3, horizon))
        fh.write("|---|---|---|---|---|---|---|---|---|---|---|\n")
        for (st, n), v in stats.items():
            fixed = stats[(st, "fixed")]
            at_t = f"{v['at_t']:.4f}" if v["at_t"] is not None else "-"
            win = f"{v['window']:.4f} | {v['window'] - fixed['window']:+.4f}" if v["window"] is not None else "- | -"
            fh.write(f"| {st} | {n} | {v['seeds']} | {v['loss']:.4f} ({v['lo']:.4f}-{v['hi']:.4f}) | "
                     f"{v['loss'] - fixed['loss']:+.4f} | {at_t} | {win} | {v['goodput']:.4f} | {v['time']:.0f} | "
                     f"{v['workers']} |\n")
    print(open(os.path.join(d, "summary.md")).read())


if __name__ == "__main__":
    main()
