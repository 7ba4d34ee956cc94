#!/usr/bin/env python3
"""Figures and tables for docs/experiments.md, sections "The GPT at its default size, three
seeds" and "The GPT at the research size" (and docs/demo.md's DeMo runs, D), from the CSVs scripts/gpt_experiments.sh writes
(docs/experiments/gpt/<run>_s<seed>.csv).

    python3 scripts/plot_gpt_experiments.py [docs/experiments/gpt]

Every configuration is a (run, strategy) pair measured under several seeds. A band is the
mean over the seeds of the eval loss at each evaluation, shaded from the lowest to the
highest seed (min-max, not a standard deviation); the tables give the final eval loss
(the last step) as mean, sample standard deviation and min-max over the seeds, the reduction
of bytes against ddp, and paired comparisons (the same seed under two configurations).
Writes fig*.png and summary.md into the folder. Configurations with no runs are left out.
"""
import math
import os
import statistics
import sys

import plotlib
from plotlib import plt

OUT = sys.argv[1] if len(sys.argv) > 1 else "docs/experiments/gpt"
FILES = plotlib.seed_files(OUT, r"(?P<name>.+)_s(?P<seed>\d+)\.csv")
# runs[run][seed][strategy] = rows in step order
RUNS = {run: {seed: plotlib.read_csv(path) for seed, path in per.items()} for run, per in FILES.items()}
# replica[run][seed][strategy] = the replicas' own final eval loss (from the TXT table)
REPLICA = {run: {seed: plotlib.replica_losses(path[:-4] + ".txt") for seed, path in per.items()
                 if os.path.exists(path[:-4] + ".txt")} for run, per in FILES.items()}


class Config:
    """One configuration: a strategy within a run, over every seed that has it."""

    def __init__(self, label, run, strategy):
        self.label, self.run, self.strategy = label, run, strategy
        self.series = {
            seed: per[strategy] for seed, per in RUNS.get(run, {}).items() if strategy in per
        }

    def __bool__(self):
        return bool(self.series)

    @property
    def seeds(self):
        return sorted(self.series)

    def final(self, key="eval_loss"):
        return plotlib.finals(self.series, key)

    def stats(self, key="eval_loss"):
        return tuple(plotlib.final_stats(self.final(key)))

    def band(self, key="eval_loss"):
        """steps, mean, low, high over the seeds (only steps every seed has)."""
        return plotlib.band(self.series, key)

    def replica(self):
        v = [REPLICA.get(self.run, {}).get(s, {}).get(self.strategy) for s in self.series]
        v = [x for x in v if x is not None]
        return statistics.mean(v) if v else float("nan")

    def reduction(self):
        r = [rows[-1].get("reduction_vs_ddp", float("nan")) for rows in self.series.values()]
        return statistics.mean(r)


fmt_reduction = plotlib.fmt_reduction


def table(configs, title):
    lines = [f"### {title}", "",
             "| configuration | seeds | final eval loss, mean | sd | min–max | replicas alone, mean | less traffic than ddp | correlation, mean |",
             "|---|---|---|---|---|---|---|---|"]
    for c in configs:
        if not c:
            continue
        m, sd, lo, hi, n = c.stats()
        corr = c.stats("correlation")[0]
        lines.append(f"| {c.label} | {n} | {m:.3f} | {sd:.3f} | {lo:.3f}–{hi:.3f} | {c.replica():.3f} | "
                     f"{fmt_reduction(c.reduction())} | {corr:.3f} |")
    lines.append("")
    return lines


def paired(a, b):
    """Per-seed difference b - a of the final eval loss over the seeds both have."""
    return plotlib.paired(a.final(), b.final())


def pair_lines(pairs, title):
    lines = [f"### {title}", "",
             "| comparison (B against A) | seeds | B − A per seed (seeds in increasing order: 7, 42, 1234) | B better in | ranges overlap |",
             "|---|---|---|---|---|"]
    for a, b in pairs:
        if not a or not b:
            continue
        d = paired(a, b)
        if not d:
            continue
        _, _, alo, ahi, _ = a.stats()
        _, _, blo, bhi, _ = b.stats()
        overlap = "yes" if plotlib.overlap((alo, ahi), (blo, bhi)) else "no"
        per = ", ".join(f"{d[s]:+.3f}" for s in sorted(d))
        better = sum(1 for v in d.values() if v < 0)
        lines.append(f"| {b.label} vs {a.label} | {len(d)} | {per} | {better} of {len(d)} | {overlap} |")
    lines.append("")
    return lines


COLORS = plt.rcParams["axes.prop_cycle"].by_key()["color"]


def bands(ax, configs, title, ylim=None):
    for i, c in enumerate(x for x in configs if x):
        n = len(c.seeds)
        plotlib.draw_band(ax, *c.band(), color=COLORS[i % len(COLORS)], label=f"{c.label} ({n} seed{'s' if n > 1 else ''})",
                          alpha=0.2, linewidth=1.5)
    ax.set_xlabel("step")
    ax.set_ylabel("eval loss (nats/char), averaged model")
    ax.set_title(title)
    if ylim:
        ax.set_ylim(*ylim)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)


def save(fig, name):
    plotlib.save(fig, os.path.join(OUT, name))


def any_(configs):
    return any(bool(c) for c in configs)


def points(ax, xs, configs, label, color, marker="o"):
    xx, mm, lo, hi = [], [], [], []
    for x, c in zip(xs, configs):
        if c:
            m, _, a, b, _ = c.stats()
            xx.append(x)
            mm.append(m)
            lo.append(m - a)
            hi.append(b - m)
    if xx:
        ax.errorbar(xx, mm, yerr=[lo, hi], color=color, marker=marker, capsize=4, label=label)


def hline(ax, c, label, color):
    if c:
        m, _, lo, hi, _ = c.stats()
        ax.axhline(m, color=color, linestyle="--", label=label)
        ax.axhspan(lo, hi, color=color, alpha=0.12)


def workers_axis(ax, ws, title):
    """A final-loss-against-workers axis (log 2, one tick per world size)."""
    ax.set_xscale("log", base=2)
    ax.set_xticks(ws, [str(w) for w in ws])
    ax.set_xlabel("workers")
    ax.set_ylabel("final eval loss (mean, min–max)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)


def lowest_per_seed(c):
    """Each seed's row with the lowest eval loss (increasing seed order)."""
    return [min(rows, key=lambda r: r["eval_loss"]) for _, rows in sorted(c.series.items())]


def fmt_lowest(best):
    return ", ".join("%.3f (%s)" % (r["eval_loss"], f"{r['step']:,.0f}") for r in best)


def first_at_or_below(c, target):
    """Each seed's first evaluated step with eval loss <= target, as text ("never" if none)."""
    out = []
    for _, rows in sorted(c.series.items()):
        hit = [r["step"] for r in rows if r["eval_loss"] <= target]
        out.append(f"{hit[0]:,.0f}" if hit else "never")
    return ", ".join(out)


summary = ["# The GPT: three-seed summary", "",
           "Written by `scripts/plot_gpt_experiments.py` from the CSVs in this folder. Final eval loss",
           "= the averaged model's held-out loss at the last step (2,000; 1,000 at the research size,",
           "sections R) in nats per character; sd = sample",
           "standard deviation over the seeds; the figures shade min–max over the seeds. Every",
           "per-seed list is in increasing seed order (7, 42, 1234).", ""]
YLIM = (1.4, 3.4)

# 1. Workers.
W = {w: [Config(f"{s}, {w} workers", f"workers{w}", s) for s in ("ddp", "none", "sparta")] for w in (2, 4, 8)}
if any_(sum(W.values(), [])):
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(12, 4.5))
    bands(a1, [Config(n, "workers4", s) for n, s in (("ddp", "ddp"), ("independent", "none"), ("SPARTA 0.5%", "sparta"))],
          "4 workers (mean, min–max over seeds)", YLIM)
    for i, (s, lab) in enumerate((("ddp", "ddp"), ("none", "independent"), ("sparta", "SPARTA 0.5%"))):
        points(a2, [2, 4, 8], [Config(lab, f"workers{w}", s) for w in (2, 4, 8)], lab, COLORS[i])
    hline(a2, Config("1 worker", "workers1", "none"), "1 worker alone", "grey")
    workers_axis(a2, [2, 4, 8], "final eval loss against workers")
    save(fig, "fig1_workers.png")
    summary += table([Config("1 worker alone", "workers1", "none")] + sum(W.values(), []), "1. ddp, independent replicas and SPARTA 0.5% on 2, 4, 8 workers")
    one = Config("1 worker alone", "workers1", "none")
    summary += pair_lines([(W[w][0], W[w][2]) for w in (2, 4, 8)] + [(W[w][0], W[w][1]) for w in (2, 4, 8)]
                          + [(one, W[w][2]) for w in (2, 4, 8)] + [(one, W[w][0]) for w in (2, 4, 8)],
                          "1. paired")

# 2. Fraction p.
P = [(0.0005, "fraction_0.0005"), (0.001, "fraction_0.001"), (0.002, "fraction_0.002"), (0.005, "workers4"), (0.02, "fraction_0.02"),
     (0.05, "fraction_0.05")]
PC = [Config(f"SPARTA p = {p * 100:g}%", run, "sparta") for p, run in P]
if any_(PC[:2] + PC[3:]):
    ddp4, none4 = Config("ddp", "workers4", "ddp"), Config("independent", "workers4", "none")
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(12, 4.5))
    points(a1, [p for p, _ in P], PC, "SPARTA", COLORS[2])
    hline(a1, ddp4, "ddp", COLORS[0])
    hline(a1, none4, "independent", COLORS[1])
    a1.set_xscale("log")
    a1.set_xlabel("fraction p averaged per step")
    a1.set_ylabel("final eval loss (mean, min–max)")
    a1.set_title("SPARTA's fraction, 4 workers")
    a1.grid(alpha=0.3)
    a1.legend(fontsize=8)
    for i, c in enumerate(x for x in PC if x):
        steps, mean, low, high = c.band("correlation")
        a2.plot(steps, mean, color=COLORS[i], label=c.label)
        a2.fill_between(steps, low, high, color=COLORS[i], alpha=0.2, linewidth=0)
    a2.axhline(0.9, color="grey", linestyle=":")
    a2.set_xlabel("step")
    a2.set_ylabel("correlation of the replicas' changes")
    a2.set_title("correlation (mean, min–max)")
    a2.grid(alpha=0.3)
    a2.legend(fontsize=8)
    save(fig, "fig2_fraction.png")
    summary += table([ddp4, none4] + PC, "2. SPARTA's fraction p (4 workers)")
    summary += pair_lines([(ddp4, c) for c in PC], "2. paired against ddp")
    lines = ["### 2. first evaluation at which the correlation reaches 0.9", "",
             "| configuration | per seed | correlation at step 1,000, mean |", "|---|---|---|"]
    for c in PC:
        if not c:
            continue
        first = []
        for s in c.seeds:
            hit = [r["step"] for r in c.series[s] if r["correlation"] >= 0.9]
            first.append(f"{hit[0]:,.0f}" if hit else "never")
        at1000 = statistics.mean(r["correlation"] for rows in c.series.values() for r in rows if r["step"] == 1000)
        lines.append(f"| {c.label} | {', '.join(first)} | {at1000:.3f} |")
    summary += lines + [""]

# 3. Interval H.
HC = [Config("SPARTA 0.5%, H = 1", "workers4", "sparta")] + [
    Config(f"SPARTA 0.5%, H = {h}", f"interval_{h}", "sparta") for h in (5, 20, 50)]
if any_(HC[1:]):
    fig, ax = plt.subplots(figsize=(7, 4.5))
    bands(ax, [Config("ddp", "workers4", "ddp")] + HC + [Config("independent", "workers4", "none")],
          "SPARTA 0.5% every H steps, 4 workers", YLIM)
    save(fig, "fig3_interval.png")
    summary += table(HC, "3. SPARTA 0.5% every H steps")
    summary += pair_lines([(HC[0], c) for c in HC[1:]] + [(Config("independent", "workers4", "none"), c) for c in HC[1:]],
                          "3. paired")

# 4. DiLoCo vs SPARTA + DiLoCo.
D = Config("DiLoCo H = 100", "diloco", "diloco")
SD = Config("SPARTA + DiLoCo", "diloco", "sparta-diloco")
if D or SD:
    fig, ax = plt.subplots(figsize=(7, 4.5))
    bands(ax, [Config("ddp", "workers4", "ddp"), D, SD, Config("SPARTA 0.5%", "workers4", "sparta")],
          "DiLoCo (Nesterov, H = 100) and SPARTA + DiLoCo", YLIM)
    save(fig, "fig4_diloco.png")
    summary += table([Config("ddp", "workers4", "ddp"), D, SD, Config("SPARTA 0.5%", "workers4", "sparta")],
                     "4. DiLoCo against SPARTA + DiLoCo (4 workers)")
    summary += pair_lines([(D, SD), (Config("ddp", "workers4", "ddp"), D), (Config("SPARTA 0.5%", "workers4", "sparta"), D)],
                          "4. paired")

# 5. Outer optimizers.
OC = [Config("nesterov, H = 100", "diloco", "diloco")] + [
    Config(f"{o}, H = 100", f"outer_{o}_h100", "diloco") for o in ("sgd", "momentum", "adam", "average")]
OH = [Config(f"{o}, H = {h}", f"outer_{o}_h{h}", "diloco")
      for o in ("nesterov", "sgd", "momentum", "adam", "average") for h in (50, 500)]
if any_(OC[1:]):
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(12, 4.5))
    bands(a1, [Config("ddp", "workers4", "ddp")] + OC, "DiLoCo's outer optimizers, H = 100", YLIM)
    present = [c for c in OH if c]
    if present:
        names = sorted({c.label.split(",")[0] for c in present})
        for i, o in enumerate(names):
            cs = [Config(o, f"outer_{o}_h{h}", "diloco") if h != 100 else
                  (OC[0] if o == "nesterov" else Config(o, f"outer_{o}_h100", "diloco")) for h in (50, 100, 500)]
            points(a2, [50, 100, 500], cs, o, COLORS[i])
        hline(a2, Config("ddp", "workers4", "ddp"), "ddp", "grey")
        a2.set_xscale("log")
        a2.set_xticks([50, 100, 500], ["50", "100", "500"])
        a2.set_xlabel("H (inner steps per outer step)")
        a2.set_ylabel("final eval loss (mean, min–max)")
        a2.set_title("final eval loss against H")
        a2.grid(alpha=0.3)
        a2.legend(fontsize=8)
    else:
        a2.axis("off")
    save(fig, "fig5_outer.png")
    summary += table(OC + [c for c in OH if c], "5. DiLoCo's outer optimizers (4 workers)")
    summary += pair_lines([(OC[0], c) for c in OC[1:]] + [(Config("ddp", "workers4", "ddp"), c) for c in OC],
                          "5. paired")

# 6. Dropped communication and pruning.
DP = [Config("DiLoCo H = 100", "diloco", "diloco"), Config("25% dropped", "drop_0.25", "diloco"),
      Config("50% dropped", "drop_0.5", "diloco"), Config("50% pruned", "prune_0.5", "diloco")]
if any_(DP[1:]):
    fig, ax = plt.subplots(figsize=(7, 4.5))
    bands(ax, DP, "DiLoCo (Nesterov, H = 100): drops and pruning", YLIM)
    save(fig, "fig6_drop_prune.png")
    summary += table(DP, "6. DiLoCo with dropped communication and pruned outer gradients")
    lines = ["| configuration | perplexity against DiLoCo, per seed | mean |", "|---|---|---|"]
    for c in DP[1:]:
        d = paired(DP[0], c)
        if d:
            pct = [100 * (math.exp(v) - 1) for v in (d[s] for s in sorted(d))]
            lines.append(f"| {c.label} | {', '.join(f'{x:+.1f}%' for x in pct)} | {statistics.mean(pct):+.1f}% |")
    summary += ["### 6. perplexity change, paired by seed", ""] + lines + [""]
    summary += pair_lines([(DP[0], c) for c in DP[1:]], "6. paired")

# 7. Topologies.
TC = [Config("all-reduce", "workers8", "sparta"), Config("gossip", "topology_gossip", "sparta"),
      Config("exponential", "topology_exponential", "sparta"), Config("islands of 4", "topology_islands4", "sparta")]
if any_(TC[1:]):
    fig, ax = plt.subplots(figsize=(7, 4.5))
    bands(ax, [Config("ddp", "workers8", "ddp")] + TC + [Config("independent", "workers8", "none")],
          "SPARTA 0.5% on 8 workers, by topology", YLIM)
    save(fig, "fig7_topology.png")
    summary += table([Config("ddp", "workers8", "ddp")] + TC + [Config("independent", "workers8", "none")],
                     "7. SPARTA 0.5% on 8 workers: topologies")
    summary += pair_lines([(TC[0], c) for c in TC[1:]], "7. paired against all-reduce")

# 8. Topologies at 16 workers.
T16 = [Config("all-reduce, 16 workers", "topology16_allreduce", "sparta"),
       Config("gossip, 16 workers", "topology16_gossip", "sparta"),
       Config("exponential, 16 workers", "topology16_exponential", "sparta"),
       Config("islands of 4, 16 workers", "topology16_islands4", "sparta")]
if any_(T16):
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(12, 4.5))
    bands(a1, T16, "SPARTA 0.5% on 16 workers, by topology", (1.6, 2.6))
    for i, (lab, c8, c16) in enumerate(zip(("all-reduce", "gossip", "exponential", "islands of 4"), TC, T16)):
        points(a2, [8, 16], [c8, c16], lab, COLORS[i])
    hline(a2, Config("1 worker", "workers1", "none"), "1 worker alone", "grey")
    workers_axis(a2, [8, 16], "topologies at 8 and 16 workers")
    save(fig, "fig8_topology16.png")
    summary += table(T16, "8. SPARTA 0.5% on 16 workers: topologies")
    summary += pair_lines([(T16[0], c) for c in T16[1:]] + [(a, b) for a, b in zip(TC, T16)],
                          "8. paired against all-reduce at 16 workers, and 16 workers against 8")

# 9. A batch of 16 windows per worker per step instead of 4.
B16 = [Config("ddp, batch 16", "batch16", "ddp"), Config("SPARTA 0.5%, batch 16", "batch16", "sparta"),
       Config("DiLoCo H = 100, batch 16", "batch16", "diloco")]
B4 = [Config("ddp, batch 4", "workers4", "ddp"), Config("SPARTA 0.5%, batch 4", "workers4", "sparta"),
      Config("DiLoCo H = 100, batch 4", "diloco", "diloco")]
if any_(B16):
    fig, ax = plt.subplots(figsize=(7, 4.5))
    bands(ax, B16 + B4, "default size, 4 workers: batch 16 against batch 4", (1.2, 3.0))
    save(fig, "fig9_batch.png")
    summary += table(B16 + B4, "9. batch 16 against batch 4 (default size, 4 workers)")
    summary += pair_lines([(B16[0], B16[1]), (B16[0], B16[2]), (B4[0], B4[1]), (B4[0], B4[2])],
                          "9. paired against ddp at the same batch")

# R. The research size.
RC = [Config("ddp", "research", "ddp"), Config("SPARTA 0.5%", "research", "sparta"),
      Config("DiLoCo H = 50", "research", "diloco"), Config("SPARTA + DiLoCo", "research", "sparta-diloco"),
      Config("independent", "research_none", "none")]
if any_(RC):
    fig, ax = plt.subplots(figsize=(7, 4.5))
    bands(ax, RC, "research size (1.2M parameters), 4 workers", (1.0, 3.0))
    save(fig, "figR_research.png")
    summary += table(RC, "R. the research size (4 workers, 1,000 steps; final = step 1,000)")
    lines = ["### R. lowest eval loss over the run (any evaluation), per seed", "",
             "| configuration | per seed (step) | mean |", "|---|---|---|"]
    for c in RC:
        if not c:
            continue
        best = lowest_per_seed(c)
        lines.append(f"| {c.label} | {fmt_lowest(best)} | {statistics.mean(r['eval_loss'] for r in best):.3f} |")
    summary += lines + [""]
    marks = (250, 500, 750, 1000)
    lines = ["### R. eval loss during the run (mean over the seeds)", "",
             "| configuration | " + " | ".join(f"step {m:,}" for m in marks) + " | first step at or below 1.55, per seed |",
             "|---|" + "---|" * (len(marks) + 1)]
    for c in RC:
        if not c:
            continue
        steps, mean, _, _ = c.band()
        at = dict(zip(steps, mean))
        lines.append(f"| {c.label} | " + " | ".join(f"{at[m]:.3f}" if m in at else "—" for m in marks)
                     + f" | {first_at_or_below(c, 1.55)} |")
    summary += lines + [""]
    summary += pair_lines([(RC[0], RC[1]), (RC[0], RC[2]), (RC[0], RC[3]), (RC[2], RC[3]), (RC[1], RC[2])],
                          "R. paired")

# R2. More of the seeds' questions at the research size (seed 42 unless more were run).
R2 = [Config("SPARTA p = 0.1%", "research_fraction_0.001", "sparta"),
      Config("SPARTA p = 5%", "research_fraction_0.05", "sparta"),
      Config("SPARTA 0.5% every 20 steps", "research_interval_20", "sparta"),
      Config("DiLoCo H = 50, plain averaging", "research_outer_average", "diloco"),
      Config("DiLoCo H = 50, 50% dropped", "research_drop_0.5", "diloco"),
      Config("DiLoCo H = 50, 50% pruned", "research_prune_0.5", "diloco")]
if any_(R2):
    fig, ax = plt.subplots(figsize=(7, 4.5))
    bands(ax, [RC[0], RC[1], RC[2]] + R2, "research size: more configurations", (1.0, 3.0))
    save(fig, "figR2_research.png")
    summary += table([RC[0], RC[1], RC[2]] + R2, "R2. more configurations at the research size")
    lines = ["### R2. lowest eval loss over the run, and the first step at or below 1.55, per seed", "",
             "| configuration | lowest (step) | first step at or below 1.55 |", "|---|---|---|"]
    for c in R2:
        if not c:
            continue
        lines.append(f"| {c.label} | {fmt_lowest(lowest_per_seed(c))} | {first_at_or_below(c, 1.55)} |")
    summary += lines + [""]
    summary += pair_lines([(RC[1], c) for c in R2[:3]] + [(RC[2], c) for c in R2[3:]] + [(RC[0], c) for c in R2],
                          "R2. paired (same seed) against SPARTA 0.5%, DiLoCo H = 50 (Nesterov) and ddp")

# D. DeMo against ddp, SPARTA 0.5% and DiLoCo H = 100, at DeMo's default k and at k matched
#    to DiLoCo's and SPARTA's bytes; loss against bytes and against modelled wall time.
DB = [Config("ddp", "demo_base", "ddp"), Config("SPARTA 0.5%", "demo_base", "sparta"),
      Config("DiLoCo H = 100", "demo_base", "diloco")]
DD = [Config("DeMo k = 32 (default)", "demo_k32", "demo"), Config("shared DeMo k = 32", "demo_k32", "demo-shared"),
      Config("DeMo k = 8 (DiLoCo's bytes)", "demo_k8", "demo"),
      Config("shared DeMo k = 20 (DiLoCo's bytes)", "demo_shared_k20", "demo-shared"),
      Config("DeMo k = 4 (SPARTA's bytes)", "demo_k4", "demo"),
      Config("shared DeMo k = 10 (SPARTA's bytes)", "demo_shared_k10", "demo-shared")]
if any_(DD):
    fig, (a1, a2, a3) = plt.subplots(1, 3, figsize=(18, 4.8))
    bands(a1, DB + DD, "DeMo and the others, 4 workers (mean, min–max)", (1.4, 3.4))
    for i, c in enumerate(x for x in DB + DD if x):
        m, _, lo, hi, _ = c.stats()
        sent = statistics.mean(rows[-1]["bytes_sent_per_worker"] for rows in c.series.values()) / 2**20
        a2.errorbar([sent], [m], yerr=[[m - lo], [hi - m]], color=COLORS[i % len(COLORS)], marker="o", capsize=4,
                    label=c.label)
        steps, mean, _, _ = c.band("sim_wall_s")
        _, loss, _, _ = c.band()
        a3.plot(mean, loss, color=COLORS[i % len(COLORS)], label=c.label)
    a2.set_xscale("log")
    a2.set_xlabel("MiB sent per worker (2,000 steps)")
    a2.set_ylabel("final eval loss (mean, min–max)")
    a2.set_title("loss against bytes")
    a2.grid(alpha=0.3)
    a2.legend(fontsize=7)
    a3.set_xscale("log")
    a3.set_xlabel("modelled wall time, --network internet (s)")
    a3.set_ylabel("eval loss (mean over seeds)")
    a3.set_title("loss against modelled wall time")
    a3.set_ylim(1.4, 3.4)
    a3.grid(alpha=0.3)
    a3.legend(fontsize=7)
    save(fig, "figD_demo.png")
    summary += table(DB + DD, "D. DeMo against ddp, SPARTA 0.5% and DiLoCo H = 100 (4 workers)")
    lines = ["### D. modelled wall time of the 2,000 steps (--network internet), mean over the seeds", "",
             "| configuration | seconds |", "|---|---|"]
    for c in DB + DD:
        if c:
            lines.append(f"| {c.label} | {statistics.mean(rows[-1]['sim_wall_s'] for rows in c.series.values()):.1f} |")
    summary += lines + [""]
    summary += pair_lines([(DB[0], c) for c in DD] + [(DB[2], DD[2]), (DB[2], DD[3]), (DB[1], DD[4]), (DB[1], DD[5]),
                                                      (DD[0], DD[1]), (DD[2], DD[3]), (DD[4], DD[5])],
                          "D. paired: against ddp, at matched bytes, and top-k against shared")

with open(os.path.join(OUT, "summary.md"), "w") as f:
    f.write("\n".join(summary))
print("\n".join(summary))
