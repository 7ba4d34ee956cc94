#!/usr/bin/env python3
"""scripts/bench_tables.py: turns bench_host / bench_cuda JSON into the markdown tables of benchmarks/README.md, and a plot.

    python3 scripts/bench_tables.py --host host.json[.gz] [--cuda cuda.json[.gz]]
        [--readme benchmarks/README.md [--block NAME]] [--brief] [--plot benchmarks/bandwidth.png]
    python3 scripts/bench_tables.py --compare A.json B.json --labels "name A,name B" [--readme ... --block NAME]
    python3 scripts/bench_tables.py --headline AFTER.json [AFTER2.json ...] [--before BEFORE.json ...]
        the device path's headline cases (issue 23's table: SPARTA gather / scatter / fused, the
        device codecs) as % of B_copy, before and after, each against its target; several
        files of one run (an L2 and an HBM pass, say) are merged

Tables use the Python standard library only. Without --readme they go to stdout; with it
they replace the text between '<!-- bench_tables:BACKEND:begin -->' and
'<!-- bench_tables:BACKEND:end -->'. The plot needs matplotlib: run it with the system
interpreter (/usr/bin/python3, Debian's python3-matplotlib).

Every figure is the median over the repetitions in the JSON; 'spread' is (max - min) /
median over them. Verdicts on the targets of docs/performance.md are computed here from
the data, never written by hand.
"""

import argparse
import gzip
import json
import re
import statistics
import sys
from collections import defaultdict

FRACTIONS = ["p0.001", "p0.005", "p0.01", "p0.05"]
SAMPLERS = ["uniform", "permutation", "layerwise", "block32", "block256", "block1024", "block4096", "rotating"]
BLOCK_SIZES = [32, 256, 1024, 4096]
DTYPE_BYTES = {"fp32": 4, "bf16": 2}


def load(path):
    with (gzip.open(path, "rt") if path.endswith(".gz") else open(path)) as f:
        text = f.read()
    try:
        doc = json.loads(text)
    except json.JSONDecodeError:
        # A run still in progress: close the list and the object.
        doc = json.loads(text.rstrip().rstrip(",") + "\n]}")
    runs = defaultdict(lambda: defaultdict(list))
    for b in doc.get("benchmarks", []):
        if b.get("run_type") == "aggregate" or b.get("error_occurred"):
            continue
        name = b["run_name"] if "run_name" in b else b["name"]
        wall = name.endswith("/manual_time") or name.endswith("/real_time")
        name = re.sub(r"/(manual_time|real_time)$", "", name)
        scale = {"ns": 1e-3, "us": 1.0, "ms": 1e3, "s": 1e6}[b.get("time_unit", "ns")]
        r = runs[name]
        r["us"].append((b["real_time"] if wall else b["cpu_time"]) * scale)
        for key in ("bytes_per_second", "useful_bytes_per_second", "pct_of_copy", "indices_per_second",
                    "device_us_per_step", "host_us_per_step", "host_over_device", "device_busy_at_return",
                    "kernels_per_step_design", "kernels_per_step_graph", "comm_calls_per_step"):
            if key in b:
                r[key].append(float(b[key]))
    return doc.get("context", {}), runs


class Results:
    def __init__(self, path, backend):
        self.context, self.runs = load(path)
        self.backend = backend

    def get(self, name, key="us"):
        vals = self.runs.get(name, {}).get(key)
        return statistics.median(vals) if vals else None

    def spread(self, name, key="us"):
        vals = self.runs.get(name, {}).get(key)
        if not vals or len(vals) < 2:
            return None
        med = statistics.median(vals)
        return (max(vals) - min(vals)) / med if med else None

    def b_copy(self):
        v = self.context.get("B_copy_bytes_per_second")
        return float(v) if v else None

    def shapes(self):
        return ["L2", "LLC", "DRAM"] if self.backend == "host" else ["L2", "LLC", "DRAM", "HBM"]

    def big(self):
        return "DRAM" if self.backend == "host" else "HBM"


def ex(op, sampler, dtype, p, shape):
    return f"exchange/{op}/{sampler}/{dtype}/{p}/{shape}"


def base(kind, sampler, dtype, p, shape):
    return f"baseline/{kind}/{sampler}/{dtype}/{p}/{shape}"


def fmt(v, digits=0, suffix=""):
    if v is None:
        return "–"
    if digits == 0:
        return f"{v:,.0f}{suffix}"
    return f"{v:,.{digits}f}{suffix}"


def fmt_time(us):
    if us is None:
        return "–"
    if us >= 1000:
        return f"{us / 1000:,.2f} ms"
    if us >= 10:
        return f"{us:,.0f} µs"
    return f"{us:,.2f} µs"


def ratio(a, b):
    return a / b if a is not None and b else None


def table(header, rows):
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(out)


def context_section(r):
    c = r.context
    lines = []
    b = r.b_copy()
    if r.backend == "host":
        caches = ", ".join(
            f"L{x['level']} {x['size'] // 1024} KiB{' x' + str(c.get('num_cpus', 1) // max(1, x['num_sharing'])) if x['num_sharing'] == 1 and x['level'] > 1 else ''}"
            for x in c.get("caches", []) if x.get("type") != "Instruction")
        lines.append(f"- machine: {c.get('host_name', '?')}, {c.get('num_cpus', '?')} CPUs at {c.get('mhz_per_cpu', '?')} MHz; caches {caches}")
    else:
        lines.append(f"- device: {c.get('device', '?')}, L2 {int(c.get('l2_bytes', 0)) // (1 << 20)} MiB")
    lines.append(f"- compiler: {c.get('compiler', '?')}; flags: `{c.get('flags', '?')}` "
                 f"(Google Benchmark library itself: {c.get('library_build_type', '?')} build, which affects only its own loop)")
    if "philox_lanes" in c:
        lines.append(f"- threads: {c.get('threads', '?')}; Philox lanes: {c.get('philox_lanes')}")
    lines.append(f"- B_copy = **{fmt(b / 1e9 if b else None, 1)} GB/s** ({c.get('B_copy_kind', '?')}), measured at start-up of this run")
    lines.append(f"- date: {c.get('date', '?')}; every figure is the median of the repetitions in the JSON")
    return "\n".join(lines)


def headline(r, dtype):
    """Every sampler at p = 0.5% on the largest group: gather and scatter against B_copy, the fused pair against the baselines."""
    s, p = r.big(), "p0.005"
    mask = r.get(base("mask", "bernoulli", dtype, p, s))
    rows = []
    for sam in SAMPLERS:
        fused = r.get(ex("fused", sam, dtype, p, s))
        idx = r.get(ex("indices", sam, "fp32", p, s))
        rows.append([
            sam,
            fmt(r.get(ex("gather", sam, dtype, p, s), "pct_of_copy"), 0, "%"),
            fmt(r.get(ex("scatter", sam, dtype, p, s), "pct_of_copy"), 0, "%"),
            fmt_time(fused),
            fmt(r.get(ex("fused", sam, dtype, p, s), "useful_bytes_per_second") and r.get(ex("fused", sam, dtype, p, s), "useful_bytes_per_second") / 1e9, 2),
            fmt(ratio(mask, fused), 0, "×"),
            fmt(ratio(r.get(base("index_plain", sam, dtype, p, s)), fused), 2, "×"),
            fmt(ratio(r.get(base("index_kernel", sam, dtype, p, s)), fused), 2, "×"),
            fmt(100 * ratio(idx, r.get(ex("fused", sam, "fp32", p, s))) if ratio(idx, r.get(ex("fused", sam, "fp32", p, s))) else None, 1, "%"),
            fmt(100 * r.spread(ex("fused", sam, dtype, p, s)) if r.spread(ex("fused", sam, dtype, p, s)) is not None else None, 0, "%"),
        ])
    header = ["sampler", "gather % of B_copy", "scatter % of B_copy", "fused time", "fused useful GB/s",
              "mask ÷ fused", "index_plain ÷ fused", "index_kernel ÷ fused", "index gen ÷ fused (fp32)", "spread"]
    return (f"**{dtype}, p = 0.5%, group {s} ({r.big()}-sized), mask approach: {fmt_time(mask)}**\n\n" + table(header, rows))


def sweep(r, dtype, op):
    s = r.big()
    rows = []
    for sam in SAMPLERS:
        rows.append([sam] + [fmt(r.get(ex(op, sam, dtype, p, s), "pct_of_copy"), 0, "%") for p in FRACTIONS])
    return table([f"{op} {dtype} {s}: % of B_copy"] + [p[1:] for p in FRACTIONS], rows)


def sizes(r, dtype):
    rows = []
    for sam in SAMPLERS:
        rows.append([sam] + [fmt(r.get(ex("fused", sam, dtype, "p0.005", sh), "useful_bytes_per_second") and
                                 r.get(ex("fused", sam, dtype, "p0.005", sh), "useful_bytes_per_second") / 1e9, 2)
                             for sh in r.shapes()])
    return table([f"fused {dtype} p=0.5%: useful GB/s"] + r.shapes(), rows)


def baselines(r, dtype):
    s = r.big()
    rows = []
    for p in FRACTIONS:
        mask = r.get(base("mask", "bernoulli", dtype, p, s))
        row = [p[1:], fmt_time(mask)]
        for sam in ("uniform", "permutation", "block256", "block1024"):
            f = r.get(ex("fused", sam, dtype, p, s))
            row.append(f"{fmt_time(f)} ({fmt(ratio(mask, f), 0, '×')})")
        rows.append(row)
    return table([f"{dtype} {s}: p", "mask approach", "uniform (× faster)", "permutation", "block256", "block1024"], rows)


def diloco(r):
    rows = []
    for sh in r.shapes():
        for d in ("fp32", "bf16"):
            delta = f"diloco/delta/{d}/{sh}"
            upd = f"diloco/update_nesterov/{d}/{sh}"
            rows.append([sh, d, fmt_time(r.get(delta)), fmt(r.get(delta, "pct_of_copy"), 0, "%"),
                         fmt_time(r.get(upd)), fmt(r.get(upd, "pct_of_copy"), 0, "%")])
    return table(["group", "dtype", "delta time", "delta % of B_copy", "update (nesterov) time", "update % of B_copy"], rows)


def stream_passes(r):
    """The CUDA suite's snapshot and restore passes (parameters <-> fp32 snapshot), when present."""
    rows = []
    for sh in r.shapes():
        for d in ("fp32", "bf16"):
            snap, rest = f"diloco/snapshot/{d}/{sh}", f"diloco/restore/{d}/{sh}"
            if r.get(snap) is None and r.get(rest) is None:
                continue
            rows.append([sh, d, fmt_time(r.get(snap)), fmt(r.get(snap, "pct_of_copy"), 0, "%"),
                         fmt_time(r.get(rest)), fmt(r.get(rest, "pct_of_copy"), 0, "%")])
    return table(["group", "dtype", "snapshot time", "snapshot % of B_copy", "restore time", "restore % of B_copy"], rows)


def timeline(r):
    """One whole SPARTA step on the device: device time against the host time of step(), and launches."""
    rows = []
    for n in sorted(x for x in r.runs if x.startswith("timeline/")):
        busy = r.get(n, "device_busy_at_return")
        rows.append([f"`{n}`", fmt(r.get(n, "device_us_per_step"), 1, " µs"), fmt(r.get(n, "host_us_per_step"), 1, " µs"),
                     fmt(r.get(n, "host_over_device"), 2), "–" if busy is None else ("yes" if busy > 0.5 else "no"),
                     fmt(r.get(n, "kernels_per_step_design")), fmt(r.get(n, "kernels_per_step_graph")),
                     fmt(r.get(n, "comm_calls_per_step"))])
    return table(["case", "device time per step", "host time per step()", "host ÷ device", "device busy when step() returned",
                  "kernels (design)", "kernels (captured graph)", "communication calls"], rows)


def allreduce(r):
    rows = []
    names = sorted({n for n in r.runs if n.startswith("allreduce/")},
                   key=lambda n: (int(n.split("/")[2][1:]), int(n.split("/")[3])))
    for n in names:
        _, _, workers, floats = n.split("/")
        rows.append([workers[1:], f"{int(floats):,}", fmt_time(r.get(n)),
                     fmt(r.get(n, "useful_bytes_per_second") and r.get(n, "useful_bytes_per_second") / 1e9, 2),
                     fmt(100 * r.spread(n) if r.spread(n) is not None else None, 0, "%")])
    return table(["workers", "floats", "time per all-reduce", "useful GB/s (2·N·n·4 B)", "spread"], rows)


def verdict(ok, text):
    return ("met" if ok else "**missed**") + (f" ({text})" if text else "")


def targets(r):
    """The targets of docs/performance.md, judged on this run's numbers."""
    s, host = r.big(), r.backend == "host"
    rows = []
    # block sampler, gather and scatter separately (each iteration touches new blocks)
    need = 75 if host else 85
    min_bytes = 4096 if host else 1024
    vals = []
    for d in ("fp32", "bf16"):
        for b in BLOCK_SIZES:
            if b * DTYPE_BYTES[d] < min_bytes:
                continue
            for p in FRACTIONS:
                for op in ("gather", "scatter"):
                    v = r.get(ex(op, f"block{b}", d, p, s), "pct_of_copy")
                    if v is not None:
                        vals.append((v, f"{op} block{b} {d} {p[1:]}"))
    if vals:
        lo = min(vals)
        rows.append([f"block sampler gather/scatter, blocks ≥ {min_bytes // 1024} KB, {s}", f"≥ {need}% of B_copy",
                     f"min {lo[0]:.0f}% ({lo[1]}), median {statistics.median(v for v, _ in vals):.0f}%",
                     verdict(lo[0] >= need, "" if lo[0] >= need else f"worst case short by {need - lo[0]:.0f} points")])
    # uniform / permutation against the line/sector-limited bound
    for sam in ("uniform", "permutation"):
        vals = [(r.get(ex(op, sam, d, p, s), "pct_of_copy"), f"{op} {d} {p[1:]}")
                for d in ("fp32", "bf16") for p in FRACTIONS for op in ("gather", "scatter")]
        vals = [v for v in vals if v[0] is not None]
        if vals:
            best = max(vals)
            med = statistics.median(v for v, _ in vals)
            rows.append([f"{sam} gather/scatter, {s}", f"≥ 70% of the {'line' if host else 'sector'}-limited bound",
                         f"median {med:.0f}%, best {best[0]:.0f}% ({best[1]})",
                         verdict(med >= 70, "" if med >= 70 else f"median short by {70 - med:.0f} points")])
    # mask approach at p = 0.5%
    for sam, need_x in (("uniform", 10), ("block256", 100), ("block1024", 100)):
        vals = []
        for d in ("fp32", "bf16"):
            m, f = r.get(base("mask", "bernoulli", d, "p0.005", s)), r.get(ex("fused", sam, d, "p0.005", s))
            if ratio(m, f):
                vals.append((ratio(m, f), d))
        if vals:
            lo = min(vals)
            rows.append([f"{sam} fused vs mask approach, p = 0.5%, {s}", f"≥ {need_x}× faster",
                         ", ".join(f"{v:.0f}× ({d})" for v, d in vals), verdict(lo[0] >= need_x, "")])
    # fused vs precomputed index arrays, and index generation share
    for sam in ("uniform", "permutation", "layerwise", "block256", "block1024"):
        cells, ok = [], True
        for kind in ("index_plain", "index_kernel"):
            vals = [ratio(r.get(base(kind, sam, d, p, s)), r.get(ex("fused", sam, d, p, s)))
                    for d in ("fp32", "bf16") for p in FRACTIONS]
            vals = [v for v in vals if v]
            if vals:
                cells.append(f"{kind} ÷ fused: median {statistics.median(vals):.2f}, min {min(vals):.2f}")
                ok = ok and statistics.median(vals) > 1
        if cells:
            rows.append([f"{sam} fused vs precomputed indices, {s}", "faster (ratio > 1)", "; ".join(cells),
                         verdict(ok, "")])
        shares = [ratio(r.get(ex("indices", sam, "fp32", p, s)), r.get(ex("fused", sam, "fp32", p, s))) for p in FRACTIONS]
        shares = [v for v in shares if v]
        if shares:
            hi = max(shares)
            rows.append([f"{sam} index generation ÷ fused, fp32, {s}", "≤ 10%",
                         f"max {100 * hi:.1f}%, median {100 * statistics.median(shares):.1f}%",
                         verdict(hi <= 0.10, "" if hi <= 0.10 else f"worst case {100 * hi:.0f}%")])
    # DiLoCo
    need = 75 if host else 85
    vals = [(r.get(f"diloco/{op}/{d}/{s}", "pct_of_copy"), f"{op} {d}")
            for op in ("delta", "update_nesterov") for d in ("fp32", "bf16")]
    vals = [v for v in vals if v[0] is not None]
    if vals:
        lo = min(vals)
        rows.append([f"DiLoCo outer step passes, {s}", f"≥ {need}% of B_copy",
                     ", ".join(f"{n}: {v:.0f}%" for v, n in vals),
                     verdict(lo[0] >= need, "" if lo[0] >= need else f"worst short by {need - lo[0]:.0f} points")])
    return table(["target", "wanted", "measured", "verdict"], rows)


def render(r, brief=False):
    parts = [context_section(r), "", "### Targets", "", targets(r), ""]
    if brief:
        for d in ("fp32", "bf16"):
            parts += [f"### Headline: {d}", "", headline(r, d), ""]
        return "\n".join(parts)
    for d in ("fp32", "bf16"):
        parts += [f"### Headline: {d}", "", headline(r, d), ""]
    parts += ["### Gather and scatter against B_copy, every fraction", ""]
    for d in ("fp32", "bf16"):
        for op in ("gather", "scatter"):
            parts += [sweep(r, d, op), ""]
    parts += ["### The mask approach against the fused exchange", "", baselines(r, "fp32"), "", baselines(r, "bf16"), ""]
    parts += ["### Group size (cache-resident to memory-resident)", "", sizes(r, "fp32"), "", sizes(r, "bf16"), ""]
    parts += ["### DiLoCo outer step (one pass each)", "", diloco(r), ""]
    if r.backend == "host":
        parts += ["### comm::local all-reduce (N threads on this machine)", "", allreduce(r), ""]
    else:
        parts += ["### Snapshot and restore passes", "", stream_passes(r), ""]
        parts += ["### One SPARTA step: launches and host time", "", timeline(r), ""]
    copies = sorted(n for n in r.runs if n.startswith("copy/"))
    parts += ["### Copies", "", table(["copy", "time", "GB/s (read + written)", "% of B_copy"],
                                      [[n, fmt_time(r.get(n)), fmt(r.get(n, "bytes_per_second") / 1e9, 2),
                                        fmt(r.get(n, "pct_of_copy"), 0, "%")] for n in copies]), ""]
    return "\n".join(parts)


def compare(a, b, labels):
    """Every case two runs share: time in each, the speed-up from a to b, and % of each run's B_copy."""
    la, lb = labels
    rows = []
    for name in sorted(set(a.runs) & set(b.runs)):
        ta, tb = a.get(name), b.get(name)
        rows.append([f"`{name}`", fmt_time(ta), fmt_time(tb), fmt(ratio(ta, tb), 2, "×"),
                     fmt(a.get(name, "pct_of_copy"), 0, "%"), fmt(b.get(name, "pct_of_copy"), 0, "%")])
    head = f"- B_copy: {fmt(a.b_copy() and a.b_copy() / 1e9, 1)} GB/s ({la}), {fmt(b.b_copy() and b.b_copy() / 1e9, 1)} GB/s ({lb})"
    return head + "\n\n" + table(["case", f"time, {la}", f"time, {lb}", "speed-up", f"% of B_copy, {la}",
                                   f"% of B_copy, {lb}"], rows)


def table_has_data(lines):
    """True when some cell of a markdown table, past its first column and header, holds a figure."""
    for row in lines[2:]:
        if any(c.strip(" –()") for c in row.strip().strip("|").split("|")[1:]):
            return True
    return False


def drop_empty(text):
    """Removes the tables of a rendering that hold no figure (a run of a few families), with
    the bold caption just above them, then the headings left with nothing under them."""
    blocks = text.split("\n\n")
    kept = []
    for b in blocks:
        lines = b.strip("\n").split("\n")
        tab = [i for i, l in enumerate(lines) if l.startswith("|")]
        if tab and not table_has_data(lines[tab[0]:]):
            if kept and kept[-1].startswith("**") and "\n" not in kept[-1]:
                kept.pop()
            continue
        kept.append(b)
    out = []
    for i, b in enumerate(kept):
        nxt = kept[i + 1] if i + 1 < len(kept) else "### "
        if b.startswith("### ") and "\n" not in b.strip() and nxt.startswith("### "):
            continue
        out.append(b)
    return "\n\n".join(out)


def replace_block(path, backend, text):
    with open(path) as f:
        doc = f.read()
    begin, end = f"<!-- bench_tables:{backend}:begin -->", f"<!-- bench_tables:{backend}:end -->"
    if begin not in doc or end not in doc:
        sys.exit(f"{path}: markers {begin} / {end} not found")
    head, rest = doc.split(begin, 1)
    _, tail = rest.split(end, 1)
    with open(path, "w") as f:
        f.write(head + begin + "\n" + text + "\n" + end + tail)


def plot(results, path):
    import matplotlib  # only here: the tables need nothing outside the standard library

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(results), 2, figsize=(12, 4.2 * len(results)), squeeze=False)
    xs = [float(p[1:]) * 100 for p in FRACTIONS]
    for row, r in enumerate(results):
        s = r.big()
        ax = axes[row][0]
        for sam in SAMPLERS:
            ys = [r.get(ex("gather", sam, "fp32", p, s), "pct_of_copy") for p in FRACTIONS]
            if any(y is not None for y in ys):
                ax.plot(xs, [y if y is not None else float("nan") for y in ys], marker="o", label=sam)
        ax.set_xscale("log")
        ax.set_xlabel("fraction p (%)")
        ax.set_ylabel("gather: moved bytes/s, % of B_copy")
        ax.set_title(f"{r.backend}: gather, fp32, group {s}")
        ax.axhline(100, color="grey", lw=0.8, ls="--")
        ax.legend(fontsize=8)
        ax = axes[row][1]
        for d in ("fp32", "bf16"):
            for op, ls in (("gather", "-"), ("scatter", ":")):
                ys = [r.get(ex(op, f"block{b}", d, "p0.005", s), "pct_of_copy") for b in BLOCK_SIZES]
                ax.plot([b * DTYPE_BYTES[d] for b in BLOCK_SIZES], [y if y is not None else float("nan") for y in ys],
                        marker="o", ls=ls, label=f"block {op} {d}")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("block size (bytes)")
        ax.set_ylabel("% of B_copy")
        ax.set_title(f"{r.backend}: block sampler, p = 0.5%, group {s}")
        ax.axhline(75 if r.backend == "host" else 85, color="red", lw=0.8, ls="--", label="target")
        ax.axhline(100, color="grey", lw=0.8, ls="--")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


# The device path's headline cases: (label, benchmark names without the fraction and
# group, target % of B_copy, what the target is a share of).
HEADLINE_SHAPES = ["L2", "HBM"]
HEADLINE_FRACTIONS = ["p0.005", "p0.01", "p0.05"]
HEADLINE_EXCHANGE = [
    ("SPARTA gather, block256, fp32", "exchange/gather/block256/fp32", 85, "B_copy"),
    ("SPARTA scatter, block256, fp32", "exchange/scatter/block256/fp32", 85, "B_copy"),
    ("SPARTA fused, block256, fp32", "exchange/fused/block256/fp32", 85, "B_copy"),
    ("SPARTA fused, block32, fp32", "exchange/fused/block32/fp32", 85, "B_copy"),
    ("SPARTA fused, block4096, fp32", "exchange/fused/block4096/fp32", 85, "B_copy"),
    # Random samplers count parameter memory in 32-byte sectors, so their share of B_copy
    # is their share of the sector bound.
    ("SPARTA fused, uniform, fp32", "exchange/fused/uniform/fp32", 90, "32-byte-sector bound"),
    ("SPARTA fused, permutation, fp32", "exchange/fused/permutation/fp32", 90, "32-byte-sector bound"),
    ("SPARTA fused, layerwise, fp32", "exchange/fused/layerwise/fp32", 90, "32-byte-sector bound"),
]
HEADLINE_CODECS = ["bf16", "int8_block64", "sign2_block64"]


class Merged:
    """Several bench_cuda JSON files of one run (the L2 and HBM passes, say) as one."""

    def __init__(self, paths):
        self.parts = [Results(p, "cuda") for p in paths]

    def get(self, name, key="us"):
        for r in self.parts:
            v = r.get(name, key)
            if v is not None:
                return v
        return None

    def b_copy(self):
        vals = [r.b_copy() for r in self.parts if r.b_copy()]
        return statistics.median(vals) if vals else None

    def date(self):
        return ", ".join(sorted({r.context.get("date", "?")[:19] for r in self.parts}))


def headline_names():
    """(label, benchmark name, target, of what) for every headline row."""
    rows = []
    for label, stem, target, of in HEADLINE_EXCHANGE:
        for sh in HEADLINE_SHAPES:
            for p in HEADLINE_FRACTIONS:
                rows.append((f"{label}, p = {float(p[1:]) * 100:g}%, {sh}", f"{stem}/{p}/{sh}", target, of))
    for c in HEADLINE_CODECS:
        for op in ("encode", "decode"):
            rows.append((f"device codec {op}, {c}, 16M values", f"codec/{op}/{c}/16M", 85, "B_copy"))
    return rows


def headline(after, before=None):
    """Issue 23's table: each headline case as % of B_copy after (and before), with its verdict."""
    lines = []
    lines.append(f"after: {after.date()}, B_copy {fmt(after.b_copy() and after.b_copy() / 1e9, 0)} GB/s")
    if before is not None:
        lines.append(f"; before: {before.date()}, B_copy {fmt(before.b_copy() and before.b_copy() / 1e9, 0)} GB/s")
    lines.append(" (each run's share of its own B_copy)\n\n")
    head = ["case"] + (["before"] if before is not None else []) + ["after", "time (after)", "target", "verdict"]
    rows, met, judged = [], 0, 0
    for label, name, target, of in headline_names():
        a = after.get(name, "pct_of_copy")
        b = before.get(name, "pct_of_copy") if before is not None else None
        if a is None and b is None:
            continue
        ok = a is not None and a >= target
        if a is not None:
            judged += 1
            met += ok
        row = [label] + ([fmt(b, 0, "%")] if before is not None else [])
        row += [fmt(a, 0, "%"), fmt_time(after.get(name)), f"≥ {target}% of {of}",
                "–" if a is None else verdict(ok, "")]
        rows.append(row)
    if not rows:
        return "".join(lines) + "(none of the headline cases is in these files)"
    return "".join(lines) + table(head, rows) + f"\n\n{met} of {judged} measured cases meet their target."


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--host", help="bench_host JSON")
    ap.add_argument("--cuda", help="bench_cuda JSON")
    ap.add_argument("--readme", help="rewrite the marked table blocks of this markdown file")
    ap.add_argument("--plot", help="write a PNG of bandwidth against fraction and block size (needs matplotlib)")
    ap.add_argument("--block", help="marker name to replace in --readme instead of the backend (host, cuda)")
    ap.add_argument("--brief", action="store_true", help="targets and headline tables only")
    ap.add_argument("--compare", nargs=2, metavar=("A", "B"), help="two bench_host JSON runs: the cases they share, side by side")
    ap.add_argument("--labels", default="A,B", help="names of the --compare runs, comma-separated")
    ap.add_argument("--headline", nargs="+", metavar="AFTER", help="bench_cuda JSON of one run: the headline table")
    ap.add_argument("--before", nargs="+", metavar="BEFORE", help="with --headline: the same cases of an earlier build")
    args = ap.parse_args()
    if args.before and not args.headline:
        ap.error("--before needs --headline")
    if args.headline:
        print(headline(Merged(args.headline), Merged(args.before) if args.before else None))
        return
    if args.compare:
        text = compare(Results(args.compare[0], "host"), Results(args.compare[1], "host"), args.labels.split(",", 1))
        if args.readme:
            replace_block(args.readme, args.block or "compare", text)
        else:
            print(text)
        return
    results = []
    if args.host:
        results.append(Results(args.host, "host"))
    if args.cuda:
        results.append(Results(args.cuda, "cuda"))
    if not results:
        ap.error("give --host and/or --cuda")
    for r in results:
        text = drop_empty(render(r, args.brief))
        if args.readme:
            replace_block(args.readme, args.block or r.backend, text)
        else:
            print(f"## {r.backend}\n\n{text}")
    if args.plot:
        plot(results, args.plot)


if __name__ == "__main__":
    main()
