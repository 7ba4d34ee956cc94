"""scripts/plotlib.py: what the plot scripts share (plot_experiments.py, plot_elastic.py,
plot_streaming.py; meant for plot_gpt_experiments.py too).

    import plotlib                  # sets matplotlib's Agg backend (files only, no display)
    from plotlib import plt

- reading:   read_rows(path), read_csv(path) -> {strategy: [row, ...]}, last_row(path),
             replica_losses(txt_path) -> {strategy: the replicas' own final loss}
- seeds:     seed_files(dir, regex) -> {name: {seed: path}}, seed_paths(dir, regex) ->
             {seed: path}; finals(series) -> {seed: the last row's value}
- bands:     band(series) -> steps, mean, min, max over the seeds at the steps they all have;
             draw_band(ax, ...) draws the mean line and shades min-max (nothing for one seed)
- numbers:   final_stats(values) -> Stats(mean, sd, lo, hi, n); fmt_range(...) writes
             "mean [min–max]"; paired(a, b) is b - a per shared seed; overlap(a, b)

A "series" is {seed: rows}, rows a list of dicts in step order, as read_csv gives them
for one strategy. Numbers are floats; the strategy column stays text; empty cells are
left out of the row (the columns a run does not have, such as sim_wall_s without
--network, are "nan" and become float nan).
"""
import csv
import glob
import math
import os
import re
import statistics
from collections import namedtuple

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402,F401  (re-exported)

TEXT_COLUMNS = ("strategy",)


def read_rows(path):
    """The rows of one trickle-sim CSV in file order: dicts of floats (text columns kept as
    text, empty cells left out). A file with no rows is an error naming it."""
    with open(path, newline="") as fh:
        rows = [{k: (v if k in TEXT_COLUMNS else float(v)) for k, v in r.items() if v != ""}
                for r in csv.DictReader(fh)]
    if not rows:
        raise SystemExit(f"{path}: no rows")
    return rows


def read_csv(path):
    """{strategy: rows} of one trickle-sim CSV (a run with several strategies writes them one
    after the other, each in step order)."""
    out = {}
    for r in read_rows(path):
        out.setdefault(r["strategy"], []).append(r)
    return out


def last_row(path):
    """The last row of a CSV as text (the final evaluation of a one-strategy run)."""
    with open(path, newline="") as fh:
        rows = list(csv.DictReader(fh))
    if not rows:
        raise SystemExit(f"{path}: no rows")
    return rows[-1]


def replica_losses(path):
    """{strategy: the replicas' own final eval loss} from a trickle-sim TXT (its result table's
    "replica loss" column, the fourth; the CSV has the averaged model's loss only). {} when the
    file has no table."""
    out, in_table = {}, False
    with open(path) as fh:
        for line in fh:
            f = line.split()
            if f[:1] == ["strategy"]:
                in_table = True
            elif in_table and not f:
                break
            elif in_table and len(f) >= 4:
                out[f[0]] = float(f[3])
    return out


def seed_files(directory, regex):
    """{name: {seed: path}} for the files in directory whose name matches regex in full; the
    regex has groups "name" and "seed" (e.g. r"(?P<name>.+)_s(?P<seed>\\d+)\\.csv")."""
    pattern = re.compile(regex)
    out = {}
    for path in sorted(glob.glob(os.path.join(directory, "*"))):
        m = pattern.fullmatch(os.path.basename(path))
        if m:
            out.setdefault(m["name"], {})[int(m["seed"])] = path
    return {name: dict(sorted(per.items())) for name, per in sorted(out.items())}


def seed_paths(directory, regex):
    """{seed: path} for the files in directory whose name matches regex (with a group "seed")
    in full: one configuration's runs."""
    pattern = re.compile(regex)
    out = {}
    for path in glob.glob(os.path.join(directory, "*")):
        m = pattern.fullmatch(os.path.basename(path))
        if m:
            out[int(m["seed"])] = path
    return dict(sorted(out.items()))


def finals(series, key="eval_loss"):
    """{seed: the last row's key}."""
    return {seed: rows[-1][key] for seed, rows in series.items()}


def band(series, key="eval_loss", x="step"):
    """xs, mean, low, high of key over the seeds at every x all seeds have (min-max, not sd)."""
    if not series:
        return [], [], [], []
    by = []
    for rows in series.values():
        seen = {}
        for r in rows:
            seen.setdefault(r[x], r[key])  # the first row at an x, as a file lists them
        by.append(seen)
    xs = sorted(set.intersection(*(set(b) for b in by)))
    mean = [statistics.fmean(b[v] for b in by) for v in xs]
    low = [min(b[v] for b in by) for v in xs]
    high = [max(b[v] for b in by) for v in xs]
    return xs, mean, low, high


def draw_band(ax, xs, mean, low, high, color=None, label=None, style="-", alpha=0.18, linewidth=1.6,
              shade=True):
    """The mean line, and the min-max band shaded behind it when shade and the band has a width."""
    (line,) = ax.plot(xs, mean, style, color=color, label=label, linewidth=linewidth)
    if shade and any(h > l for l, h in zip(low, high)):
        ax.fill_between(xs, low, high, color=line.get_color(), alpha=alpha, linewidth=0)
    return line


def draw_series(ax, series, label=None, color=None, style="-", key="eval_loss", x="step", **kw):
    """draw_band of a series: a plain line for one seed, mean and min-max band for several."""
    xs, mean, low, high = band(series, key, x)
    return draw_band(ax, xs, mean, low, high, color, label, style, **kw)


Stats = namedtuple("Stats", "mean sd lo hi n")


def final_stats(values):
    """Mean, sample standard deviation (nan for one value), min, max and count."""
    v = list(values.values()) if isinstance(values, dict) else list(values)
    if not v:
        raise ValueError("final_stats of no values")
    sd = statistics.stdev(v) if len(v) > 1 else float("nan")
    return Stats(statistics.fmean(v), sd, min(v), max(v), len(v))


def fmt_range(mean, lo=None, hi=None, digits=3, sep="–"):
    """"mean [min–max]"; only the mean when lo and hi are missing or equal (one seed). Accepts
    a Stats as the first argument."""
    if isinstance(mean, Stats):
        mean, lo, hi = mean.mean, mean.lo, mean.hi
    text = f"{mean:.{digits}f}"
    if lo is None or hi is None or lo == hi:
        return text
    return f"{text} [{lo:.{digits}f}{sep}{hi:.{digits}f}]"


def paired(a, b):
    """{seed: b - a} over the seeds both {seed: value} dicts have."""
    return {s: b[s] - a[s] for s in sorted(set(a) & set(b))}


def overlap(a, b):
    """Whether two (lo, hi) ranges (or Stats) overlap."""
    alo, ahi = (a.lo, a.hi) if isinstance(a, Stats) else a
    blo, bhi = (b.lo, b.hi) if isinstance(b, Stats) else b
    return blo <= ahi and alo <= bhi


def fmt_reduction(x):
    """A reduction against ddp as a table writes it."""
    if math.isnan(x):
        return "—"
    if math.isinf(x):
        return "no traffic"
    return "1x" if abs(x - 1) < 1e-9 else f"{x:,.0f}x"


def save(fig, path, dpi=110):
    """tight_layout, write, close."""
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
