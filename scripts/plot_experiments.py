#!/usr/bin/env python3
"""scripts/plot_experiments.py: draws docs/experiments/*.png from the CSV files scripts/experiments.sh writes.

usage: python3 scripts/plot_experiments.py [DIR]      (DIR defaults to docs/experiments)
Each figure reads only trickle-sim's CSV columns; a missing CSV is an error naming it.
"""
import math
import os
import sys

from plotlib import plt, read_csv, save

COLORS = {"ddp": "#222222", "none": "#d62728", "sparta": "#1f77b4", "diloco": "#2ca02c",
          "sparta-diloco": "#9467bd", "single": "#7f7f7f"}


def load(directory, name):
    """Rows of DIR/name.csv grouped by strategy, each a dict of floats (strategy kept as text)."""
    path = os.path.join(directory, name + ".csv")
    if not os.path.exists(path):
        sys.exit(f"plot_experiments: {path} is missing; run scripts/experiments.sh first")
    return read_csv(path)


def column(rows, key):
    return [r[key] for r in rows]


def final(rows, key="eval_loss"):
    return rows[-1][key]


def reduction_label(rows):
    x = rows[-1]["reduction_vs_ddp"]
    if math.isinf(x):
        return "no traffic"
    if x == 1.0:
        return "dense, every step"
    return f"{x:,.0f}x less than ddp" if x >= 10 else f"{x:.2f}x less than ddp"


def curve(ax, rows, label, color=None, style="-"):
    ax.plot(column(rows, "step"), column(rows, "eval_loss"), style, label=label, color=color, linewidth=1.6)


def finish(fig, ax, directory, name, title, ylabel="held-out loss of the averaged model (nats/char)"):
    ax.set_title(title, fontsize=10)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    save(fig, os.path.join(directory, name + ".png"))


def fig_two_workers(d):
    one, two = load(d, "workers1"), load(d, "workers2")
    fig, ax = plt.subplots(figsize=(7, 4.2))
    curve(ax, one["none"], "1 worker alone (baseline)", COLORS["single"], "--")
    for s in ("ddp", "none", "sparta"):
        curve(ax, two[s], f"2 workers, {s} ({reduction_label(two[s])})", COLORS[s])
    ax.set_xlabel("step")
    ax.set_ylim(top=min(3.2, ax.get_ylim()[1]))
    finish(fig, ax, d, "fig1_two_workers", "SPARTA p = 0.5% against ddp and independent replicas, 2 workers")


def fig_workers(d):
    fig, ax = plt.subplots(figsize=(7, 4.2))
    single = final(load(d, "workers1")["none"])
    ws = [2, 4, 8]
    runs = {w: load(d, f"workers{w}") for w in ws}
    for s in ("ddp", "none", "sparta"):
        ax.plot(ws, [final(runs[w][s]) for w in ws], "o-", label=s if s != "sparta" else "sparta p = 0.5%",
                color=COLORS[s])
    ax.axhline(single, color=COLORS["single"], linestyle="--", label="1 worker alone")
    ax.set_xscale("log", base=2)
    ax.set_xticks(ws, [str(w) for w in ws])
    ax.set_xlabel("workers")
    finish(fig, ax, d, "fig2_workers", "Final loss after 2,000 steps per worker, 2 / 4 / 8 workers")


FRACTIONS = ["0.0005", "0.001", "0.002", "0.005", "0.01", "0.02", "0.05"]


def fig_fraction(d):
    ref = load(d, "workers4")
    fig, ax = plt.subplots(figsize=(7, 4.2))
    ps = [float(p) for p in FRACTIONS]
    losses = [final(load(d, f"fraction_{p}")["sparta"]) for p in FRACTIONS]
    ax.plot(ps, losses, "o-", color=COLORS["sparta"], label="sparta")
    for p, l in zip(ps, losses):
        ax.annotate(f"{1 / p:,.0f}x", (p, l), textcoords="offset points", xytext=(0, 7), ha="center", fontsize=7)
    ax.axhline(final(ref["ddp"]), color=COLORS["ddp"], linestyle="--", label="ddp")
    ax.axhline(final(ref["none"]), color=COLORS["none"], linestyle="--", label="none")
    ax.set_xscale("log")
    ax.set_xlabel("fraction p of the parameters averaged per step (labels: reduction against ddp)")
    finish(fig, ax, d, "fig3_fraction", "Final loss against the SPARTA fraction p, 4 workers")


def fig_correlation(d):
    ref = load(d, "workers4")
    fig, ax = plt.subplots(figsize=(7, 4.2))
    cmap = plt.get_cmap("viridis")
    for i, p in enumerate(FRACTIONS):
        rows = load(d, f"fraction_{p}")["sparta"]
        ax.plot(column(rows, "step"), column(rows, "correlation"), color=cmap(i / (len(FRACTIONS) - 1)),
                label=f"sparta p = {float(p) * 100:g}%")
    ax.plot(column(ref["none"], "step"), column(ref["none"], "correlation"), color=COLORS["none"], linestyle="--",
            label="none")
    ax.axhline(0.9, color="#999999", linewidth=0.8)
    ax.set_xlabel("step")
    ax.set_ylim(0, 1.02)
    finish(fig, ax, d, "fig4_correlation", "Correlation of the replicas' changes since initialisation, 4 workers",
           ylabel="mean pairwise correlation")


def fig_interval(d):
    ref = load(d, "workers4")
    fig, ax = plt.subplots(figsize=(7, 4.2))
    cmap = plt.get_cmap("plasma")
    hs = ["1", "5", "20", "50", "100"]
    for i, h in enumerate(hs):
        rows = load(d, "fraction_0.005" if h == "1" else f"interval_{h}")["sparta"]
        curve(ax, rows, f"every {h} step{'s' if h != '1' else ''} ({reduction_label(rows)})",
              cmap(i / (len(hs) + 0.5)))
    curve(ax, ref["ddp"], "ddp", COLORS["ddp"], "--")
    curve(ax, ref["none"], "none", COLORS["none"], "--")
    ax.set_xlabel("step")
    ax.set_ylim(top=min(3.2, ax.get_ylim()[1]))
    finish(fig, ax, d, "fig5_interval", "SPARTA p = 0.5% averaged every H steps, 4 workers")


def fig_diloco(d):
    ref = load(d, "workers4")
    main = load(d, "diloco_nesterov")
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
    curve(a, ref["ddp"], "ddp", COLORS["ddp"], "--")
    curve(a, ref["sparta"], f"sparta p = 0.5% ({reduction_label(ref['sparta'])})", COLORS["sparta"])
    curve(a, main["diloco"], f"diloco H = 100 ({reduction_label(main['diloco'])})", COLORS["diloco"])
    curve(a, main["sparta-diloco"], f"sparta-diloco ({reduction_label(main['sparta-diloco'])})",
          COLORS["sparta-diloco"])
    a.set_xlabel("step")
    a.set_ylim(top=min(3.2, a.get_ylim()[1]))
    a.set_title("DiLoCo against SPARTA + DiLoCo, 4 workers", fontsize=10)
    a.set_ylabel("held-out loss of the averaged model (nats/char)")
    a.grid(alpha=0.3)
    a.legend(fontsize=8)
    cmap = plt.get_cmap("tab10")
    for i, o in enumerate(["nesterov", "sgd", "momentum", "adam", "average"]):
        rows = load(d, f"diloco_{o}")["diloco"]
        curve(b, rows, f"{o} ({final(rows):.3f})", cmap(i))
    b.set_xlabel("step")
    b.set_title("DiLoCo's outer optimizers (H = 100; final loss in brackets)", fontsize=10)
    b.grid(alpha=0.3)
    b.legend(fontsize=8)
    save(fig, os.path.join(d, "fig6_diloco.png"))


def fig_iid(d):
    iid = load(d, "workers4")
    iid["diloco"] = load(d, "diloco_nesterov")["diloco"]
    non = load(d, "noniid")
    strategies = ["ddp", "none", "sparta", "diloco"]
    fig, ax = plt.subplots(figsize=(7, 4.2))
    x = range(len(strategies))
    ax.bar([i - 0.2 for i in x], [final(iid[s]) for s in strategies], 0.4, label="iid shards", color="#6baed6")
    ax.bar([i + 0.2 for i in x], [final(non[s]) for s in strategies], 0.4, label="non-iid shards", color="#fd8d3c")
    for i, s in enumerate(strategies):
        ax.annotate(f"{final(iid[s]):.3f}", (i - 0.2, final(iid[s])), ha="center", va="bottom", fontsize=7)
        ax.annotate(f"{final(non[s]):.3f}", (i + 0.2, final(non[s])), ha="center", va="bottom", fontsize=7)
    ax.set_xticks(list(x), strategies)
    lo = min(min(final(iid[s]), final(non[s])) for s in strategies)
    ax.set_ylim(bottom=lo - 0.3)
    finish(fig, ax, d, "fig7_iid", "iid against non-iid (contiguous) shards, 4 workers, final loss")


def fig_drop_prune(d):
    base = load(d, "diloco_nesterov")["diloco"]
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
    curve(a, base, f"no drops ({final(base):.3f})", COLORS["diloco"])
    for q, c in (("0.25", "#ff7f0e"), ("0.5", "#d62728")):
        rows = load(d, f"drop_{q}")["diloco"]
        curve(a, rows, f"{float(q) * 100:g}% dropped ({final(rows):.3f})", c)
    a.set_xlabel("step")
    a.set_ylim(top=min(3.2, a.get_ylim()[1]))
    a.set_ylabel("held-out loss of the averaged model (nats/char)")
    a.set_title("DiLoCo with dropped outer gradients, 4 workers", fontsize=10)
    a.grid(alpha=0.3)
    a.legend(fontsize=8)
    curve(b, base, f"no pruning ({final(base):.3f})", COLORS["diloco"])
    for q, c in (("0.5", "#8c564b"), ("0.75", "#e377c2")):
        rows = load(d, f"prune_{q}")["diloco"]
        curve(b, rows, f"{float(q) * 100:g}% pruned ({final(rows):.3f})", c)
    b.set_xlabel("step")
    b.set_title("DiLoCo with pruned outer gradients (smallest magnitudes)", fontsize=10)
    b.grid(alpha=0.3)
    b.legend(fontsize=8)
    save(fig, os.path.join(d, "fig8_drop_prune.png"))


def tail_mean(rows, k=5):
    """Mean held-out loss over the last k evaluations: one evaluation is noisy, a trend is not."""
    last = rows[-k:]
    return sum(r["eval_loss"] for r in last) / len(last)


def summary(d):
    """A markdown table of every run: final and last-5 mean loss, correlation, bytes, reduction."""
    names = sorted(f[:-4] for f in os.listdir(d) if f.endswith(".csv"))
    lines = ["| run | strategy | final loss | mean of last 5 | correlation | MiB sent/worker | vs ddp |",
             "|---|---|---|---|---|---|---|"]
    for name in names:
        for strategy, rows in load(d, name).items():
            last = rows[-1]
            red = last["reduction_vs_ddp"]
            red_text = "-" if math.isnan(red) else ("no traffic" if math.isinf(red) else f"{red:,.1f}x")
            lines.append(f"| {name} | {strategy} | {last['eval_loss']:.3f} | {tail_mean(rows):.3f} | "
                         f"{last['correlation']:.3f} | {last['bytes_sent_per_worker'] / 2**20:,.2f} | {red_text} |")
    with open(os.path.join(d, "summary.md"), "w") as f:
        f.write("<!-- written by scripts/plot_experiments.py from the CSV files beside it -->\n")
        f.write("\n".join(lines) + "\n")


def main():
    d = sys.argv[1] if len(sys.argv) > 1 else "docs/experiments"
    for fig in (fig_two_workers, fig_workers, fig_fraction, fig_correlation, fig_interval, fig_diloco, fig_iid,
                fig_drop_prune):
        fig(d)
    summary(d)
    print(f"plot_experiments: figures and summary.md written to {d}")


if __name__ == "__main__":
    main()
