"""scripts/plot_lab.py: the report of one scripts/wan_lab.sh run.

    python3 scripts/plot_lab.py OUTDIR

OUTDIR is wan_lab.sh's: lab.json, and a folder per run (the strategy, "-unshaped" for the
runs without shaping) holding each worker's metrics_<rank>.jsonl (train_gpt.py --metrics)
and the interfaces' and queues' counters before and after the run. Writes:

- summary.md and summary.csv: per run, the mean step, the share of the clock each worker
  spent blocked in communication (trickle's step(), or ddp's all-reduce), the bytes a
  worker sent by the library's counters and by its interface's (IP and Ethernet headers,
  TCP's acknowledgements and retransmissions included), the queues' drops, the final loss,
  and, where the run has an unshaped twin, the ratio of the mean steps. The mean step is
  given twice: over the whole run, and over its second half (the slowest worker's clock
  from step N/2 to step N, over N/2 steps), which leaves out the one-time start: the
  workers' skew after the initial broadcast, and the first exchanges over fresh
  connections (seconds on a slow link; DiLoCo's first outer round);
- loss_vs_time.png: every run's loss (the workers' mean, smoothed over 10 steps) against
  the wall clock;
- timeline.png: rank 0's steps, compute and communication stacked, one panel per run.

The figures need matplotlib; without it only the tables are written (and it says so).
"""
import json
import os
import statistics
import sys



def read_json(path):
    with open(path) as fh:
        return json.load(fh)


def read_jsonl(path):
    with open(path) as fh:
        return [json.loads(line) for line in fh if line.strip()]


def link_bytes(entry):
    """(tx, rx) bytes of one worker's `ip -s -j link` entry."""
    link = entry["link"][0]
    stats = link.get("stats64") or link.get("stats")
    return stats["tx"]["bytes"], stats["rx"]["bytes"]


def qdisc_drops(entries):
    return sum(q.get("drops", 0) for q in entries if q.get("kind") == "tbf")


def link_label(lab):
    """'10mbit both ways' when every link is alike, else the lists."""
    ups, downs = set(lab["up"].split(",")), set(lab["down"].split(","))
    if len(ups) == 1 and ups == downs:
        return f"{ups.pop()} both ways"
    return f"up {lab['up']} / down {lab['down']}"


def run_summary(run_dir, workers):
    metrics = {}
    for r in range(workers):
        path = os.path.join(run_dir, f"metrics_{r}.jsonl")
        if os.path.exists(path):
            metrics[r] = read_jsonl(path)
    if not metrics or not all(metrics.values()):
        return None
    steps = min(len(m) for m in metrics.values())
    wall = max(m[steps - 1]["t"] for m in metrics.values())
    skip = steps // 2
    settled = (max(m[steps - 1]["t"] - (m[skip - 1]["t"] if skip else 0.0) for m in metrics.values())
               / (steps - skip))
    settled_blocked = statistics.mean(sum(x["comm_s"] for x in m[skip:steps]) / (m[steps - 1]["t"] - (m[skip - 1]["t"] if skip else 0.0))
                                      for m in metrics.values())
    blocked = statistics.mean(sum(x["comm_s"] for x in m[:steps]) / m[steps - 1]["t"] for m in metrics.values())
    compute = statistics.mean(statistics.mean(x["compute_s"] for x in m[:steps]) for m in metrics.values())
    comm = statistics.mean(statistics.mean(x["comm_s"] for x in m[:steps]) for m in metrics.values())
    lib_sent = statistics.mean(m[steps - 1]["bytes_sent"] for m in metrics.values())
    tail = max(1, min(10, steps))
    loss = statistics.mean(statistics.mean(x["loss"] for x in m[steps - tail:steps]) for m in metrics.values())
    before = read_json(os.path.join(run_dir, "counters_before.json"))
    after = read_json(os.path.join(run_dir, "counters_after.json"))
    tx = [link_bytes(a)[0] - link_bytes(b)[0] for a, b in zip(after, before)]
    drops = sum(qdisc_drops(a["qdisc_up"]) + qdisc_drops(a["qdisc_down"])
                - qdisc_drops(b["qdisc_up"]) - qdisc_drops(b["qdisc_down"]) for a, b in zip(after, before))
    return {
        "run": os.path.basename(run_dir),
        "algo": metrics[0][0]["algo"],
        "steps": steps,
        "wall_s": wall,
        "mean_step_s": wall / steps,
        "settled_step_s": settled,
        "settle_steps": skip,
        "settled_blocked_share": settled_blocked,
        "compute_s": compute,
        "comm_s": comm,
        "blocked_share": blocked,
        "lib_bytes_per_worker": lib_sent,
        "iface_bytes_per_worker": statistics.mean(tx),
        "drops": drops,
        "final_loss": loss,
        "metrics": metrics,
    }


def main(argv):
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    out = argv[1]
    lab = read_json(os.path.join(out, "lab.json"))
    workers = lab["workers"]
    runs = []
    for name in sorted(os.listdir(out)):
        d = os.path.join(out, name)
        if os.path.isdir(d) and os.path.exists(os.path.join(d, "counters_after.json")):
            s = run_summary(d, workers)
            if s is None:
                print(f"plot_lab: {name}: no complete metrics, left out", file=sys.stderr)
            else:
                runs.append(s)
    if not runs:
        print(f"plot_lab: no complete run in {out}", file=sys.stderr)
        return 1
    by_name = {r["run"]: r for r in runs}
    cols = ["run", "steps", "mean_step_s", "settled_step_s", "compute_s", "comm_s", "blocked_share",
            "settled_blocked_share",
            "lib_bytes_per_worker", "iface_bytes_per_worker", "drops", "final_loss", "vs_unshaped",
            "settled_vs_unshaped"]
    for r in runs:
        twin = by_name.get(r["run"] + "-unshaped")
        r["vs_unshaped"] = r["mean_step_s"] / twin["mean_step_s"] if twin else float("nan")
        r["settled_vs_unshaped"] = r["settled_step_s"] / twin["settled_step_s"] if twin else float("nan")
    with open(os.path.join(out, "summary.csv"), "w") as fh:
        fh.write(",".join(cols) + "\n")
        for r in runs:
            fh.write(",".join(str(r[c]) for c in cols) + "\n")
    with open(os.path.join(out, "summary.md"), "w") as fh:
        fh.write(f"# wan_lab: {workers} workers, links {link_label(lab)}, {lab['steps']} steps\n\n")
        fh.write(f"{lab['date']}, commit {lab['commit']}, {lab['cores']} cores, kernel {lab['kernel']}; "
                 f"queue limit {lab['queue_ms']} ms, burst {lab['burst']}; trainer: {lab['trainer_args'] or 'defaults'}\n\n")
        fh.write("| run | mean step (second half) | compute / comm a step | blocked (second half) | "
                 "sent a worker (library) | sent a worker (interface) | queue drops | loss (last 10) | "
                 "÷ unshaped (second half) |\n")
        fh.write("|---|---|---|---|---|---|---|---|---|\n")
        for r in runs:
            ratio = "" if r["vs_unshaped"] != r["vs_unshaped"] else (
                f"{r['vs_unshaped']:.2f}× ({r['settled_vs_unshaped']:.2f}×)")
            fh.write(f"| {r['run']} | {r['mean_step_s'] * 1e3:.1f} ms ({r['settled_step_s'] * 1e3:.1f} ms) | "
                     f"{r['compute_s'] * 1e3:.1f} / "
                     f"{r['comm_s'] * 1e3:.1f} ms | {r['blocked_share']:.0%} ({r['settled_blocked_share']:.0%}) | {r['lib_bytes_per_worker'] / 1e3:,.1f} KB | "
                     f"{r['iface_bytes_per_worker'] / 1e3:,.1f} KB | {r['drops']} | {r['final_loss']:.3f} | {ratio} |\n")
    with open(os.path.join(out, "summary.md")) as fh:
        print(fh.read())

    try:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import plotlib
        from plotlib import plt
    except ImportError as e:
        print(f"plot_lab: no figures ({e}); the tables are written", file=sys.stderr)
        return 0
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for r in runs:
        m = r["metrics"]
        n = r["steps"]
        t = [statistics.mean(m[k][i]["t"] for k in m) for i in range(n)]
        loss = [statistics.mean(m[k][i]["loss"] for k in m) for i in range(n)]
        smooth = [statistics.mean(loss[max(0, i - 9):i + 1]) for i in range(n)]
        ax.plot(t, smooth, label=r["run"], linestyle="--" if r["run"].endswith("-unshaped") else "-")
    walls = [r["wall_s"] for r in runs]
    if max(walls) > 20 * min(walls):  # a dense baseline on a slow link: the others would be a sliver
        ax.set_xscale("log")
    ax.set_xlabel("wall clock (s)")
    ax.set_ylabel("training loss (workers' mean, 10-step mean)")
    ax.set_title(f"{workers} workers, links {link_label(lab)}")
    ax.legend()
    plotlib.save(fig, os.path.join(out, "loss_vs_time.png"))
    fig, axes = plt.subplots(len(runs), 1, figsize=(7, 1.6 * len(runs) + 0.6), sharex=True, squeeze=False)
    for ax, r in zip(axes[:, 0], runs):
        m0 = r["metrics"][0][: r["steps"]]
        steps = [x["step"] for x in m0]
        comp = [x["compute_s"] * 1e3 for x in m0]
        comm = [x["comm_s"] * 1e3 for x in m0]
        ax.bar(steps, comp, width=1.0, color="#4c72b0", label="compute")
        ax.bar(steps, comm, width=1.0, bottom=comp, color="#dd8452", label="communication (blocked)")
        ax.set_ylabel(f"{r['run']}\nms", fontsize=8)
    axes[0, 0].legend(fontsize=8, loc="upper right")
    axes[-1, 0].set_xlabel("step (rank 0)")
    plotlib.save(fig, os.path.join(out, "timeline.png"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
