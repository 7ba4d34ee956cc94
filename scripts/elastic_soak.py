"""Random kill / freeze / restart schedules over trickle's elastic training from Python.

    build/pyenv/bin/python scripts/elastic_soak.py [--schedules 50] [--seed 1] [--out DIR]

Each schedule runs examples/python/elastic.py's supervisor (a TCPStore, one process per
worker id, restarts of the dead) on one algorithm (DiLoCo, SPARTA, SPARTA + DiLoCo in
turn) with random events drawn from --seed: workers that SIGKILL themselves at a random
step, a worker that freezes itself (SIGSTOP) for 0.3-2.5 s against a liveness of 1 s
(shorter: waited for; longer: dropped, it finds out when it wakes and is restarted), and
the supervisor SIGKILLing or freezing a random live worker at random moments, and in half
the schedules the store itself killed once or twice and started again on its port after up
to 1.5 s (--store-chaos; the workers run with store_recovery). A schedule
passes when the supervisor exits 0 within its time limit: every worker finished or
rejoined (none lost; a restart that arrives after the job ended is not a loss), and for
DiLoCo and SPARTA + DiLoCo every worker that finished holds the same parameters, bit for
bit. A schedule that runs past the limit is a hang. Prints one line a schedule and a
summary; exit status 0 when every schedule passed. scripts/elastic_soak.sh runs it.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLE = os.path.join(ROOT, "examples", "python", "elastic.py")
ALGORITHMS = ("diloco", "sparta", "sparta-diloco")


def schedule(rng: random.Random, k: int) -> list[str]:
    """The k-th schedule: the example's arguments."""
    algo = ALGORITHMS[k % len(ALGORITHMS)]
    workers = rng.choice((3, 4))
    interval = 20
    steps = 800
    args = ["--algo", algo, "--workers", str(workers), "--steps", str(steps), "--interval", str(interval),
            "--step-ms", "10", "--liveness", "1.0", "--timeout", "10", "--join-timeout", "60",
            "--max-restarts", "8"]
    # Up to two workers kill themselves, at a step in the run's first three quarters.
    for wid in rng.sample(range(workers), rng.choice((0, 1, 1, 2))):
        args += ["--kill", f"{wid}@{rng.randrange(5, steps * 3 // 4)}"]
    # Maybe one freezes itself, shorter or longer than the liveness.
    if rng.random() < 0.5:
        args += ["--pause", f"{rng.randrange(workers)}@{rng.randrange(5, steps * 3 // 4)}:{rng.uniform(0.3, 2.5):.2f}"]
    # The supervisor's own random kills and freezes.
    args += ["--chaos", str(rng.choice((0, 1, 2))), "--chaos-seed", str(rng.randrange(1 << 30))]
    # The store killed and started again (a process of its own), in half the schedules.
    args += ["--store-chaos", str(rng.choice((0, 0, 1, 2)))]
    return args


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0], allow_abbrev=False)
    p.add_argument("--schedules", type=int, default=50)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--limit", type=float, default=180.0, help="seconds a schedule may run before it is a hang")
    p.add_argument("--out", default="", help="keep every schedule's log in this folder (default: only failures, in /tmp)")
    a = p.parse_args()
    if a.schedules < 1:
        p.error("--schedules must be >= 1")
    rng = random.Random(a.seed)
    logdir = a.out or "/tmp"
    os.makedirs(logdir, exist_ok=True)
    passed, failures, restarts, late, t_all = 0, [], 0, 0, time.time()
    for k in range(a.schedules):
        args = schedule(rng, k)
        log = os.path.join(logdir, f"elastic_soak_py_{k}.log")
        t0 = time.time()
        with open(log, "w") as f:
            f.write("schedule: " + " ".join(args) + "\n")
            f.flush()
            try:
                rc = subprocess.run([sys.executable, EXAMPLE, *args], stdout=f, stderr=subprocess.STDOUT,
                                    timeout=a.limit).returncode
            except subprocess.TimeoutExpired:
                rc = "hang"
        text = open(log).read()
        m = re.search(r"; restarts (\d+)", text)
        restarts += int(m.group(1)) if m else 0
        late += text.count("came after the job ended") + text.count("after the job ended; not restarted")
        events = " ".join(f"{x} {y}" for x, y in zip(args, args[1:])
                          if x in ("--workers", "--kill", "--pause", "--chaos", "--store-chaos"))
        line = (f"schedule {k + 1}/{a.schedules} {args[1]}: {'passed' if rc == 0 else f'FAILED ({rc})'} "
                f"in {time.time() - t0:.1f} s; {events}")
        print(line, flush=True)
        if rc == 0:
            passed += 1
            if not a.out:
                os.remove(log)
        else:
            failures.append(log)
            print("".join(text.splitlines(keepends=True)[-30:]), flush=True)
    print(f"elastic_soak.py: {passed} of {a.schedules} schedules passed in {time.time() - t_all:.0f} s "
          f"({restarts} restarts, {late} restarts too late to rejoin)"
          + (f"; failed: {' '.join(failures)}" if failures else ""), flush=True)
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
