"""Elastic training with a supervisor that restarts workers: the restart pattern, runnable.

    python3 examples/python/elastic.py                          # 3 workers, DiLoCo, worker 1 killed at step 60
    python3 examples/python/elastic.py --algo sparta --kill 2@100 --kill 0@300
    python3 examples/python/elastic.py --algo sparta-diloco --workers 4 --steps 1200
    python3 examples/python/elastic.py --pause 2@150:2.5 --chaos 3 --chaos-seed 5

The supervisor (this script without --worker) serves the job's store, a torch.distributed
TCPStore (what `python3 -m trickle.store` serves), starts one process per worker id, and
starts a worker again with the same id whenever it dies, up to --max-restarts times per
id. Nothing else restarts: the survivors drop the dead worker within `liveness` seconds
and carry on; the restarted process joins at their next round, receives the model, the
algorithm's state (hash-checked) and its optimizer's state (Elastic(carry=optimizer)) from
a live worker, and resumes at the members' step. A
worker may also be restarted by anything else that starts it again with its id: systemd
(Restart=on-failure), a Kubernetes pod's restartPolicy, or one torchrun per worker id:

    python3 -m trickle.store --port 29600 &
    for i in 0 1 2; do
      torchrun --standalone --nproc_per_node 1 --max-restarts 3 \\
          examples/python/elastic.py --worker --id $i --workers 3 --store 127.0.0.1:29600 &
    done

(never one torchrun for the whole job: torchrun restarts every worker of its job when one
dies, and its own store dies with it). --kill ID@STEP makes worker ID kill itself with
SIGKILL at that step, in its first life only, to show a restart; --pause ID@STEP:SECONDS
freezes worker ID (SIGSTOP, then SIGCONT) for that long at that step: longer than
--liveness, it is dropped, finds out when it wakes (trickle.CommError), exits, and is
restarted. --chaos N has the supervisor itself SIGKILL or freeze a random live worker at N
random moments (--chaos-seed chooses them): what scripts/elastic_soak.sh runs many times.
--store-chaos N serves the store from a process of its own (python3 -m trickle.store) and
has the supervisor SIGKILL it at N random moments and start it again on its port after a
random pause of up to 1.5 s, as a supervisor of the store would; the workers run with
Elastic(store_recovery=...), give the new store the view back and go on.
The workers sleep --step-ms per step to stand for real compute.

Each worker trains a small regression model on its own shard of the data, chosen by its
id (never by its rank, which follows the view and changes with it). At the end the
supervisor prints each worker's membership record (joined, left, epochs) and, for DiLoCo
and SPARTA + DiLoCo, checks that every worker holds the same parameters, bit for bit
(the last step ends a round). Exit status 0 when every worker finished.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import torch
import torch.distributed as dist

import trickle

ALGORITHMS = ("diloco", "sparta", "sparta-diloco")


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0], allow_abbrev=False)
    p.add_argument("--algo", choices=ALGORITHMS, default="diloco")
    p.add_argument("--workers", type=int, default=3, help="workers in the first epoch (ids 0 .. workers-1)")
    p.add_argument("--steps", type=int, default=800)
    p.add_argument("--interval", type=int, default=25, help="DiLoCo's H (a multiple of it ends the run)")
    p.add_argument("--fraction", type=float, default=0.05, help="SPARTA's fraction")
    p.add_argument("--step-ms", type=float, default=10.0, help="simulated compute per step, in milliseconds")
    p.add_argument("--kill", action="append", default=[], metavar="ID@STEP",
                   help="worker ID kills itself at STEP in its first life (repeatable)")
    p.add_argument("--pause", action="append", default=[], metavar="ID@STEP:SECONDS",
                   help="worker ID freezes itself (SIGSTOP) for SECONDS at STEP in its first life (repeatable)")
    p.add_argument("--chaos", type=int, default=0, metavar="N",
                   help="the supervisor kills or freezes a random live worker at N random moments")
    p.add_argument("--chaos-seed", type=int, default=0)
    p.add_argument("--store-chaos", type=int, default=0, metavar="N",
                   help="kill the store (a process of its own) at N random moments and start it again")
    p.add_argument("--store-recovery", type=float, default=60.0,
                   help="seconds a worker waits for its store to come back (Elastic(store_recovery=))")
    p.add_argument("--max-restarts", type=int, default=3, help="restarts per worker id")
    p.add_argument("--liveness", type=float, default=1.0, help="seconds without a heartbeat before a drop")
    p.add_argument("--timeout", type=float, default=10.0)
    p.add_argument("--join-timeout", type=float, default=60.0)
    # Worker mode (started by the supervisor, or by torchrun / systemd with its id).
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--id", type=int, default=-1)
    p.add_argument("--store", default="", metavar="HOST:PORT")
    p.add_argument("--kill-at", type=int, default=-1, help=argparse.SUPPRESS)
    p.add_argument("--pause-at", default="", help=argparse.SUPPRESS)
    p.add_argument("--out", default="", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.workers < 1 or a.steps < 1 or a.interval < 1 or a.max_restarts < 0 or a.chaos < 0 or a.store_chaos < 0:
        p.error("--workers, --steps and --interval must be >= 1, --max-restarts, --chaos and --store-chaos >= 0")
    if a.store_recovery < 0:
        p.error(f"--store-recovery must be >= 0 seconds, got {a.store_recovery}")
    if a.algo != "sparta" and a.steps % a.interval != 0:
        p.error(f"--steps ({a.steps}) must be a multiple of --interval ({a.interval}) so that the run ends a round")
    kills = {}
    for k in a.kill:
        try:
            wid, step = (int(x) for x in k.split("@"))
        except ValueError:
            p.error(f"--kill takes ID@STEP, got {k!r}")
        if not (0 <= wid < a.workers and 0 < step < a.steps):
            p.error(f"--kill {k}: the id must be in [0, {a.workers}) and the step in (0, {a.steps})")
        kills[wid] = step
    a.kills = kills
    pauses = {}
    for k in a.pause:
        try:
            wid, rest = k.split("@")
            step, secs = rest.split(":")
            wid, step, secs = int(wid), int(step), float(secs)
        except ValueError:
            p.error(f"--pause takes ID@STEP:SECONDS, got {k!r}")
        if not (0 <= wid < a.workers and 0 < step < a.steps and secs > 0):
            p.error(f"--pause {k}: the id must be in [0, {a.workers}), the step in (0, {a.steps}), the seconds > 0")
        pauses[wid] = (step, secs)
    a.pauses = pauses
    if a.worker and (a.id < 0 or not a.store):
        p.error("--worker needs --id and --store HOST:PORT")
    return a


def make_algorithm(a: argparse.Namespace, model: torch.nn.Module, el: trickle.Elastic):
    common = dict(seed=7, elastic=el, min_workers=1)
    if a.algo == "diloco":
        return trickle.DiLoCo(model, interval=a.interval, outer="nesterov", **common)
    if a.algo == "sparta":
        return trickle.SPARTA(model, fraction=a.fraction, **common)
    return trickle.SPARTADiLoCo(model, interval=a.interval, fraction=a.fraction, outer="nesterov", **common)


def shard(wid: int, step: int, batch: int = 32):
    """Worker `wid`'s batch at `step`: its own slice of a fixed regression task, by id."""
    g = torch.Generator().manual_seed(1_000_003 * wid + step)
    x = torch.randn(batch, 16, generator=g)
    w = torch.linspace(-1.0, 1.0, 16 * 4, dtype=torch.float32).reshape(16, 4)
    y = torch.tanh(x @ w) + 0.05 * torch.randn(batch, 4, generator=g)
    return x, y


def freeze(pid: int, seconds: float) -> None:
    """Stops process `pid` (SIGSTOP) and has a detached shell continue it after `seconds`."""
    subprocess.Popen(["sh", "-c", f"sleep {seconds}; kill -CONT {pid}"], start_new_session=True)
    os.kill(pid, signal.SIGSTOP)


def worker(a: argparse.Namespace) -> int:
    host, port = a.store.rsplit(":", 1)
    store = trickle.connect_store(host, int(port))
    torch.manual_seed(0)  # every worker starts from the same model (a joiner takes the members' anyway)
    model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.Tanh(), torch.nn.Linear(64, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    # carry=opt: a joiner takes a live worker's momentum buffers with the algorithm's state.
    el = trickle.Elastic(store, id=a.id, initial=a.workers, timeout=a.timeout, liveness=a.liveness,
                         join_timeout=a.join_timeout, job="example", carry=opt, store_recovery=a.store_recovery)
    algo = make_algorithm(a, model, el)
    start = algo.stats.steps  # 0, or the members' step for a joiner
    if a.out and start == 0:
        open(a.out + ".started", "w").close()  # for the supervisor's --chaos clock
    if start > 0:
        if a.out:
            open(a.out + ".joined", "w").close()
        print(f"worker {a.id}: joined at step {start} (epoch {algo.membership['epoch']}, "
              f"{algo.membership['workers']} workers)", flush=True)
    try:
        return train(a, model, opt, algo, start)
    except trickle.CommError as e:
        # Dropped while frozen, or a peer's failure this worker cannot ride out: exit, and the
        # supervisor starts it again with its id (it joins as a new handle).
        print(f"worker {a.id}: {type(e).__name__}: {e}; exiting to be restarted", flush=True)
        return 3


def train(a: argparse.Namespace, model, opt, algo, start: int) -> int:
    loss = torch.tensor(float("nan"))
    pause_step, pause_secs = -1, 0.0
    if a.pause_at:
        step, secs = a.pause_at.split(":")
        pause_step, pause_secs = int(step), float(secs)
    for t in range(start, a.steps):
        if t == a.kill_at:
            print(f"worker {a.id}: killing itself at step {t}", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        if t == pause_step:
            print(f"worker {a.id}: freezing itself for {pause_secs} s at step {t}", flush=True)
            freeze(os.getpid(), pause_secs)
        x, y = shard(a.id, t)
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        time.sleep(a.step_ms / 1000.0)
        algo.step()
    m = algo.membership
    print(f"worker {a.id}: done at step {a.steps}, loss {loss.item():.4f}, sent {algo.stats.bytes_sent} bytes; "
          f"epoch {m['epoch']}, {m['workers']} workers, joined {m['joined']}, left {m['left']}", flush=True)
    if a.out:
        torch.save({"params": [p.detach().clone() for p in model.parameters()], "membership": m}, a.out)
    return 0


class StoreProcess:
    """The store as a process of its own (python3 -m trickle.store), killed and started again
    on its port by --store-chaos."""

    def __init__(self):
        self.port = 0
        self.proc = None
        self.start()

    def start(self) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "trickle.store", "--port", str(self.port)],
                                     stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        if not line.startswith("trickle.store: serving on port "):
            raise RuntimeError(f"the store did not start: {line!r}")
        self.port = int(line.split()[-1])

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()


def supervise(a: argparse.Namespace) -> int:
    if a.store_chaos:
        store = StoreProcess()
    else:
        store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    tmp = tempfile.mkdtemp(prefix="trickle_elastic_example_")
    outs = {i: os.path.join(tmp, f"worker{i}.pt") for i in range(a.workers)}
    me = os.path.abspath(__file__)

    def launch(wid: int, first: bool) -> subprocess.Popen:
        cmd = [sys.executable, me, "--worker", "--id", str(wid), "--store", f"127.0.0.1:{store.port}",
               "--workers", str(a.workers), "--algo", a.algo, "--steps", str(a.steps), "--interval", str(a.interval),
               "--fraction", str(a.fraction), "--step-ms", str(a.step_ms), "--liveness", str(a.liveness),
               "--timeout", str(a.timeout), "--join-timeout", str(a.join_timeout), "--out", outs[wid],
               "--store-recovery", str(a.store_recovery)]
        if first and wid in a.kills:
            cmd += ["--kill-at", str(a.kills[wid])]
        if first and wid in a.pauses:
            cmd += ["--pause-at", f"{a.pauses[wid][0]}:{a.pauses[wid][1]}"]
        return subprocess.Popen(cmd)

    # --chaos: moments at which the supervisor SIGKILLs or freezes a random live worker,
    # counted from when every first worker has built its algorithm (a first worker lost
    # before that ends the start: docs/elastic.md), within the first three quarters of the
    # training time, at least 2.5 s apart (so that a restart joins first).
    rng = random.Random(a.chaos_seed)
    window = 0.75 * a.steps * a.step_ms / 1000.0
    chaos = []
    for at in sorted(rng.uniform(0.0, window) for _ in range(a.chaos)):
        at = max(at, chaos[-1][0] + 2.5) if chaos else at
        chaos.append((at, rng.choice(("kill", "freeze")), rng.random(), rng.uniform(0.2, 3.0)))

    # --store-chaos: moments at which the store is killed, and the pause before it starts again.
    store_chaos = sorted((rng.uniform(0.0, window), rng.uniform(0.0, 1.5)) for _ in range(a.store_chaos))
    store_back = None  # when a killed store starts again

    print(f"supervisor: store at 127.0.0.1:{store.port}; {a.workers} workers of {a.algo}, {a.steps} steps"
          + (f"; kills: {', '.join(f'{w}@{s}' for w, s in sorted(a.kills.items()))}" if a.kills else "")
          + (f"; pauses: {', '.join(f'{w}@{s}:{d}' for w, (s, d) in sorted(a.pauses.items()))}" if a.pauses else "")
          + (f"; chaos: {', '.join(f'{e[1]} at {e[0]:.1f} s' for e in chaos)}" if chaos else "")
          + (f"; store kills: {', '.join(f'at {t:.1f} s for {d:.1f} s' for t, d in store_chaos)}" if store_chaos else ""),
          flush=True)
    t0 = time.time()
    chaos_t0 = None
    procs = {i: launch(i, True) for i in range(a.workers)}
    restarts = {i: 0 for i in range(a.workers)}
    failed, late = [], []
    ended_at = None  # when the first worker finished: the job is ending, nothing is restarted after it
    try:
        while procs:
            # A restart still outside the view when the others have finished came too late
            # to join (the members ended without a further round): stopped, not a failure.
            # One that had joined and does not finish is a hang.
            if ended_at is not None and time.time() - ended_at > 10.0:
                for wid, p in list(procs.items()):
                    p.kill()
                    p.wait()
                    del procs[wid]
                    if os.path.exists(outs[wid] + ".joined"):
                        print(f"supervisor: worker {wid} joined but did not finish (a hang)", flush=True)
                        failed.append(wid)
                    else:
                        print(f"supervisor: worker {wid}'s restart came after the job ended; stopped", flush=True)
                        late.append(wid)
                break
            if (chaos or store_chaos) and chaos_t0 is None and all(os.path.exists(o + ".started")
                                                                     for o in outs.values()):
                chaos_t0 = time.time()
            if store_chaos and store_back is None and chaos_t0 is not None and \
                    time.time() - chaos_t0 >= store_chaos[0][0]:
                _, pause = store_chaos.pop(0)
                print(f"supervisor: store chaos: SIGKILL to the store at {time.time() - t0:.1f} s, back in "
                      f"{pause:.1f} s", flush=True)
                store.kill()
                store_back = time.time() + pause
            if store_back is not None and time.time() >= store_back:
                store.start()
                store_back = None
            if chaos and chaos_t0 is not None and time.time() - chaos_t0 >= chaos[0][0]:
                _, action, pick, secs = chaos.pop(0)
                live = sorted(w for w, p in procs.items() if p.poll() is None)
                if live:
                    wid = live[int(pick * len(live))]
                    print(f"supervisor: chaos: {'SIGKILL to' if action == 'kill' else f'freezing for {secs:.1f} s'} "
                          f"worker {wid} at {time.time() - t0:.1f} s", flush=True)
                    if action == "kill":
                        procs[wid].kill()
                    else:
                        freeze(procs[wid].pid, secs)
            for wid, p in list(procs.items()):
                rc = p.poll()
                if rc is None:
                    continue
                del procs[wid]
                if rc == 0:
                    ended_at = ended_at or time.time()
                    continue
                if ended_at is not None:
                    print(f"supervisor: worker {wid} exited with {rc} after the job ended; not restarted", flush=True)
                    late.append(wid)
                elif restarts[wid] < a.max_restarts:
                    restarts[wid] += 1
                    print(f"supervisor: worker {wid} exited with {rc} after {time.time() - t0:.1f} s; "
                          f"restart {restarts[wid]} of {a.max_restarts}", flush=True)
                    procs[wid] = launch(wid, False)
                else:
                    print(f"supervisor: worker {wid} exited with {rc}; no restarts left", flush=True)
                    failed.append(wid)
            time.sleep(0.05)
    finally:
        for p in procs.values():
            p.kill()
        if a.store_chaos:
            store.kill()
    if failed:
        print(f"supervisor: workers {failed} did not finish", flush=True)
        return 1
    res = {i: torch.load(o) for i, o in outs.items() if os.path.exists(o)}
    shutil.rmtree(tmp)
    done = sorted(res)
    if done and a.algo != "sparta":
        for i in done[1:]:
            same = all(torch.equal(x, y) for x, y in zip(res[done[0]]["params"], res[i]["params"]))
            if not same:
                print(f"supervisor: worker {i}'s parameters differ from worker {done[0]}'s after the last outer step")
                return 1
        print(f"supervisor: the {len(done)} workers that finished hold the same parameters, bit for bit", flush=True)
    print(f"supervisor: done in {time.time() - t0:.1f} s; restarts {sum(restarts.values())}"
          + (f"; too late to rejoin: {late}" if late else "")
          + (f"; worker {done[0]}'s membership: {res[done[0]]['membership']}" if done else ""), flush=True)
    return 0


def main() -> int:
    a = parse_args()
    return worker(a) if a.worker else supervise(a)


if __name__ == "__main__":
    sys.exit(main())
