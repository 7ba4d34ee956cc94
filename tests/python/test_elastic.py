"""trickle.DiLoCo, trickle.SPARTA and trickle.SPARTADiLoCo over trickle.Elastic: worker
processes that die and come back.

    build/pyenv/bin/python tests/python/test_elastic.py

The driver serves a TCPStore (as `python3 -m trickle.store` would) and, for each algorithm,
starts 3 worker processes of this file. Worker 2 kills itself with SIGKILL at step 12
(inside DiLoCo's local round); the driver starts it again with the same id, and it joins
at the members' next round (an outer step, or a SPARTA exchange). At the end the three
workers hold the same parameters, bit for bit (DiLoCo and SPARTA + DiLoCo: the last step
is an outer step; SPARTA: every worker draws the same batches, so replicas that start
equal and average equal values stay equal, and the joiner must have received exactly the
members' parameters and, through Elastic(carry=optimizer), their SGD momentum buffers), and
the membership says one left and one joined. Then the store itself (python3 -m
trickle.store) is killed under three DiLoCo workers with store_recovery and started again
on its port: every worker finishes every outer step, none is lost, and the three end
bit-identical. Bad arguments are refused before anything runs.
"""

import os
import signal
import subprocess
import sys
import time

import torch
import torch.distributed as dist

import trickle

STEPS, INTERVAL, KILL_AT, HOLD_AT = 50, 5, 12, 25


# SPARTADiLoCo-topk: SPARTA + DiLoCo with the outer gradient through a sparsifier.
ALGORITHMS = ("DiLoCo", "SPARTA", "SPARTADiLoCo", "SPARTADiLoCo-topk")


def build(algo: str, model, el):
    if algo == "DiLoCo":
        return trickle.DiLoCo(model, interval=INTERVAL, outer="nesterov", seed=3, elastic=el)
    if algo == "SPARTA":
        return trickle.SPARTA(model, fraction=0.25, seed=3, elastic=el)
    if algo == "SPARTADiLoCo-topk":
        return trickle.SPARTADiLoCo(model, interval=INTERVAL, fraction=0.25, outer="nesterov", seed=3,
                                    outer_sparsifier="chunk_topk", elastic=el)
    return trickle.SPARTADiLoCo(model, interval=INTERVAL, fraction=0.25, outer="nesterov", seed=3, elastic=el)


def wait_for_join_request(store, job: str) -> None:
    """Holds a member until the restarted worker has queued its join request (the store's
    "<job>/j/n" counter): the restart first waits up to `liveness` for its old
    incarnation's heartbeat to stay still, and the members would otherwise finish their
    remaining steps before it asks."""
    deadline = time.time() + 60
    while store.add(f"{job}/j/n", 0) < 1:
        assert time.time() < deadline, "the restarted worker queued no join request within 60 s"
        time.sleep(0.01)


def train_step(model, opt, algorithm, seed: int) -> None:
    """One inner step on the batch `seed` draws, then the algorithm's step."""
    x = torch.randn(8, 16, generator=torch.Generator().manual_seed(seed))
    loss = (model(x) - x[:, :4]).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    algorithm.step()


def worker(port: int, wid: int, out: str, kill: bool, algo: str) -> int:
    store = trickle.connect_store("127.0.0.1", port)
    torch.manual_seed(0)
    model = torch.nn.Linear(16, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    job = algo.lower()
    # carry=opt: the restart takes a member's momentum buffers with the algorithm's state.
    # SPARTA renews the view at every 4th exchange only (renew_every): the kill is still
    # caught at once, the restart admitted at a later renewal.
    el = trickle.Elastic(store, id=wid, initial=3, timeout=5.0, liveness=1.0, job=job, carry=opt,
                         renew_every=4 if algo == "SPARTA" else 1)
    diloco = build(algo, model, el)
    start = diloco.stats.steps
    for t in range(start, STEPS):
        if kill and t == KILL_AT:
            sys.stdout.flush()
            os.kill(os.getpid(), signal.SIGKILL)
        if t == HOLD_AT and wid != 2:
            wait_for_join_request(store, job)
        # Each worker its own batches; under SPARTA every worker the same ones (see above).
        train_step(model, opt, diloco, 1000 * t + (0 if algo == "SPARTA" else wid))
    if algo == "SPARTADiLoCo-topk":  # the outer gradient went through the sparsifier: indices on the wire
        assert diloco.outer_stats.index_bytes_sent > 0, diloco.outer_stats
    torch.save({"params": [p.detach().clone() for p in model.parameters()], "membership": diloco.membership,
                "start": start}, out)
    print(f"{algo} worker {wid}: {diloco.membership}", flush=True)
    return 0


def refusals() -> None:
    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    model = torch.nn.Linear(2, 2)
    # A one-process group, so that the plain DiLoCo case reaches its option check.
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    first = trickle.SPARTA(model, elastic=trickle.Elastic(store, id=0, initial=1, job="every", renew_every=4))
    cases = [
        (lambda: trickle.Elastic(store, id=-1, initial=1), ValueError, "id must be >= 0"),
        (lambda: trickle.Elastic(store, id=0, initial=0), ValueError, "initial must be >= 1"),
        (lambda: trickle.Elastic(store, id=0, initial=1, timeout=0), ValueError, "timeout must be > 0"),
        (lambda: trickle.Elastic(store, id=0, initial=1, timeout=1, liveness=2), ValueError, "liveness must be in"),
        (lambda: trickle.Elastic("nope", id=0, initial=1), TypeError, "torch.distributed.Store"),
        (lambda: trickle.DiLoCo(model, elastic="x"), TypeError, "trickle.Elastic"),
        (lambda: trickle.SPARTA(model, elastic="x"), TypeError, "trickle.Elastic"),
        (lambda: trickle.SPARTA(model, min_workers=2), ValueError, "applies with elastic= only"),
        (lambda: trickle.SPARTADiLoCo(model, min_workers=2), ValueError, "applies with elastic= only"),
        # An overlapped SPARTA exchange needs trickle's progress thread, which an elastic
        # group's rounds do not run on.
        (lambda: trickle.SPARTA(model, overlap=True, elastic=trickle.Elastic(store, id=0, initial=1, job="ov")),
         ValueError, "overlap does not combine with an elastic communicator"),
        (lambda: trickle.SPARTA(model, elastic=trickle.Elastic(store, id=0, initial=1, job="q"), min_workers=2),
         ValueError, "min_workers (2) is larger than the world (1 workers)"),
        (lambda: trickle.DiLoCo(model, min_workers=2), ValueError, "applies with elastic= only"),
        (lambda: trickle.DiLoCo(model, elastic=trickle.Elastic(store, id=0, initial=1), min_workers=2), ValueError,
         "min_workers (2) is larger than the world (1 workers)"),
        (lambda: trickle.connect_store("127.0.0.1", 1, timeout=0.3), trickle.CommError,
         "no store answered at 127.0.0.1:1"),
        (lambda: trickle.Elastic(store, id=0, initial=1, start_timeout=0), ValueError, "start_timeout must be > 0"),
        (lambda: trickle.Elastic(store, id=0, initial=1, join_timeout=-1), ValueError, "join_timeout must be > 0"),
        (lambda: trickle.Elastic(store, id=0, initial=1, hostname=5), TypeError, "hostname must be a string"),
        (lambda: trickle.Elastic(store, id=0, initial=1, carry=5), TypeError, "carry must have state_dict()"),
        (lambda: trickle.Elastic(store, id=0, initial=1, renew_every=0), ValueError, "renew_every must be >= 1"),
        (lambda: trickle.Elastic(store, id=0, initial=1, store_recovery=-1), ValueError,
         "store_recovery must be >= 0"),
        (lambda: trickle.Elastic(store, id=0, initial=1, renew_every=2.0), TypeError, "renew_every must be an integer"),
        # The job's first worker set renew_every = 4 (below): another k is refused.
        (lambda: trickle.SPARTA(model, elastic=trickle.Elastic(store, id=1, initial=1, job="every", renew_every=2)),
         trickle.MismatchError, "has renew_every = 2, the job's other workers 4"),
        (lambda: trickle.Elastic(store, id=0, initial=1, carry={"": torch.optim.SGD(model.parameters(), lr=1)}),
         TypeError, "must map non-empty names"),
        # A first member whose peers never start gives up at start_timeout, naming them.
        (lambda: trickle.DiLoCo(model, elastic=trickle.Elastic(store, id=1, initial=3, job="never",
                                                                start_timeout=0.3)),
         trickle.CommError, "did not all start within 300 ms (missing: 0, 2)"),
        # A joiner nobody admits gives up at join_timeout.
        (lambda: trickle.DiLoCo(model, elastic=trickle.Elastic(store, id=7, initial=1, job="lonely",
                                                                join_timeout=0.3)),
         trickle.CommError, "was not admitted within 300 ms"),
    ]
    for make, exc, text in cases:
        try:
            make()
        except exc as e:
            assert text in str(e), f"expected {text!r} in {e}"
        else:
            raise AssertionError(f"expected {exc.__name__} containing {text!r}")
    del first
    dist.destroy_process_group()
    print("test_elastic: refusals ok", flush=True)


def scenario(algo: str, store, port: int) -> None:
    """3 workers of `algo`; worker 2 killed at KILL_AT and restarted with its id."""
    tmp = os.environ.get("TMPDIR", "/tmp")
    outs = [os.path.join(tmp, f"trickle_test_elastic_{os.getpid()}_{algo}_{i}.pt") for i in range(3)]
    me = os.path.abspath(__file__)

    def start(wid: int, kill: bool):
        return subprocess.Popen([sys.executable, me, "--worker", str(port), str(wid), outs[wid], "1" if kill else "0",
                                 algo])

    procs = [start(i, i == 2) for i in range(3)]
    t0 = time.time()
    try:
        rc = procs[2].wait(timeout=120)
        assert rc == -signal.SIGKILL, f"{algo}: worker 2 should have died of SIGKILL, got {rc}"
        procs[2] = start(2, False)  # the same id again: a joiner
        for i, p in enumerate(procs):
            rc = p.wait(timeout=180)
            assert rc == 0, f"{algo}: worker {i} exited with {rc}"
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    res = [torch.load(o) for o in outs]
    for o in outs:
        os.remove(o)
    for i in (1, 2):
        for a, b in zip(res[0]["params"], res[i]["params"]):
            assert torch.equal(a, b), f"{algo}: worker {i}'s parameters differ from worker 0's"
    for i in (0, 1):
        m = res[i]["membership"]
        assert m["left"] == 1 and m["joined"] == 1 and m["workers"] == 3, (algo, m)
    assert res[2]["start"] > KILL_AT, (algo, res[2]["start"])
    print(f"test_elastic: {algo} ok in {time.time() - t0:.1f} s: a killed worker's survivors carried on, its "
          f"restart joined at step {res[2]['start']}, all 3 end bit-identical; {res[0]['membership']}", flush=True)


RESTART_STEPS = 60


def steady_worker(port: int, wid: int, out: str) -> int:
    """A DiLoCo worker that rides out a store restart (store_recovery) and says when built."""
    store = trickle.connect_store("127.0.0.1", port)
    torch.manual_seed(0)
    model = torch.nn.Linear(16, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    el = trickle.Elastic(store, id=wid, initial=3, timeout=5.0, job="restart", store_recovery=30.0)
    diloco = trickle.DiLoCo(model, interval=INTERVAL, outer="nesterov", seed=3, elastic=el)
    open(out + ".built", "w").close()
    for t in range(RESTART_STEPS):
        train_step(model, opt, diloco, 1000 * t + wid)
        time.sleep(0.01)
    torch.save({"params": [p.detach().clone() for p in model.parameters()], "membership": diloco.membership,
                "exchanges": diloco.stats.exchanges}, out)
    return 0


def store_restart() -> None:
    """The store (python3 -m trickle.store) killed while 3 DiLoCo workers train, and started
    again on its port: with store_recovery every worker goes on; none is lost, every outer
    step happens, and the three end bit-identical."""
    tmp = os.environ.get("TMPDIR", "/tmp")
    outs = [os.path.join(tmp, f"trickle_test_elastic_{os.getpid()}_restart_{i}.pt") for i in range(3)]
    me = os.path.abspath(__file__)

    def serve(port: int):
        p = subprocess.Popen([sys.executable, "-m", "trickle.store", "--port", str(port)], stdout=subprocess.PIPE,
                             text=True)
        line = p.stdout.readline()
        assert line.startswith("trickle.store: serving on port "), line
        return p, int(line.split()[-1])

    server, port = serve(0)
    procs = [subprocess.Popen([sys.executable, me, "--steady-worker", str(port), str(i), outs[i]]) for i in range(3)]
    t0 = time.time()
    try:
        while not all(os.path.exists(o + ".built") for o in outs):
            assert time.time() - t0 < 120, "the workers never built their algorithms"
            assert all(p.poll() is None for p in procs), "a worker ended before training"
            time.sleep(0.01)
        time.sleep(0.2)
        server.kill()
        server.wait()
        time.sleep(0.3)
        server, _ = serve(port)
        for i, p in enumerate(procs):
            rc = p.wait(timeout=180)
            assert rc == 0, f"store restart: worker {i} exited with {rc}"
    finally:
        for p in procs + [server]:
            if p.poll() is None:
                p.kill()
    res = [torch.load(o) for o in outs]
    for o in outs:
        os.remove(o)
        os.remove(o + ".built")
    for i in (1, 2):
        for a, b in zip(res[0]["params"], res[i]["params"]):
            assert torch.equal(a, b), f"store restart: worker {i}'s parameters differ from worker 0's"
    for r in res:
        m = r["membership"]
        assert m["left"] == 0 and m["joined"] == 0 and m["workers"] == 3, m
        assert r["exchanges"] == RESTART_STEPS // INTERVAL, r["exchanges"]
    print(f"test_elastic: store restart ok in {time.time() - t0:.1f} s: the store killed and started again, the 3 "
          f"workers went on, every outer step done, bit-identical; {res[0]['membership']}", flush=True)


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        port, wid, out, kill, algo = int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5] == "1", sys.argv[6]
        return worker(port, wid, out, kill, algo)
    if len(sys.argv) > 1 and sys.argv[1] == "--steady-worker":
        return steady_worker(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
    refusals()
    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    for algo in ALGORITHMS:
        scenario(algo, store, store.port)
    store_restart()
    return 0


if __name__ == "__main__":
    sys.exit(main())
