#!/usr/bin/env python3
"""scripts/plot_experiments.py: draws docs/experiments/*.png and summary.md from the CSV files
scripts/experiments.sh writes.

usage: python3 scripts/plot_experiments.py [DIR]      (DIR defaults to docs/experiments)

A configuration is a strategy within a run. Seed 42 is the run's own file (<run>.csv); seeds
7 and 1234 are <run>_s7.csv and <run>_s1234.csv (experiment 9), except for the main
comparison at its defaults (workers4 = fraction_0.005 = interval 1, and diloco_nesterov),
whose seeds 7 and 1234 are experiment 7's seed_7.csv and seed_1234.csv. The generated
corpus's runs are generated_seed_<seed>.csv. A configuration with several seeds is drawn
as the mean over them with a band shaded from the lowest to the highest seed (min-max, not
a standard deviation); one with seed 42 alone is a plain line, and its label says so.
summary.md has every configuration's final eval loss (mean, sd, min-max, seeds), the
decisive comparisons paired by seed, and every run's last row. Seed 42's file of each
configuration is required (a missing one is an error naming it); the other seeds are used
where they exist.
"""
import math
import os
import statistics
import sys

from plotlib import (draw_series, final_stats, fmt_range, fmt_reduction, overlap, paired, plt,
                     read_csv, replica_losses, save)

COLORS = {"ddp": "#222222", "none": "#d62728", "sparta": "#1f77b4", "diloco": "#2ca02c",
          "sparta-diloco": "#9467bd", "single": "#7f7f7f"}
SEEDS = (42, 7, 1234)
# Runs at the main comparison's settings: their seeds 7 and 1234 are seed_7 and seed_1234.
MAIN = ("workers4", "fraction_0.005", "diloco_nesterov")
BAND = ("line: mean of the seeds; band: min–max over 3 seeds", "(1 seed): seed 42 only, a plain line")
BARS = ("mean of the seeds; bars: min–max over 3 seeds", "hollow: seed 42 only")
_single = set()  # the axes that show a configuration with one seed
FINAL = "final eval loss (step 2,000, nats/char)"
EVAL = "held-out loss of the averaged model (nats/char)"

DIR = "docs/experiments"
_files = {}


def load(name):
    """{strategy: rows} of DIR/name.csv, None if the file does not exist (cached)."""
    if name not in _files:
        path = os.path.join(DIR, name + ".csv")
        _files[name] = read_csv(path) if os.path.exists(path) else None
    return _files[name]


def file_names(run):
    """{seed: file name} of a run's seeds (only files that exist; seed 42 listed regardless)."""
    if run == "generated":
        names = {s: f"generated_seed_{s}" for s in SEEDS}
    else:
        names = {42: run}
        for s in SEEDS[1:]:
            names[s] = f"seed_{s}" if run in MAIN else f"{run}_s{s}"
    return {s: n for s, n in names.items() if s == 42 or os.path.exists(os.path.join(DIR, n + ".csv"))}


class Config:
    """One strategy within one run, under every seed that has it."""

    def __init__(self, run, strategy, label=None):
        self.run, self.strategy, self.label = run, strategy, label or f"{run} {strategy}"
        self.files = {}
        self.series = {}
        for seed, name in file_names(run).items():
            per = load(name)
            if per is None:
                sys.exit(f"plot_experiments: {os.path.join(DIR, name + '.csv')} is missing; "
                         "run scripts/experiments.sh first")
            if strategy in per:
                self.files[seed] = name
                self.series[seed] = per[strategy]
        if 42 not in self.series:
            sys.exit(f"plot_experiments: {os.path.join(DIR, run + '.csv')} has no {strategy} rows")

    @property
    def n(self):
        return len(self.series)

    def finals(self, key="eval_loss"):
        return {s: rows[-1][key] for s, rows in self.series.items()}

    def stats(self, key="eval_loss"):
        return final_stats(self.finals(key))

    def tail(self, k=5):
        """Mean over the seeds of the mean eval loss of the last k evaluations."""
        return statistics.fmean(statistics.fmean(r["eval_loss"] for r in rows[-k:]) for rows in self.series.values())

    def replica(self):
        v = [replica_losses(os.path.join(DIR, self.files[s] + ".txt")).get(self.strategy) for s in self.series]
        v = [x for x in v if x is not None]
        return statistics.fmean(v) if v else float("nan")

    def reduction(self):
        return self.series[42][-1]["reduction_vs_ddp"]

    def mib(self):
        return statistics.fmean(rows[-1]["bytes_sent_per_worker"] for rows in self.series.values()) / 2**20

    def seeds_note(self):
        return "" if self.n == 3 else " (1 seed)" if self.n == 1 else f" ({self.n} seeds)"

    def range_text(self, digits=3):
        return fmt_range(self.stats(), digits=digits)


def reduction_label(c):
    x = c.reduction()
    if math.isinf(x):
        return "no traffic"
    if x == 1.0:
        return "dense, every step"
    return f"{x:,.0f}x less than ddp" if x >= 10 else f"{x:.2f}x less than ddp"


def curve(ax, c, label, color=None, style="-", key="eval_loss"):
    """The configuration over the steps: mean line and min-max band, or seed 42's line."""
    if c.n == 1:
        _single.add(ax)
    draw_series(ax, c.series, label + c.seeds_note(), color, style, key=key)


def point(ax, x, c, color, label=None, marker="o"):
    """The final loss at x: mean with min-max bars, hollow for one seed."""
    s = c.stats()
    face = color if c.n > 1 else "white"
    if c.n == 1:
        _single.add(ax)
    ax.errorbar([x], [s.mean], yerr=[[s.mean - s.lo], [s.hi - s.mean]], color=color, marker=marker, mfc=face,
                capsize=3, linestyle="none", label=label)


def hline(ax, c, label, color):
    s = c.stats()
    ax.axhline(s.mean, color=color, linestyle="--", label=label + c.seeds_note())
    if c.n > 1:
        ax.axhspan(s.lo, s.hi, color=color, alpha=0.12)


def finish(ax, title, ylabel=EVAL, note=BAND, legend_loc=None, anchor=None):
    """Title, label, grid, and the legend titled with how to read it (the one-seed line only
    where a configuration of this axes has one seed)."""
    ax.set_title(title, fontsize=10)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, title="\n".join(note if ax in _single else note[:1]), title_fontsize=7, loc=legend_loc,
              bbox_to_anchor=anchor)


def fig_two_workers():
    fig, ax = plt.subplots(figsize=(7, 4.4))
    curve(ax, Config("workers1", "none"), "1 worker alone (baseline)", COLORS["single"], "--")
    for s in ("ddp", "none", "sparta"):
        c = Config("workers2", s)
        curve(ax, c, f"2 workers, {s} ({reduction_label(c)})", COLORS[s])
    ax.set_xlabel("step")
    ax.set_ylim(top=min(3.2, ax.get_ylim()[1]))
    finish(ax, "SPARTA p = 0.5% against ddp and independent replicas, 2 workers")
    save(fig, os.path.join(DIR, "fig1_two_workers.png"))


def fig_workers():
    fig, ax = plt.subplots(figsize=(7, 4.4))
    ws = [2, 4, 8]
    for s, dx in (("ddp", -0.03), ("none", 0.0), ("sparta", 0.03)):
        cs = [Config(f"workers{w}", s) for w in ws]
        ax.plot([w * 2**dx for w in ws], [c.stats().mean for c in cs], "-", color=COLORS[s], linewidth=1)
        for i, (w, c) in enumerate(zip(ws, cs)):
            point(ax, w * 2**dx, c, COLORS[s], (s if s != "sparta" else "sparta p = 0.5%") if i == 0 else None)
    hline(ax, Config("workers1", "none"), "1 worker alone", COLORS["single"])
    ax.set_xscale("log", base=2)
    ax.set_xticks(ws, [str(w) for w in ws])
    ax.set_xlabel("workers")
    finish(ax, "Final loss after 2,000 steps per worker, 2 / 4 / 8 workers", FINAL, BARS)
    save(fig, os.path.join(DIR, "fig2_workers.png"))


FRACTIONS = ["0.0005", "0.001", "0.002", "0.005", "0.01", "0.02", "0.05"]


def fig_fraction():
    fig, ax = plt.subplots(figsize=(7, 4.4))
    cs = [Config(f"fraction_{p}", "sparta") for p in FRACTIONS]
    ps = [float(p) for p in FRACTIONS]
    ax.plot(ps, [c.stats().mean for c in cs], "-", color=COLORS["sparta"], linewidth=1)
    for i, (p, c) in enumerate(zip(ps, cs)):
        point(ax, p, c, COLORS["sparta"], "sparta" if i == 0 else None)
        ax.annotate(f"{1 / p:,.0f}x", (p, c.stats().hi), textcoords="offset points", xytext=(0, 5), ha="center",
                    fontsize=7)
    hline(ax, Config("workers4", "ddp"), "ddp", COLORS["ddp"])
    hline(ax, Config("workers4", "none"), "none", COLORS["none"])
    ax.set_xscale("log")
    ax.set_xlabel("fraction p of the parameters averaged per step (labels: reduction against ddp)")
    finish(ax, "Final loss against the SPARTA fraction p, 4 workers", FINAL,
           ("mean of the seeds; bars, shading: min–max over 3 seeds", BARS[1]))
    save(fig, os.path.join(DIR, "fig3_fraction.png"))


def fig_correlation():
    fig, ax = plt.subplots(figsize=(9.5, 4.4))
    cmap = plt.get_cmap("viridis")
    for i, p in enumerate(FRACTIONS):
        curve(ax, Config(f"fraction_{p}", "sparta"), f"sparta p = {float(p) * 100:g}%",
              cmap(i / (len(FRACTIONS) - 1)), key="correlation")
    curve(ax, Config("workers4", "none"), "none", COLORS["none"], "--", key="correlation")
    ax.axhline(0.9, color="#999999", linewidth=0.8)
    ax.set_xlabel("step")
    ax.set_ylim(0, 1.02)
    finish(ax, "Correlation of the replicas' changes since initialisation, 4 workers",
           "mean pairwise correlation", legend_loc="center left", anchor=(1.01, 0.5))
    save(fig, os.path.join(DIR, "fig4_correlation.png"))


def fig_interval():
    fig, ax = plt.subplots(figsize=(10, 4.4))
    cmap = plt.get_cmap("plasma")
    hs = ["1", "5", "20", "50", "100"]
    for i, h in enumerate(hs):
        c = Config("fraction_0.005" if h == "1" else f"interval_{h}", "sparta")
        curve(ax, c, f"every {h} step{'s' if h != '1' else ''} ({reduction_label(c)})", cmap(i / (len(hs) + 0.5)))
    curve(ax, Config("workers4", "ddp"), "ddp", COLORS["ddp"], "--")
    curve(ax, Config("workers4", "none"), "none", COLORS["none"], "--")
    ax.set_xlabel("step")
    ax.set_ylim(top=min(3.2, ax.get_ylim()[1]))
    finish(ax, "SPARTA p = 0.5% averaged every H steps, 4 workers", legend_loc="center left", anchor=(1.01, 0.5))
    save(fig, os.path.join(DIR, "fig5_interval.png"))


OUTERS = ["nesterov", "sgd", "momentum", "adam", "average"]


def fig_diloco():
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4.6), sharey=True)
    sparta = Config("workers4", "sparta")
    diloco, both = Config("diloco_nesterov", "diloco"), Config("diloco_nesterov", "sparta-diloco")
    curve(a, Config("workers4", "ddp"), "ddp", COLORS["ddp"], "--")
    curve(a, sparta, f"sparta p = 0.5% ({reduction_label(sparta)})", COLORS["sparta"])
    curve(a, diloco, f"diloco H = 100 ({reduction_label(diloco)})", COLORS["diloco"])
    curve(a, both, f"sparta-diloco ({reduction_label(both)})", COLORS["sparta-diloco"])
    a.set_xlabel("step")
    a.set_ylim(top=min(3.2, a.get_ylim()[1]))
    finish(a, "DiLoCo against SPARTA + DiLoCo, 4 workers")
    cmap = plt.get_cmap("tab10")
    for i, o in enumerate(OUTERS):
        c = Config(f"diloco_{o}", "diloco")
        curve(b, c, f"{o} ({c.range_text()})", cmap(i))
    b.set_xlabel("step")
    finish(b, "DiLoCo's outer optimizers (H = 100); final loss mean [min–max]", "")
    save(fig, os.path.join(DIR, "fig6_diloco.png"))


def fig_iid():
    iid = {s: Config("workers4", s) for s in ("ddp", "none", "sparta")}
    iid["diloco"] = Config("diloco_nesterov", "diloco")
    non = {s: Config("noniid", s) for s in iid}
    strategies = list(iid)
    fig, ax = plt.subplots(figsize=(7, 4.4))
    x = range(len(strategies))
    for dx, group, label, color in ((-0.2, iid, "iid shards", "#6baed6"), (0.2, non, "non-iid shards", "#fd8d3c")):
        st = [group[s].stats() for s in strategies]
        notes = {group[s].seeds_note() for s in strategies}
        err = [[v.mean - v.lo for v in st], [v.hi - v.mean for v in st]] if any(v.n > 1 for v in st) else None
        ax.bar([i + dx for i in x], [v.mean for v in st], 0.4, color=color, label=label + "".join(sorted(notes)),
               yerr=err, capsize=3)
        for i, v in enumerate(st):
            ax.annotate(f"{v.mean:.3f}", (i + dx, v.hi), ha="center", va="bottom", fontsize=7)
    ax.set_xticks(list(x), strategies)
    lo = min(min(iid[s].stats().lo, non[s].stats().lo) for s in strategies)
    ax.set_ylim(bottom=lo - 0.3)
    if any(c.n == 1 for c in list(iid.values()) + list(non.values())):
        _single.add(ax)
    finish(ax, "iid against non-iid (contiguous) shards, 4 workers, final loss", FINAL,
           (BARS[0], "(1 seed): seed 42 only"))
    save(fig, os.path.join(DIR, "fig7_iid.png"))


def fig_drop_prune():
    base = Config("diloco_nesterov", "diloco")
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4.6), sharey=True)
    curve(a, base, f"no drops ({base.range_text()})", COLORS["diloco"])
    for q, col in (("0.25", "#ff7f0e"), ("0.5", "#d62728")):
        c = Config(f"drop_{q}", "diloco")
        curve(a, c, f"{float(q) * 100:g}% dropped ({c.range_text()})", col)
    a.set_xlabel("step")
    a.set_ylim(top=min(3.2, a.get_ylim()[1]))
    finish(a, "DiLoCo with dropped outer gradients, 4 workers")
    curve(b, base, f"no pruning ({base.range_text()})", COLORS["diloco"])
    for q, col in (("0.5", "#8c564b"), ("0.75", "#e377c2")):
        c = Config(f"prune_{q}", "diloco")
        curve(b, c, f"{float(q) * 100:g}% pruned ({c.range_text()})", col)
    b.set_xlabel("step")
    finish(b, "DiLoCo with pruned outer gradients (smallest magnitudes)", "")
    save(fig, os.path.join(DIR, "fig8_drop_prune.png"))


# The configurations of the summary, by experiment: (label, run, strategy).
CONFIGS = [
    ("1–2", [("1 worker alone", "workers1", "none")]
     + [(f"{s}, {w} workers", f"workers{w}", s) for w in (2, 4, 8) for s in ("ddp", "none", "sparta")]),
    ("3–4", [(f"SPARTA p = {float(p) * 100:g}%", f"fraction_{p}", "sparta") for p in FRACTIONS]),
    ("5", [(f"SPARTA 0.5% every {h} steps", f"interval_{h}", "sparta") for h in (5, 20, 50, 100)]),
    ("6", [("DiLoCo H = 100, Nesterov", "diloco_nesterov", "diloco"),
           ("SPARTA + DiLoCo", "diloco_nesterov", "sparta-diloco")]
     + [(f"DiLoCo H = 100, {o}", f"diloco_{o}", "diloco") for o in OUTERS[1:]]
     + [("generated corpus: DiLoCo", "generated", "diloco"),
        ("generated corpus: SPARTA + DiLoCo", "generated", "sparta-diloco")]),
    ("7", [(f"non-iid: {s}", "noniid", s) for s in ("ddp", "none", "sparta", "diloco")]),
    ("8", [(f"DiLoCo, {q * 100:g}% dropped", f"drop_{q}", "diloco") for q in (0.25, 0.5)]
     + [(f"DiLoCo, {q * 100:g}% pruned", f"prune_{q}", "diloco") for q in (0.5, 0.75)]),
]


def config(label):
    for _, cs in CONFIGS:
        for lab, run, strategy in cs:
            if lab == label:
                return Config(run, strategy, lab)
    raise KeyError(label)


# Paired comparisons (B against A, the same seed under both): the decisive ones first.
PAIRS = [
    ("decisive", [(f"ddp, {w} workers", f"sparta, {w} workers") for w in (2, 4, 8)]
     + [("DiLoCo H = 100, Nesterov", "SPARTA + DiLoCo"),
        ("generated corpus: DiLoCo", "generated corpus: SPARTA + DiLoCo")]
     + [("DiLoCo H = 100, Nesterov", f"DiLoCo H = 100, {o}") for o in OUTERS[1:]]
     + [("DiLoCo H = 100, Nesterov", f"DiLoCo, {q}") for q in ("25% dropped", "50% dropped", "50% pruned")]),
    ("supporting", [("1 worker alone", f"sparta, {w} workers") for w in (2, 4, 8)]
     + [("1 worker alone", f"none, {w} workers") for w in (2, 4, 8)]
     + [(f"none, {w} workers", f"sparta, {w} workers") for w in (2, 4, 8)]
     + [("ddp, 4 workers", f"SPARTA p = {p}%") for p in ("0.1", "0.2", "2")]
     + [("SPARTA p = 0.1%", "SPARTA p = 0.2%")]
     + [("SPARTA p = 0.5%", f"SPARTA 0.5% every {h} steps") for h in (5, 20)]
     + [("none, 4 workers", f"SPARTA 0.5% every {h} steps") for h in (5, 20)]
     + [("ddp, 4 workers", f"DiLoCo H = 100, {o}") for o in ("Nesterov", "sgd", "average", "adam")]),
]


def summary():
    lines = ["<!-- written by scripts/plot_experiments.py from the CSV files beside it -->",
             "# MLP experiments: summary", "",
             "Final eval loss = the averaged model's held-out loss at step 2,000 (nats per character).",
             "Seeds: 42 (`<run>.csv`), 7 and 1234 (`<run>_s7.csv`, `<run>_s1234.csv`; for workers4,",
             "fraction_0.005 and diloco_nesterov: `seed_7.csv`, `seed_1234.csv`; generated corpus:",
             "`generated_seed_<seed>.csv`). sd = sample standard deviation over the seeds; min–max =",
             "the lowest and highest seed. A difference whose min–max ranges overlap is not a finding.",
             "", "## Configurations", "",
             "| exp. | configuration | run | seeds | final eval loss, mean | sd | min–max | last 5 evaluations, mean | "
             "replicas alone, mean | correlation, mean | MiB sent/worker | less traffic than ddp |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for exp, cs in CONFIGS:
        for label, run, strategy in cs:
            c = Config(run, strategy, label)
            s = c.stats()
            sd = "—" if math.isnan(s.sd) else f"{s.sd:.3f}"
            mm = "—" if s.n == 1 else f"{s.lo:.3f}–{s.hi:.3f}"
            lines.append(f"| {exp} | {label} | {run} | {s.n} | {s.mean:.3f} | {sd} | {mm} | {c.tail():.3f} | "
                         f"{c.replica():.3f} | {c.stats('correlation').mean:.3f} | {c.mib():,.2f} | "
                         f"{fmt_reduction(c.reduction())} |")
    for kind, pairs in PAIRS:
        lines += ["", f"## Paired differences ({kind})", "",
                  "B − A of the final eval loss under the same seed (negative: B is better).", "",
                  "| B against A | seeds | B − A per seed (42, 7, 1234) | mean | B better in | "
                  "A: mean [min–max] | B: mean [min–max] | ranges overlap |",
                  "|---|---|---|---|---|---|---|---|"]
        for la, lb in pairs:
            a, b = config(la), config(lb)
            d = paired(a.finals(), b.finals())
            order = [s for s in SEEDS if s in d]
            per = ", ".join(f"{d[s]:+.3f}" for s in order)
            better = sum(1 for v in d.values() if v < 0)
            ov = "— (1 seed)" if min(a.n, b.n) == 1 else "yes" if overlap(a.stats(), b.stats()) else "no"
            lines.append(f"| {lb} against {la} | {len(d)} | {per} | {statistics.fmean(d.values()):+.3f} | "
                         f"{better} of {len(d)} | {a.range_text()} | {b.range_text()} | {ov} |")
    lines += ["", "## First evaluation at which the correlation reaches 0.9 (4 workers)", "",
              "| configuration | seeds | per seed (42, 7, 1234) | correlation at step 1,000, mean | at step 2,000, mean |",
              "|---|---|---|---|---|"]
    for label, run, strategy in [(f"SPARTA p = {float(p) * 100:g}%", f"fraction_{p}", "sparta") for p in FRACTIONS] + [
            ("SPARTA 0.5% every 5 steps", "interval_5", "sparta"), ("none, 4 workers", "workers4", "none")]:
        c = Config(run, strategy, label)
        first = []
        for s in SEEDS:
            if s in c.series:
                hit = [r["step"] for r in c.series[s] if r["correlation"] >= 0.9]
                first.append(f"{hit[0]:,.0f}" if hit else "never")
        at1000 = statistics.fmean(r["correlation"] for rows in c.series.values() for r in rows if r["step"] == 1000)
        lines.append(f"| {label} | {c.n} | {', '.join(first)} | {at1000:.3f} | {c.stats('correlation').mean:.3f} |")
    lines += ["", "## Every run", "",
              "| run | strategy | final loss | mean of last 5 | correlation | MiB sent/worker | vs ddp |",
              "|---|---|---|---|---|---|---|"]
    names = sorted(f[:-4] for f in os.listdir(DIR) if f.endswith(".csv"))
    for name in names:
        for strategy, rows in load(name).items():
            last = rows[-1]
            red = last["reduction_vs_ddp"]
            red_text = "-" if math.isnan(red) else ("no traffic" if math.isinf(red) else f"{red:,.1f}x")
            tail = statistics.fmean(r["eval_loss"] for r in rows[-5:])
            lines.append(f"| {name} | {strategy} | {last['eval_loss']:.3f} | {tail:.3f} | "
                         f"{last['correlation']:.3f} | {last['bytes_sent_per_worker'] / 2**20:,.2f} | {red_text} |")
    with open(os.path.join(DIR, "summary.md"), "w") as f:
        f.write("\n".join(lines) + "\n")


def main():
    global DIR
    DIR = sys.argv[1] if len(sys.argv) > 1 else "docs/experiments"
    for fig in (fig_two_workers, fig_workers, fig_fraction, fig_correlation, fig_interval, fig_diloco, fig_iid,
                fig_drop_prune):
        fig()
    summary()
    print(f"plot_experiments: figures and summary.md written to {DIR}")


if __name__ == "__main__":
    main()
