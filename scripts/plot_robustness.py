#!/usr/bin/env python3
"""Figures and a summary for docs/robustness.md from scripts/robustness_experiments.sh's CSVs.

usage: plot_robustness.py DIR   (DIR: docs/experiments/robustness)

Reads NAME.seedS.csv: RULE.ATTACK (RULE mean, trimmed, median, clip; ATTACK honest or
KIND-1, KIND-2) and speeds.POLICY[-fail]. Writes attacks.png, speeds.png and summary.md in
DIR. A run whose model diverged (a non-finite or huge loss) counts as "diverged" in the
table and is drawn at the top of the figure's scale.
"""
import argparse
import math
import os

from plotlib import draw_series, final_stats, fmt_range, plt, read_rows, save, seed_files

RULES = ["mean", "trimmed", "median", "clip"]
KINDS = ["scale", "sign", "noise", "stale", "nan"]
ATTACKS = ["honest"] + [f"{k}-{n}" for k in KINDS for n in (1, 2)]
POLICIES = ["deadline", "adaptive", "wait"]
DIVERGED = 10.0  # nats per character: anything above is a broken model
TOP = 4.0  # the attack figure's axis top (a bar above it has its value written in it)


def read(path):
    rows = read_rows(path)
    for r in rows:
        r.setdefault("model_time", r["step"])
        r.setdefault("goodput", 1.0)
    return rows


def final(series, key="eval_loss"):
    return {s: rows[-1].get(key, float("nan")) for s, rows in series.items()}


def broken(v):
    return not math.isfinite(v) or v > DIVERGED


def cell(series):
    if not series:
        return "—"
    f = final(series)
    bad = sum(broken(v) for v in f.values())
    ok = {s: v for s, v in f.items() if not broken(v)}
    if not ok:
        return "diverged"
    text = fmt_range(final_stats(ok))
    return text + (f" ({bad} diverged)" if bad else "")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    a = ap.parse_args()
    files = seed_files(a.dir, r"(?P<name>.+)\.seed(?P<seed>\d+)\.csv")
    data = {name: {s: read(p) for s, p in per.items()} for name, per in files.items()}
    out = []

    # --- robust aggregation: final loss per attack and rule ---
    have = [r for r in RULES if f"{r}.honest" in data]
    if have:
        ref = final_stats(final(data["mean.honest"])).mean if "mean.honest" in data else float("nan")
        out.append("### Final eval loss (nats/char) by attack and rule\n")
        out.append(f"8 workers, DiLoCo H = 100; mean over seeds [min–max]; the honest mean is {ref:.4f}.\n")
        out.append("| attack | " + " | ".join(have) + " |")
        out.append("|---|" + "---|" * len(have))
        for atk in ATTACKS:
            if not any(f"{r}.{atk}" in data for r in have):
                continue
            out.append(f"| {atk} | " + " | ".join(cell(data.get(f"{r}.{atk}", {})) for r in have) + " |")
        out.append("")
        out.append("### Bytes each rule sends (worker 0's counters, whole run, honest)\n")
        out.append("| rule | sent per worker | vs mean |")
        out.append("|---|---|---|")
        base = None
        for r in have:
            b = final_stats(final(data[f"{r}.honest"], "bytes_sent_per_worker")).mean
            base = base or b
            out.append(f"| {r} | {b / 2**20:.1f} MiB | {b / base:.2f}x |")
        out.append("")
        fig, ax = plt.subplots(figsize=(11, 4.2))
        atks = [x for x in ATTACKS if any(f"{r}.{x}" in data for r in have)]
        w = 0.8 / len(have)
        for j, r in enumerate(have):
            ys, lo, hi = [], [], []
            for x in atks:
                f = final(data.get(f"{r}.{x}", {}))
                v = [min(DIVERGED, y) if math.isfinite(y) else DIVERGED for y in f.values()] or [float("nan")]
                m = sum(v) / len(v)
                ys.append(m)
                lo.append(m - min(v))
                hi.append(max(v) - m)
            xs = [i + (j - (len(have) - 1) / 2) * w for i in range(len(atks))]
            ax.bar(xs, ys, w, yerr=[lo, hi], label=r, capsize=2)
            for xv, yv in zip(xs, ys):  # bars past the axis' top: their value written there
                if math.isfinite(yv) and yv > TOP:
                    text = "div." if yv >= DIVERGED else f"{yv:.1f}"
                    ax.text(xv, TOP - 0.02, text, ha="center", va="top", fontsize=7, rotation=90, color="white")
        if math.isfinite(ref):
            ax.axhline(ref, color="k", linewidth=0.8, linestyle="--", label="honest mean")
        ax.set_xticks(range(len(atks)))
        ax.set_xticklabels(atks, rotation=30, ha="right")
        ax.set_ylabel(f"final eval loss (nats/char), axis cut at {TOP:g}")
        lows = [final_stats(final(s)).lo for s in data.values() if s and not broken(final_stats(final(s)).lo)]
        ax.set_ylim(max(0.0, min(lows) - 0.2) if lows else 0, TOP)
        ax.set_title("Adversarial workers (1 or 2 of 8) under each aggregation rule")
        ax.legend(ncol=5, fontsize=8, loc="upper right")
        save(fig, os.path.join(a.dir, "attacks.png"))

    # --- mixed speeds: goodput and loss ---
    pols = [p for p in POLICIES if f"speeds.{p}" in data]
    if pols:
        out.append("### Mixed speeds (1,1,1,1,0.5,0.5,0.25,0.25)\n")
        # The time every run reached: their losses compared at equal modelled time.
        ends = [final_stats(final(data[f"speeds.{p}{x}"], "model_time")).lo
                for p in pols for x in ("", "-fail") if f"speeds.{p}{x}" in data]
        t_common = min(ends)
        out.append(f"| policy | failure | steps | modelled time | sent per worker | goodput | "
                   f"eval loss at time {t_common:.0f} | final eval loss |")
        out.append("|---|---|---|---|---|---|---|---|")
        for p in pols:
            for suffix, fail in (("", "none"), ("-fail", "worker 5 fails, rejoins")):
                s = data.get(f"speeds.{p}{suffix}")
                if not s:
                    continue
                vals = []
                for rows in s.values():
                    before = [r for r in rows if r["model_time"] <= t_common + 1e-9]
                    if before:
                        vals.append(before[-1]["eval_loss"])
                at = fmt_range(final_stats(vals)) if vals else "—"
                steps = final_stats(final(s, "step")).mean
                sent = final_stats(final(s, "bytes_sent_per_worker")).mean
                out.append(f"| {p} | {fail} | {steps:.0f} | {final_stats(final(s, 'model_time')).mean:.0f} | "
                           f"{sent / 2**20:.1f} MiB | {final_stats(final(s, 'goodput')).mean:.4f} | {at} | {cell(s)} |")
        out.append("")
        fig, ax = plt.subplots(figsize=(7.5, 4.2))
        for p in pols:
            for suffix, style in (("", "-"), ("-fail", ":")):
                s = data.get(f"speeds.{p}{suffix}")
                if s:
                    draw_series(ax, s, label=f"{p}{suffix}", style=style, x="model_time")
        ax.axvline(t_common, color="k", linewidth=0.6, linestyle="--")
        ax.set_xlabel("modelled time (inner steps of a speed-1 worker)")
        ax.set_ylabel("eval loss (nats/char)")
        ax.set_title("Mixed speeds: fixed deadline, adaptive deadline, waiting for the slowest")
        ax.legend(fontsize=8)
        save(fig, os.path.join(a.dir, "speeds.png"))

    with open(os.path.join(a.dir, "summary.md"), "w") as fh:
        fh.write("\n".join(out) + "\n")
    print("\n".join(out))


if __name__ == "__main__":
    main()
