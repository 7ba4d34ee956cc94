"""trickle's Python bindings in one process (world size 1, gloo over a FileStore).

    build/pyenv/bin/python tests/python/test_local.py

Covers the package's surface: names, options, errors, Stats, state_dict, the model forms
it accepts. Exits non-zero when a test fails. TRICKLE_TEST_ONLY=substring runs only the
tests whose name contains it.
"""

from __future__ import annotations

import inspect
import math
import os
import pickle
import sys
import tempfile

import torch
import torch.distributed as dist
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import bits, expect_raises, flat  # noqa: E402

import trickle  # noqa: E402


def make_model(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 3))


def test_not_initialized_is_a_clear_error():
    # Runs before init_process_group (see main()).
    assert not dist.is_initialized()
    expect_raises(RuntimeError, lambda: trickle.SPARTA(make_model()), "init_process_group")
    expect_raises(RuntimeError, lambda: trickle.DiLoCo(make_model()), "not initialized")


def test_names_and_signatures():
    for name in ("SPARTA", "DiLoCo", "SPARTADiLoCo", "Stats", "Aggregation", "MismatchError", "CommError",
                 "STATE_FORMAT"):
        assert hasattr(trickle, name), name
        assert name in trickle.__all__, name
    assert trickle.SAMPLERS == ("uniform", "permutation", "block", "layerwise")
    assert trickle.TOPOLOGIES == ("all_reduce", "ring", "gossip", "exponential", "islands")
    assert trickle.OUTER_OPTIMIZERS == ("sgd", "momentum", "nesterov", "adam", "average")
    assert issubclass(trickle.MismatchError, ValueError)
    assert issubclass(trickle.CommError, RuntimeError)
    assert trickle.MismatchError.__module__ == "trickle"
    sig = inspect.signature(trickle.SPARTA)
    assert list(sig.parameters)[0] == "model"
    assert sig.parameters["fraction"].default == 0.005
    assert sig.parameters["sampler"].default == "uniform"
    assert sig.parameters["group"].default is None
    sig = inspect.signature(trickle.DiLoCo)
    assert sig.parameters["interval"].default == 500 and sig.parameters["outer"].default == "nesterov"
    sig = inspect.signature(trickle.SPARTADiLoCo)
    for k in ("fraction", "interval", "sparta_interval", "outer", "sampler", "schedule", "topology"):
        assert k in sig.parameters, k
    assert "SPARTA" in (trickle.SPARTA.__doc__ or "")


def test_sparta_steps_and_stats():
    m = make_model()
    n = sum(p.numel() for p in m.parameters())
    before = flat(m.parameters())
    s = trickle.SPARTA(m, fraction=0.1, sampler="permutation", seed=42)
    assert s.rank == 0 and s.world_size == 1
    assert s.group is dist.distributed_c10d._get_default_group()
    for _ in range(4):
        s.step()
    st = s.stats
    assert isinstance(st, trickle.Stats)
    assert st.steps == 4 and st.exchanges == 4, st
    assert st.values == 4 * math.ceil(0.1 * n) and st.last_values == math.ceil(0.1 * n), st  # permutation: ceil(p n)
    assert st.bytes_sent == 0 and st.dense_bytes == 0 and st.reduction == 0.0, st  # one worker sends nothing
    assert torch.equal(bits(before), bits(flat(m.parameters()))), "one worker's average changed its parameters"
    assert s.groups == [{"dtype": "Float", "device": "cpu", "names": ["0.weight", "0.bias", "2.weight", "2.bias"],
                         "elements": n}], s.groups
    assert s.options["fraction"] == 0.1 and s.options["sampler"] == "permutation"
    assert "SPARTA" in repr(s) and "rank 0 of 1" in repr(s)


def test_stats_object():
    s = trickle.SPARTA(make_model(), fraction=0.5)
    s.step()
    st = s.stats
    d = dict(st)
    assert list(d) == list(trickle.Stats.FIELDS), d
    assert st["values"] == st.values == d["values"] and isinstance(st.values, int)
    assert isinstance(st.reduction, float) and all(isinstance(d[k], int) for k in d if k != "reduction"), d
    assert st.as_dict() == d and list(st) == list(trickle.Stats.FIELDS) and list(st.keys()) == list(d)
    assert "bytes_sent" in st and "nonexistent" not in st and len(st) == len(trickle.Stats.FIELDS)
    assert pickle.loads(pickle.dumps(st)) == st
    expect_raises(AttributeError, lambda: st.nonexistent, "fields")
    expect_raises(KeyError, lambda: st["nonexistent"])
    for attempt in (lambda: setattr(st, "steps", 3), lambda: setattr(st, "other", 3), lambda: delattr(st, "steps")):
        expect_raises(AttributeError, attempt, "read-only")
    assert st.steps == 1
    # repr: every field, as name=value, and it rebuilds the object.
    r = repr(st)
    assert r.startswith("trickle.Stats(") and all(f"{k}={d[k]!r}" in r for k in d), r
    assert eval(r, {"trickle": trickle}) == st
    # str: a short progress line.
    line = str(st)
    assert line == "1 step, 1 exchange, sent 0 B, received 0 B", line
    # Built from a mapping (as older pickles do) or from keywords; every field needed.
    assert trickle.Stats(d) == st and trickle.Stats(**d) == st
    assert trickle.Stats({**d, "bytes_sent": 5}) != st
    expect_raises(TypeError, lambda: trickle.Stats({k: v for k, v in d.items() if k != "calls"}), "missing field calls")
    expect_raises(TypeError, lambda: trickle.Stats(**d, speed=3), "unknown field speed")
    # A Stats pickled by the previous versions (class trickle._algorithms.Stats, rebuilt from a
    # dict) still loads, and this version's pickles name trickle.Stats.
    assert trickle.Stats.__module__ == "trickle" and b"trickle" in pickle.dumps(st)
    trickle.Stats.__module__ = "trickle._algorithms"
    try:
        old = pickle.dumps(st, protocol=2)
    finally:
        trickle.Stats.__module__ = "trickle"
    assert b"trickle._algorithms" in old and pickle.loads(old) == st
    # str with bytes: decimal units and the reduction.
    big = trickle.Stats({**d, "steps": 200, "exchanges": 200, "bytes_sent": 1_234_567, "bytes_received": 999,
                         "reduction": 252.04})
    assert str(big) == "200 steps, 200 exchanges, sent 1.23 MB (252.0x less than dense), received 999 B", str(big)
    assert "12.6 kB" in str(trickle.Stats({**d, "bytes_received": 12_600})), str(trickle.Stats({**d, "bytes_received": 12_600}))


def test_hooks():
    m = make_model()
    d = trickle.DiLoCo(m, interval=2, outer="sgd", outer_lr=1.0)
    calls = []
    h1 = d.add_hook(lambda step, st: calls.append(("a", step, st)))
    h3 = d.add_hook(lambda step, st: calls.append(("b", step, st.exchanges)), every=3)
    assert isinstance(h1, trickle.HookHandle) and h1.active and "active" in repr(h1)
    for _ in range(6):
        d.step()
    assert [c[:2] for c in calls if c[0] == "a"] == [("a", k) for k in range(1, 7)], calls
    assert [c for c in calls if c[0] == "b"] == [("b", 3, 1), ("b", 6, 3)], calls
    # The order of registration, and the stats of that step (steps == step).
    assert [c[0] for c in calls[:4]] == ["a", "a", "a", "b"], calls
    assert all(isinstance(c[2], trickle.Stats) and c[2].steps == c[1] for c in calls if c[0] == "a"), calls
    assert calls[-2][2] == d.stats  # the last 'a' call saw the current stats
    h1.remove()
    h1.remove()  # idempotent
    assert not h1.active and "removed" in repr(h1)
    calls.clear()
    for _ in range(3):
        d.step()
    assert calls == [("b", 9, 4)], calls
    h3.remove()
    # A context manager; a hook that removes itself runs once.
    seen = []
    with d.add_hook(lambda step, st: seen.append(step)) as h:
        d.step()
    d.step()
    assert seen == [10] and not h.active, seen
    handle = {}

    def once(step, st):
        seen.append(("once", step))
        handle["h"].remove()

    handle["h"] = d.add_hook(once)
    d.step()
    d.step()
    assert seen[-1] == ("once", 12) and len(seen) == 2, seen
    # A hook that raises: the exception propagates from step(), the step itself is done,
    # the hooks after it are skipped for that step, and the algorithm goes on.
    later = []

    def boom(step, st):
        if step == 16:
            raise RuntimeError("hook failed at 16")

    hb = d.add_hook(boom)
    hl = d.add_hook(lambda step, st: later.append(step))
    d.step()  # 14
    d.step()  # 15
    expect_raises(RuntimeError, d.step, "hook failed at 16")  # 16: an outer step (interval 2)
    assert d.stats.steps == 16 and d.stats.exchanges == 8, d.stats
    assert later == [14, 15], later
    d.step()
    assert later == [14, 15, 17] and d.stats.steps == 17, later
    hb.remove()
    hl.remove()
    # The state saved after the failed hook resumes like any other.
    d2 = trickle.DiLoCo(m, interval=2, outer="sgd", outer_lr=1.0, broadcast_initial=False)
    d2.load_state_dict(d.state_dict())
    assert d2.stats == d.stats
    # Bad hooks and intervals are refused; nothing is registered.
    expect_raises(TypeError, lambda: d.add_hook(42), "callable")
    expect_raises(ValueError, lambda: d.add_hook(print, every=0), "every must be >= 1")
    expect_raises(TypeError, lambda: d.add_hook(print, every=1.5), "every must be an int")
    expect_raises(TypeError, lambda: d.add_hook(print, 2), "positional")
    d.step()
    # A handle does not keep its algorithm alive.
    import gc
    import weakref

    s = trickle.SPARTA(make_model(), fraction=0.5)
    h = s.add_hook(lambda step, st: None)
    ref = weakref.ref(s)
    del s
    gc.collect()
    assert ref() is None and not h.active
    h.remove()


def test_diloco_and_sparta_diloco():
    m = make_model()
    d = trickle.DiLoCo(m, interval=2, outer="sgd", outer_lr=1.0)
    with torch.no_grad():
        for p in m.parameters():
            p.add_(0.5)
    expected = flat(m.parameters())
    d.step()
    d.step()
    assert d.stats.exchanges == 1 and d.stats.steps == 2, d.stats
    # One worker, plain SGD with lr 1: the outer step lands on the worker's own parameters.
    assert torch.allclose(flat(m.parameters()), expected, atol=1e-6)
    b = trickle.SPARTADiLoCo(m, fraction=0.2, interval=3, sparta_interval=1, outer="nesterov", outer_lr=0.5,
                             momentum=0.8)
    for _ in range(6):
        b.step()
    assert b.outer_stats.exchanges == 2 and b.sparse_stats.exchanges == 4, (b.outer_stats, b.sparse_stats)
    assert b.stats.steps == 6
    assert b.options["outer_lr"] == 0.5 and b.options["momentum"] == 0.8


def test_model_forms():
    m = make_model()
    n = sum(p.numel() for p in m.parameters())
    forms = [
        m,
        list(m.parameters()),
        m.parameters(),  # a generator
        list(m.named_parameters()),
        dict(m.named_parameters()),
        torch.zeros(10),  # one tensor
    ]
    for f in forms:
        s = trickle.SPARTA(f, fraction=0.5)
        s.step()
        assert s.stats.steps == 1
    assert trickle.SPARTA(list(m.parameters())).groups[0]["names"] == ["0", "1", "2", "3"]
    assert trickle.SPARTA(torch.zeros(10)).groups[0]["elements"] == 10
    # Tied weights are kept once, as named_parameters() does.
    w = nn.Parameter(torch.randn(4, 4))
    s = trickle.SPARTA([("a", w), ("b", w)], fraction=1.0)
    assert s.groups[0]["names"] == ["a"], s.groups
    assert sum(g["elements"] for g in trickle.SPARTA(m).groups) == n
    # Parameters that do not require grad are included, as named_parameters() lists them.
    frozen = make_model()
    frozen[0].weight.requires_grad_(False)
    assert trickle.SPARTA(frozen).groups[0]["elements"] == n


def test_bad_arguments():
    m = make_model()
    expect_raises(TypeError, lambda: trickle.SPARTA(m, fractoin=0.1), "unknown keyword argument 'fractoin'", "fraction")
    expect_raises(TypeError, lambda: trickle.DiLoCo(m, fraction=0.1), "'fraction'", "valid:")
    expect_raises(ValueError, lambda: trickle.SPARTA(m, sampler="foo"), "unknown sampler 'foo'",
                  "uniform, permutation, block, layerwise")
    expect_raises(ValueError, lambda: trickle.SPARTA(m, schedule="exp"), "constant, linear, cosine, piecewise")
    expect_raises(ValueError, lambda: trickle.SPARTA(m, topology="tree"), "all_reduce, ring, gossip")
    expect_raises(ValueError, lambda: trickle.DiLoCo(m, outer="lion"), "sgd, momentum, nesterov, adam, average")
    expect_raises(ValueError, lambda: trickle.SPARTA(m, layerwise_mode="x"), "per_tensor, rotating")
    expect_raises(ValueError, lambda: trickle.SPARTA(m, fraction=1.5), "fraction must be in (0, 1]", "1.5")
    expect_raises(ValueError, lambda: trickle.SPARTA(m, fraction=0.0), "fraction")
    expect_raises(ValueError, lambda: trickle.SPARTA(m, interval=0), "interval")
    expect_raises(ValueError, lambda: trickle.SPARTA(m, seed=-1), "seed")
    expect_raises(TypeError, lambda: trickle.SPARTA(m, fraction="0.1"), "fraction must be a number")
    expect_raises(TypeError, lambda: trickle.SPARTA(m, interval=1.5), "interval must be an int")
    expect_raises(TypeError, lambda: trickle.SPARTA(m, broadcast_initial=1), "True or False")
    expect_raises(ValueError, lambda: trickle.SPARTA(m, schedule="piecewise"), "points")
    expect_raises(ValueError, lambda: trickle.SPARTA(m, points=[(1, 0.1)]), "piecewise")
    expect_raises(ValueError, lambda: trickle.SPARTA(m, schedule="piecewise", points=[(1, 0.1)], warmup_steps=3),
                  "warmup")
    expect_raises(ValueError, lambda: trickle.SPARTA(m, schedule="linear", end_fraction=2.0), "fraction")
    expect_raises(ValueError, lambda: trickle.DiLoCo(m, outer="adam", momentum=0.9), "momentum")
    expect_raises(ValueError, lambda: trickle.DiLoCo(m, outer="average", outer_lr=0.5), "learning rate")
    expect_raises(TypeError, lambda: trickle.DiLoCo(m, betas=0.9), "betas")
    expect_raises(ValueError, lambda: trickle.DiLoCo(m, outer="adam", betas=(1.5, 0.9)), "beta1")
    expect_raises(ValueError, lambda: trickle.DiLoCo(m, outer_lr=-1.0), "lr")
    expect_raises(ValueError, lambda: trickle.DiLoCo(m, prune_fraction=1.0), "prune")
    expect_raises(ValueError, lambda: trickle.DiLoCo(m, weight=-1.0), "weight")
    expect_raises(TypeError, lambda: trickle.SPARTA(m, group="world"), "ProcessGroup")
    expect_raises(TypeError, lambda: trickle.SPARTA(42), "nn.Module")
    expect_raises(TypeError, lambda: trickle.SPARTA([torch.zeros(3), 5]), "item 1")
    expect_raises(TypeError, lambda: trickle.SPARTA([{"params": [torch.zeros(3)]}]), "parameter group")
    expect_raises(ValueError, lambda: trickle.SPARTA([]), "no parameters")
    expect_raises(ValueError, lambda: trickle.SPARTA(nn.Linear(3, 3).double()), "dtype", "float32")
    expect_raises(ValueError, lambda: trickle.SPARTA([torch.zeros(3, 3).t()]), "not contiguous")
    # A device other than the CPU and CUDA (meta here) is refused with the reason; CUDA
    # tensors by a build without CUDA, saying how to rebuild (test_build_info).
    expect_raises(ValueError, lambda: trickle.SPARTA([torch.empty(3, device="meta")]), "on meta",
                  "CPU and CUDA tensors")
    if torch.cuda.is_available() and not trickle.build_info()["cuda"]:
        expect_raises(ValueError, lambda: trickle.SPARTA([torch.zeros(3, device="cuda")]), "no CUDA support",
                      "--force-reinstall")


def test_moved_parameters_are_refused():
    m = make_model()
    s = trickle.SPARTA(m, fraction=0.5)
    s.step()
    m[0].weight.data = torch.zeros_like(m[0].weight)  # new storage
    expect_raises(ValueError, s.step, "moved or reallocated", "0.weight")


def test_autograd_rule():
    m = make_model()
    s = trickle.SPARTA(m, fraction=0.5)
    x = torch.randn(3, 6)
    loss = m(x).pow(2).sum()
    s.step()
    expect_raises(RuntimeError, loss.backward, "inplace operation")
    d = trickle.DiLoCo(m, interval=1)
    loss = m(x).pow(2).sum()
    d.step()
    expect_raises(RuntimeError, loss.backward, "inplace operation")
    # A step without an exchange does not bump the version counters.
    d2 = trickle.DiLoCo(m, interval=5)
    loss = m(x).pow(2).sum()
    d2.step()
    loss.backward()


def test_state_dict_file_round_trip():
    m = make_model()
    s = trickle.SPARTA(m, fraction=0.1, sampler="permutation", seed=1)
    for _ in range(3):
        s.step()
    sd = s.state_dict()
    assert sd["format"] == trickle.STATE_FORMAT and sd["algorithm"] == "SPARTA"
    assert isinstance(sd["trickle"], bytes) and sd["rank"] == 0 and sd["world_size"] == 1
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "sparta.pt")
        torch.save(sd, path)
        loaded = torch.load(path)
        try:
            safe = torch.load(path, weights_only=True)
        except TypeError:  # a torch without weights_only
            safe = loaded
        except pickle.UnpicklingError as e:
            # Older torch (1.13 .. 2.x) refuses bytes under weights_only=True (`_codecs.encode`);
            # newer ones allow them (and default to weights_only=True).
            print(f"  note: torch {torch.__version__}: torch.load(weights_only=True) cannot read the state's "
                  f"bytes ({str(e)[-40:].strip()}); weights_only=False works", flush=True)
            safe = loaded
    s2 = trickle.SPARTA(m, fraction=0.1, sampler="permutation", seed=1, broadcast_initial=False)
    s2.load_state_dict(loaded)
    assert s2.stats.steps == 3 and s2.stats.values == s.stats.values, (s2.stats, s.stats)
    s2.load_state_dict(safe)
    # Accepts the blob as a uint8 tensor too.
    s2.load_state_dict({**sd, "trickle": torch.frombuffer(bytearray(sd["trickle"]), dtype=torch.uint8)})
    # Another configuration's state is refused, and the object is unchanged.
    s3 = trickle.SPARTA(m, fraction=0.2, sampler="permutation", seed=1)
    expect_raises(ValueError, lambda: s3.load_state_dict(sd), "checkpoint")
    assert s3.stats.steps == 0
    expect_raises(ValueError, lambda: s3.load_state_dict({"format": "x"}), "not a trickle state")
    expect_raises(TypeError, lambda: s3.load_state_dict([1, 2]), "expected a dict")
    expect_raises(ValueError, lambda: s3.load_state_dict({**sd, "algorithm": "DiLoCo"}), "DiLoCo")
    expect_raises(TypeError, lambda: s3.load_state_dict({**sd, "trickle": 5}), "bytes")
    expect_raises(ValueError, lambda: s3.load_state_dict({**sd, "trickle": sd["trickle"][:-3]}), "checkpoint")
    s3.step()
    # DiLoCo and SPARTA + DiLoCo states.
    for make in (lambda b: trickle.DiLoCo(m, interval=2, broadcast_initial=b),
                 lambda b: trickle.SPARTADiLoCo(m, interval=2, fraction=0.3, broadcast_initial=b)):
        a = make(True)
        for _ in range(3):
            a.step()
        b = make(False)
        b.load_state_dict(a.state_dict())
        assert b.stats.steps == 3


def test_sub_group_of_one():
    sub = dist.new_group([0])
    s = trickle.SPARTA(make_model(), group=sub)
    s.step()
    assert s.group is sub and s.world_size == 1


# ---------------------------------------------------------------------------------------
# Parity with the C++ library: outer learning-rate schedules, sparsifiers, native, streaming,
# per-group stats, set_weight. One worker: every outer step averages one replica, so the
# expected parameters follow from the update rules written out here.


def _lr_multipliers(kind: str, steps: int, **kw):
    """schedule.fraction(t - 1, 1.0) for outer steps t = 1 .. steps (trickle/schedule/schedule.hpp)."""
    out = []
    for k in range(steps):
        if kind == "linear":
            e, n = kw["end"], kw["n"]
            f = e if k >= n else 1.0 + (e - 1.0) * k / n
        elif kind == "cosine":
            e, n = kw["end"], kw["n"]
            f = e if k >= n else e + (1.0 - e) * 0.5 * (1.0 + math.cos(math.pi * k / n))
        elif kind == "piecewise":
            f = 1.0
            for at, v in kw["points"]:
                if k >= at:
                    f = v
        elif kind == "warmup":  # warmup<constant>
            n, s0 = kw["n"], kw["start"]
            f = 1.0 if k >= n else s0 + (1.0 - s0) * k / n
        else:
            f = 1.0
        out.append(f)
    return out


def _outer_run(outer_steps: int, make, torch_opt=None, multipliers=None, n: int = 16):
    """One tensor trained by a fixed increment per step, an outer step after each (interval 1):
    the tensor after every outer step, and the torch reference (torch_opt over a copy, its lr
    set to base * multiplier before each step, as LambdaLR does)."""
    g = torch.Generator().manual_seed(5)
    p = torch.randn(n, generator=g)
    incs = [torch.randn(n, generator=g) * 0.1 for _ in range(outer_steps)]
    algo = make([("p", p)])
    got = []
    for t in range(outer_steps):
        with torch.no_grad():
            p.add_(incs[t])
        algo.step()
        got.append(p.clone())
    if torch_opt is None:
        return algo, got, None
    q = torch.nn.Parameter(torch.randn(n, generator=torch.Generator().manual_seed(5)))
    opt = torch_opt([q])
    base = opt.param_groups[0]["lr"]
    ref = []
    trained = q.detach().clone()
    for t in range(outer_steps):
        trained = q.detach() + incs[t]
        opt.param_groups[0]["lr"] = base * multipliers[t]
        q.grad = q.detach() - trained  # the outer gradient: snapshot - parameters
        opt.step()
        ref.append(q.detach().clone())
    return algo, got, ref


def test_outer_lr_schedules():
    sched = dict(outer_lr_schedule="linear", outer_lr_end_fraction=0.25, outer_lr_schedule_steps=3)
    mult = _lr_multipliers("linear", 6, end=0.25, n=3)
    assert [round(x, 12) for x in mult] == [1.0, 0.75, 0.5, 0.25, 0.25, 0.25], mult
    cases = [
        ("sgd linear", dict(outer="sgd", outer_lr=0.8, **sched), lambda ps: torch.optim.SGD(ps, lr=0.8), mult),
        ("nesterov cosine", dict(outer="nesterov", outer_lr=0.7, momentum=0.9, outer_lr_schedule="cosine",
                                 outer_lr_end_fraction=0.1, outer_lr_schedule_steps=4),
         lambda ps: torch.optim.SGD(ps, lr=0.7, momentum=0.9, nesterov=True), _lr_multipliers("cosine", 6, end=0.1, n=4)),
        ("momentum piecewise", dict(outer="momentum", outer_lr=0.5, momentum=0.8, outer_lr_schedule="piecewise",
                                    outer_lr_points=[(1, 0.5), (3, 0.25)]),
         lambda ps: torch.optim.SGD(ps, lr=0.5, momentum=0.8), _lr_multipliers("piecewise", 6, points=[(1, 0.5), (3, 0.25)])),
        ("adam warmup", dict(outer="adam", outer_lr=0.05, betas=(0.9, 0.95), outer_lr_warmup_steps=2,
                             outer_lr_warmup_start_fraction=0.5),
         lambda ps: torch.optim.Adam(ps, lr=0.05, betas=(0.9, 0.95)), _lr_multipliers("warmup", 6, n=2, start=0.5)),
    ]
    for name, kw, opt, mults in cases:
        algo, got, ref = _outer_run(6, lambda p: trickle.DiLoCo(p, interval=1, **kw), opt, mults)
        assert algo.stats.exchanges == 6, (name, algo.stats)
        for t in range(6):
            assert torch.allclose(got[t], ref[t], rtol=1e-5, atol=1e-6), (name, t, (got[t] - ref[t]).abs().max())
        assert algo.options["outer_lr_schedule"] == kw.get("outer_lr_schedule", "constant")
    # Without a schedule the multiplier is 1: the same bits as an explicit constant, and the
    # same configuration (the state of one loads into the other).
    a, ga, _ = _outer_run(4, lambda p: trickle.DiLoCo(p, interval=1, outer="sgd", outer_lr=0.8))
    b, gb, _ = _outer_run(4, lambda p: trickle.DiLoCo(p, interval=1, outer="sgd", outer_lr=0.8,
                                                      outer_lr_schedule="constant", outer_lr_end_fraction=0.3))
    assert all(torch.equal(bits(x), bits(y)) for x, y in zip(ga, gb))
    b.load_state_dict(a.state_dict())
    # A schedule is part of the configuration: its state is refused by an unscheduled object.
    c, _, _ = _outer_run(2, lambda p: trickle.DiLoCo(p, interval=1, outer="sgd", outer_lr=0.8, **sched))
    expect_raises(ValueError, lambda: a.load_state_dict(c.state_dict()), "different configuration")
    # The lr schedule reaches SPARTA + DiLoCo too (one sparse exchange between outer steps).
    m = make_model()
    sd = trickle.SPARTADiLoCo(m, fraction=0.5, interval=2, outer="sgd", outer_lr=0.5, **sched)
    for _ in range(4):
        sd.step()
    assert sd.outer_stats.exchanges == 2 and sd.sparse_stats.exchanges == 2, (sd.outer_stats, sd.sparse_stats)
    # Bad schedules are refused, by name and by keyword.
    expect_raises(ValueError, lambda: trickle.DiLoCo(m, outer="average", outer_lr_schedule="cosine"),
                  "no learning rate to schedule", "'sgd'")
    expect_raises(ValueError, lambda: trickle.DiLoCo(m, outer="average", outer_lr_warmup_steps=3),
                  "no learning rate to schedule")
    expect_raises(ValueError, lambda: trickle.DiLoCo(m, outer_lr_schedule="exp"), "unknown outer_lr_schedule 'exp'",
                  "constant, linear, cosine, piecewise")
    expect_raises(ValueError, lambda: trickle.DiLoCo(m, outer_lr_schedule="piecewise"), "needs outer_lr_points")
    expect_raises(ValueError, lambda: trickle.DiLoCo(m, outer_lr_points=[(1, 0.5)]), "outer_lr_points applies to",
                  "piecewise")
    expect_raises(ValueError, lambda: trickle.DiLoCo(m, outer_lr_schedule="piecewise", outer_lr_points=[(1, 0.5)],
                                                     outer_lr_warmup_steps=2), "outer_lr_warmup_steps cannot")
    expect_raises(ValueError, lambda: trickle.DiLoCo(m, outer_lr_schedule="linear", outer_lr_end_fraction=1.5),
                  "lr schedule", "end_fraction must be in (0, 1]", "1.5")
    expect_raises(ValueError, lambda: trickle.DiLoCo(m, outer_lr_schedule="cosine", outer_lr_schedule_steps=0),
                  "steps must be >= 1")
    expect_raises(ValueError, lambda: trickle.DiLoCo(m, outer_lr_schedule="piecewise", outer_lr_points=[(2, 0.5), (1, 0.2)]),
                  "strictly increasing")
    expect_raises(TypeError, lambda: trickle.DiLoCo(m, outer_lr_end_fraction="0.1"), "outer_lr_end_fraction must be a number")
    expect_raises(TypeError, lambda: trickle.DiLoCo(m, outer_lr_schedule_steps=2.5), "outer_lr_schedule_steps must be an int")
    expect_raises(TypeError, lambda: trickle.DiLoCo(m, outer_lr_sched="cosine"), "unknown keyword argument 'outer_lr_sched'")
    expect_raises(TypeError, lambda: trickle.SPARTA(m, outer_lr_schedule="cosine"), "unknown keyword argument")


def _topk_mask(delta: torch.Tensor, chunk: int, k: int) -> torch.Tensor:
    """Positions chunk_topk keeps: the k largest magnitudes of every chunk (ties by index)."""
    keep = torch.zeros(delta.numel(), dtype=torch.bool)
    for c0 in range(0, delta.numel(), chunk):
        part = delta[c0:c0 + chunk].abs()
        order = sorted(range(part.numel()), key=lambda i: (-float(part[i]), i))
        for i in order[:k]:
            keep[c0 + i] = True
    return keep


def test_sparsifiers():
    n = 200
    g = torch.Generator().manual_seed(9)
    p0 = torch.randn(n, generator=g)
    inc = torch.randn(n, generator=g)
    for sparsifier, extra, kept in (("chunk_topk", dict(sparse_chunk=64, sparse_k=4), 3 * 4 + 4),
                                    ("random_k", dict(sparse_fraction=0.1), 20)):
        p = p0.clone()
        d = trickle.DiLoCo([("p", p)], interval=1, outer="sgd", outer_lr=1.0, outer_sparsifier=sparsifier, **extra)
        with torch.no_grad():
            p.add_(inc)
        trained = p.clone()
        d.step()
        # sgd with lr 1 on one worker: a kept position lands on the trained value, any other
        # goes back to the snapshot (its bits).
        back = bits(p) == bits(p0)
        assert int((~back).sum()) == kept, (sparsifier, int((~back).sum()))
        assert torch.allclose(p[~back], trained[~back], atol=1e-6), sparsifier
        if sparsifier == "chunk_topk":
            assert torch.equal(~back, _topk_mask(trained - p0, 64, 4)), "chunk_topk kept other positions"
        assert d.stats.exchanges == 1 and d.options["outer_sparsifier"] == sparsifier
    # Error feedback: what was not sent is sent later; with no further training, 16 outer
    # steps send every one of the 64 values of a chunk (4 at a time), largest first.
    p = p0.clone()
    d = trickle.DiLoCo([("p", p)], interval=1, outer="sgd", outer_lr=1.0, outer_sparsifier="chunk_topk",
                       sparse_chunk=64, sparse_k=4, error_feedback=1.0)
    with torch.no_grad():
        p.add_(inc)
    target = p.clone()
    for t in range(16):
        d.step()
        moved = int((bits(p) != bits(p0)).sum())
        assert moved == min(200, 16 * (t + 1) if t < 2 else 12 * (t + 1) + 8), (t, moved)
    assert torch.allclose(p, target, atol=1e-5), (p - target).abs().max()
    # The values through a lossy codec (int8 blocks), and SPARTA + DiLoCo.
    p = p0.clone()
    d = trickle.DiLoCo([("p", p)], interval=1, outer="sgd", outer_lr=1.0, outer_sparsifier="random_k",
                       sparse_fraction=0.5, outer_codec="int8")
    with torch.no_grad():
        p.add_(inc)
    d.step()
    moved = int((bits(p) != bits(p0)).sum())  # 100 kept; an int8 code of 0 leaves its position as it was
    assert 80 <= moved <= 100, moved
    m = make_model()
    b = trickle.SPARTADiLoCo(m, fraction=0.5, interval=2, outer_sparsifier="chunk_topk", sparse_chunk=8, sparse_k=2)
    for _ in range(4):
        b.step()
    assert b.outer_stats.exchanges == 2, b.outer_stats
    # Configuration: a sparsifier's fields are agreed on and part of the checkpoint.
    e1 = trickle.DiLoCo(make_model(), interval=1, outer_sparsifier="chunk_topk", sparse_k=4, broadcast_initial=False)
    e2 = trickle.DiLoCo(make_model(), interval=1, outer_sparsifier="chunk_topk", sparse_k=2, broadcast_initial=False)
    expect_raises(ValueError, lambda: e2.load_state_dict(e1.state_dict()), "different configuration")
    # Bad ones are refused.
    expect_raises(ValueError, lambda: trickle.DiLoCo(m, outer_sparsifier="topk"), "unknown outer_sparsifier 'topk'",
                  "chunk_topk, random_k")
    expect_raises(ValueError, lambda: trickle.DiLoCo(m, outer_sparsifier="chunk_topk", sparse_k=0), "k must be >= 1")
    expect_raises(ValueError, lambda: trickle.DiLoCo(m, outer_sparsifier="chunk_topk", sparse_chunk=4, sparse_k=5),
                  "k must be <= chunk")
    expect_raises(ValueError, lambda: trickle.DiLoCo(m, outer_sparsifier="random_k", sparse_fraction=0.0),
                  "fraction must be in (0, 1]")
    expect_raises(ValueError, lambda: trickle.DiLoCo(m, outer_sparsifier="random_k", topology="ring"),
                  "sums through the all_reduce topology")
    expect_raises(ValueError, lambda: trickle.DiLoCo(m, outer_sparsifier="random_k", outer_codec="int8",
                                                     stochastic_rounding=True), "stochastic_rounding")
    expect_raises(TypeError, lambda: trickle.DiLoCo(m, outer_sparsifier="chunk_topk", sparse_k=2.0),
                  "sparse_k must be an int")


def test_native_codec():
    def bf16_model():
        return [("w", torch.randn(40, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16))]

    # native is the parameters' own dtype: on bf16 the bf16 codec, on float32 fp32 (plain):
    # the same configuration, so a state saved under one name loads under the other.
    for make, same, other in (
        (lambda **kw: trickle.SPARTA(bf16_model(), fraction=0.5, broadcast_initial=False, **kw), "bf16", "fp16"),
        (lambda **kw: trickle.SPARTA(make_model(), fraction=0.5, broadcast_initial=False, **kw), "fp32", "bf16"),
    ):
        a = make(codec="native")
        a.step()
        assert a.options["codec"] == "native"
        make(codec=same).load_state_dict(a.state_dict())
        expect_raises(ValueError, lambda: make(codec=other).load_state_dict(a.state_dict()), "different configuration")
    for make, same, other in (
        (lambda **kw: trickle.DiLoCo(bf16_model(), interval=1, broadcast_initial=False, **kw), "bf16", "int8"),
        (lambda **kw: trickle.SPARTADiLoCo(make_model(), interval=2, broadcast_initial=False, **kw), "fp32", "fp16"),
    ):
        a = make(outer_codec="native")
        a.step()
        make(outer_codec=same).load_state_dict(a.state_dict())
        expect_raises(ValueError, lambda: make(outer_codec=other).load_state_dict(a.state_dict()),
                      "different configuration")
    # native through a sparsifier's values, and with stochastic rounding (no such codec).
    trickle.DiLoCo(bf16_model(), interval=1, outer_codec="native", outer_sparsifier="random_k").step()
    expect_raises(ValueError, lambda: trickle.SPARTA(make_model(), codec="native", stochastic_rounding=True),
                  "stochastic_rounding")
    expect_raises(ValueError, lambda: trickle.SPARTA(make_model(), codec="natve"), "unknown codec 'natve'", "native")


def test_state_in_pinned_host_is_for_cuda_parameters():
    # The option reaches the library, which takes it for CUDA parameters only: on CPU ones it
    # is refused with the library's message, and a bool is required.
    m = make_model()
    expect_raises(ValueError, lambda: trickle.DiLoCo(m, interval=3, state_in_pinned_host=True), "state_in_pinned_host",
                  "cuda_space")
    expect_raises(ValueError, lambda: trickle.SPARTADiLoCo(m, interval=3, state_in_pinned_host=True),
                  "state_in_pinned_host")
    expect_raises(TypeError, lambda: trickle.DiLoCo(m, state_in_pinned_host="yes"), "state_in_pinned_host")
    d = trickle.DiLoCo(m, interval=3, state_in_pinned_host=False)
    assert d.options["state_in_pinned_host"] is False


def test_streaming_diloco():
    # Four tensors (48, 8, 24, 3 values); fragments of two tensors each. With H = 4 and
    # F = 2, fragment f takes its outer step after inner steps t with (t + 1) = f H / F + k H:
    # fragment 0 after t = 3, 7; fragment 1 after t = 1, 5. tau delays the application,
    # alpha mixes the local progress in (docs/streaming.md).
    H, lr, F = 4, 0.5, 2
    for tau, alpha in ((0, 0.0), (1, 0.0), (1, 0.5)):
        m = make_model()
        params = list(m.parameters())
        d = trickle.DiLoCo(m, interval=H, outer="sgd", outer_lr=lr, fragments=F, fragment_tensors=[2, 2],
                           overlap_steps=tau, mix=alpha)
        members = [[0, 1], [2, 3]]  # the tensors of each fragment
        snap = [p.detach().clone() for p in params]
        pending = {}  # fragment -> (the step after which it is applied, its outer gradient)
        g = torch.Generator().manual_seed(3)
        for t in range(9):
            with torch.no_grad():
                for p in params:
                    p.add_(torch.randn(p.shape, generator=g) * 0.05)
            expect = [p.detach().clone() for p in params]

            def apply(f):
                grads = pending.pop(f)[1]
                for j, gr in zip(members[f], grads):
                    snap[j] = snap[j] - lr * gr  # sgd: snapshot - lr * (averaged) outer gradient
                    expect[j] = alpha * expect[j] + (1 - alpha) * snap[j] if alpha else snap[j].clone()

            for f in range(F):  # after inner step t: first the averages due, then the outer steps due
                if f in pending and pending[f][0] == t:
                    apply(f)
            for f in range(F):
                phase = f * H // F
                if t + 1 >= phase and (t + 1 - phase) % H == 0:
                    pending[f] = (t + tau, [snap[j] - expect[j] for j in members[f]])
                    if tau == 0:
                        apply(f)
            d.step()
            for j, p in enumerate(params):
                assert torch.allclose(p.detach(), expect[j], atol=1e-5), (tau, alpha, t, j)
        assert d.stats.exchanges == 4, (tau, alpha, d.stats)  # fragment 1 after t = 1, 5; fragment 0 after 3, 7
        assert d.options["fragments"] == 2 and d.options["fragment_tensors"] == [2, 2]
    # Balanced by size without a list, and inside SPARTA + DiLoCo (the sparse exchange is
    # skipped at the steps where a fragment's outer step runs).
    m = make_model()
    b = trickle.SPARTADiLoCo(m, fraction=0.5, interval=4, fragments=2)
    for _ in range(8):
        b.step()
    assert b.outer_stats.exchanges == 4 and b.sparse_stats.exchanges == 4, (b.outer_stats, b.sparse_stats)
    # A streaming state resumes (fragments in flight included).
    d = trickle.DiLoCo(m, interval=4, fragments=2, overlap_steps=1)
    for _ in range(2):
        d.step()
    d2 = trickle.DiLoCo(m, interval=4, fragments=2, overlap_steps=1, broadcast_initial=False)
    d2.load_state_dict(d.state_dict())
    assert d2.stats == d.stats
    # Bad streaming options are refused with the library's messages.
    for kw, words in ((dict(fragments=0), ("fragments must be >= 1",)),
                      (dict(fragments=5), ("5 fragments", "only 4 tensors")),
                      (dict(fragment_tensors=[1, 2]), ("sums to 3 tensors", "has 4")),
                      (dict(fragments=3, fragment_tensors=[2, 2]), ("fragment_tensors lists 2",)),
                      (dict(fragment_tensors=[4, 0]), ("must be >= 1",)),
                      (dict(overlap_steps=4), ("overlap_steps (tau) must be < interval",)),
                      (dict(mix=1.5), ("mix must be in [0, 1]",)),
                      (dict(fragment_tensors=[2, -2]), ("fragment_tensors[] must be in",))):
        expect_raises(ValueError, lambda: trickle.DiLoCo(m, interval=4, **kw), *words)
    expect_raises(TypeError, lambda: trickle.DiLoCo(m, fragment_tensors="2,2"), "fragment_tensors must be a list")
    expect_raises(TypeError, lambda: trickle.DiLoCo(m, fragment_tensors=[2, 2.0]), "must be an int")
    expect_raises(TypeError, lambda: trickle.DiLoCo(m, mix="0.5"), "mix must be a number")


def test_group_stats_and_set_weight():
    params = [("f32", torch.randn(30)), ("bf16", torch.randn(20).to(torch.bfloat16)), ("f32b", torch.randn(6))]
    s = trickle.SPARTA(params, fraction=0.5, sampler="permutation")
    for _ in range(3):
        s.step()
    gs = s.group_stats
    assert len(gs) == 2 and all(isinstance(x, trickle.Stats) for x in gs), gs
    assert [x.last_values for x in gs] == [18, 10], gs  # ceil(0.5 n) per group: 36 and 20 elements
    total = s.stats
    assert all(x.steps == total.steps == 3 for x in gs) and [x.exchanges for x in gs] == [3, 3], (gs, total)
    for k in ("exchanges", "values", "calls", "bytes_sent", "dense_bytes", "initial_bytes_sent"):  # sums
        assert sum(x[k] for x in gs) == total[k], (k, gs, total)
    b = trickle.SPARTADiLoCo(params, fraction=0.5, interval=3)
    for _ in range(6):
        b.step()
    assert [x.exchanges for x in b.sparse_group_stats] == [4, 4] and [x.exchanges for x in b.outer_group_stats] == [2, 2]
    assert sum(x.values for x in b.sparse_group_stats) == b.sparse_stats.values
    assert sum(x.values for x in b.outer_group_stats) == b.outer_stats.values
    # set_weight: DiLoCo and SPARTA + DiLoCo; local, finite and >= 0.
    d = trickle.DiLoCo(make_model(), interval=2)
    d.set_weight(3.5)
    b.set_weight(0.0)
    d.step()
    d.step()
    expect_raises(ValueError, lambda: d.set_weight(-1.0), "weight must be finite and >= 0")
    expect_raises(ValueError, lambda: d.set_weight(float("nan")), "weight")
    expect_raises(TypeError, lambda: d.set_weight("2"), "must be a number")
    assert not hasattr(s, "set_weight")


def test_aggregate_option_and_record():
    # aggregate= is the library's text (aggregate::parse); the options keep it as given.
    sig = inspect.signature(trickle.DiLoCo)
    assert sig.parameters["aggregate"].default == "mean"
    assert inspect.signature(trickle.SPARTADiLoCo).parameters["aggregate"].default == "mean"
    assert "aggregate" not in inspect.signature(trickle.SPARTA).parameters
    m = make_model()
    d = trickle.DiLoCo(m, interval=2, outer="sgd", outer_lr=1.0)
    a = d.aggregation
    assert isinstance(a, trickle.Aggregation) and a.rule == "mean" and a.rounds == 0, repr(a)
    assert a.weights == [] and a.excluded == [] and a.skipped == 0, repr(a)
    d.set_weight(2.5)
    with torch.no_grad():
        for p in m.parameters():
            p.add_(0.25)
    d.step()
    d.step()
    a = d.aggregation
    assert a.rule == "mean" and a.rounds == 1 and a.weights == [2.5], repr(a)
    assert len(a.norm) == 1 and a.norm[0] > 0 and math.isfinite(a.norm[0]), repr(a)
    assert a.excluded == [] and a.clipped == [] and a.excluded_total == 0 and a.skipped == 0, repr(a)
    assert d.group_aggregation == [a]
    # The record: attributes, keys, a plain dict, read-only, pickled, rebuilt from its repr.
    dd = dict(a)
    assert list(dd) == list(trickle.Aggregation.FIELDS) and a.as_dict() == dd and a["weights"] == [2.5], dd
    assert isinstance(a.norm, list) and isinstance(a.rounds, int) and isinstance(a.rule, str)
    assert pickle.loads(pickle.dumps(a)) == a and eval(repr(a), {"trickle": trickle, "nan": math.nan, "inf": math.inf}) == a
    expect_raises(AttributeError, lambda: setattr(a, "rounds", 3), "read-only")
    expect_raises(AttributeError, lambda: a.nonexistent, "fields")
    expect_raises(KeyError, lambda: a["nonexistent"])
    expect_raises(TypeError, lambda: trickle.Aggregation({k: v for k, v in dd.items() if k != "rule"}), "missing field rule")
    assert str(a) == "mean, 1 round", str(a)
    # Robust rules run on one worker too (the median of one contribution is that contribution).
    for rule in ("median", "clip:100"):
        m2 = make_model()
        expected = flat(m2.parameters()) + 0.5
        r = trickle.DiLoCo(m2, interval=1, outer="average", aggregate=rule)
        with torch.no_grad():
            for p in m2.parameters():
                p.add_(0.5)
        r.step()
        assert r.options["aggregate"] == rule and r.aggregation.rule == rule, (rule, repr(r.aggregation))
        assert r.aggregation.rounds == 1 and len(r.aggregation.distance) == 1, (rule, repr(r.aggregation))
        assert torch.allclose(flat(m2.parameters()), expected, atol=1e-6), rule
    b = trickle.SPARTADiLoCo(make_model(), fraction=0.5, interval=2, aggregate="median")
    b.step()
    b.step()
    assert b.aggregation.rule == "median" and b.aggregation.rounds == 1, repr(b.aggregation)
    # SPARTA has no outer step to aggregate.
    assert not hasattr(trickle.SPARTA(make_model()), "aggregation")


def test_aggregate_bad_values():
    m = make_model()
    expect_raises(TypeError, lambda: trickle.DiLoCo(m, aggregate=3), "aggregate must be a str")
    expect_raises(TypeError, lambda: trickle.SPARTADiLoCo(m, aggregate=None), "aggregate must be a str")
    # The library's parser gives the message.
    expect_raises(ValueError, lambda: trickle.DiLoCo(m, aggregate="trimmed:x"), "trimmed:x", "integer K >= 1",
                  "expected mean, trimmed:K, median or clip:TAU")
    expect_raises(ValueError, lambda: trickle.DiLoCo(m, aggregate="mode"), "'mode' is not a rule")
    expect_raises(ValueError, lambda: trickle.SPARTADiLoCo(m, aggregate="clip:-1"), "radius TAU > 0")
    # What the rule cannot combine with: the constructor's check, with the library's message.
    expect_raises(ValueError, lambda: trickle.DiLoCo(m, aggregate="trimmed:1"), "trim count must be below half")
    expect_raises(ValueError, lambda: trickle.DiLoCo(m, aggregate="median", outer_codec="int8"),
                  "aggregate median", "choose the fp32 codec")
    expect_raises(ValueError, lambda: trickle.DiLoCo(m, aggregate="median", topology="ring"), "all-reduce topology")
    expect_raises(ValueError, lambda: trickle.DiLoCo(m, aggregate="clip:2", fragments=2), "streaming")
    expect_raises(ValueError, lambda: trickle.DiLoCo(m, aggregate="median", outer_sparsifier="random_k"),
                  "choose the fp32 codec")


def test_non_finite_worker_is_excluded():
    # One worker whose outer gradient holds a NaN: excluded, no contribution left, the round
    # skipped (the snapshot and the outer optimizer's state unchanged; the parameters are
    # left as they are, as in a round below quorum).
    m = make_model()
    start = flat(m.parameters())
    d = trickle.DiLoCo(m, interval=1, outer="sgd", outer_lr=1.0)
    with torch.no_grad():
        m[0].weight[0, 0] = float("nan")
    d.step()
    a = d.aggregation
    assert a.excluded == [0] and a.excluded_total == 1 and a.skipped == 1 and a.weights == [0.0], repr(a)
    assert math.isnan(a.norm[0]), repr(a)
    assert "excluded [0]" in str(a) and "1 skipped" in str(a), str(a)
    # The next round is an ordinary one, from the same snapshot.
    with torch.no_grad():
        i = 0
        for p in m.parameters():
            p.copy_(start[i:i + p.numel()].view_as(p) + 0.5)
            i += p.numel()
    d.step()
    a = d.aggregation
    assert a.excluded == [] and a.excluded_total == 1 and a.skipped == 1 and a.weights == [1.0], repr(a)
    assert torch.allclose(flat(m.parameters()), start + 0.5, atol=1e-6)
    # Each parameter group combines on its own: a NaN in the bfloat16 group excludes it there only.
    params = [("f", torch.randn(8)), ("b", torch.randn(6).to(torch.bfloat16))]
    g = trickle.DiLoCo(params, interval=1)
    with torch.no_grad():
        params[1][1][2] = float("inf")
    g.step()
    ga = g.group_aggregation
    assert len(ga) == 2 and ga[0].excluded == [] and ga[1].excluded == [0], ga
    assert g.aggregation == ga[0]


TESTS_BEFORE_INIT = [test_not_initialized_is_a_clear_error]
def test_build_info():
    info = trickle.build_info()
    assert torch.__version__.startswith(info["torch"]), (info, torch.__version__)
    assert info["gloo"] is True and info["nccl"] is False, info
    assert info["cplusplus"] >= 202002, info
    assert info["trickle"].count(".") == 1, info
    assert tuple(info["codecs"]) == tuple(trickle.CODECS), info
    # A CUDA build needs a torch with CUDA; the toolkit's version and the archs come with it.
    if info["cuda"]:
        assert torch.version.cuda is not None, info
        assert info["cuda_version"].split(".")[0] == torch.version.cuda.split(".")[0], (info, torch.version.cuda)
        assert info["cuda_archs"], info
    else:
        assert info["cuda_version"] is None and info["cuda_archs"] is None, info
    built_with_cuda = info["cuda"]
    info["cuda"] = not built_with_cuda  # a copy: the module's own is unchanged
    assert trickle.build_info()["cuda"] is built_with_cuda
    if built_with_cuda:
        return
    # This build has no CUDA: a CUDA tensor is refused, saying how to rebuild. Without a GPU
    # the check is reached by a tensor whose device reads cuda:0 (the test the layer makes).
    import trickle._algorithms as algos

    class CudaView(torch.Tensor):
        @property
        def device(self):
            return torch.device("cuda", 0)

    v = torch.zeros(3).as_subclass(CudaView)
    expect_raises(ValueError, lambda: algos._named_tensors("SPARTA", [("w", v)]), "no CUDA support",
                  "build_info()['cuda'] is False", "--force-reinstall")


def test_objects_left_alive_at_exit():
    # A program that keeps its trickle objects and never destroys its group: the atexit
    # handler releases their C++ sides while the interpreter is whole, and the process
    # exits cleanly. (A child process: this one's objects must stay.)
    import subprocess
    import tempfile

    code = (
        "import os, sys, torch, torch.distributed as dist, trickle, trickle._algorithms as a\n"
        "dist.init_process_group('gloo', init_method='file://' + sys.argv[1], rank=0, world_size=1)\n"
        "m = torch.nn.Linear(8, 8)\n"
        "s = trickle.SPARTA(m, fraction=0.5)\n"
        "d = trickle.DiLoCo(m, interval=2)\n"
        "for _ in range(3): s.step(); d.step()\n"
        "assert len(a._LIVE) == 2, len(a._LIVE)\n"
        "a._release_at_exit()\n"
        "assert len(a._LIVE) == 0 and not hasattr(s, '_impl')\n"
        "s2 = trickle.SPARTA(m, fraction=0.5)\n"
        "s2.step()\n"
        "print('left alive')\n"
    )
    with tempfile.TemporaryDirectory() as d:
        r = subprocess.run([sys.executable, "-c", code, os.path.join(d, "store")], capture_output=True, text=True,
                           timeout=120)
    assert r.returncode == 0 and "left alive" in r.stdout, (r.returncode, r.stdout, r.stderr[-2000:])
    assert "terminate called" not in r.stderr, r.stderr[-2000:]


TESTS = [
    test_names_and_signatures,
    test_sparta_steps_and_stats,
    test_stats_object,
    test_hooks,
    test_diloco_and_sparta_diloco,
    test_model_forms,
    test_bad_arguments,
    test_moved_parameters_are_refused,
    test_autograd_rule,
    test_state_dict_file_round_trip,
    test_sub_group_of_one,
    test_outer_lr_schedules,
    test_sparsifiers,
    test_native_codec,
    test_streaming_diloco,
    test_group_stats_and_set_weight,
    test_aggregate_option_and_record,
    test_aggregate_bad_values,
    test_non_finite_worker_is_excluded,
    test_build_info,
    test_objects_left_alive_at_exit,
    test_state_in_pinned_host_is_for_cuda_parameters,
]


def main() -> int:
    torch.set_num_threads(1)
    harness.log(f"trickle {trickle.__version__} from {os.path.dirname(trickle.__file__)}, torch {torch.__version__}")
    status = harness.run(TESTS_BEFORE_INIT, "test_local (before init)")
    with tempfile.TemporaryDirectory() as d:
        dist.init_process_group("gloo", init_method="file://" + os.path.join(d, "store"), rank=0, world_size=1)
        status |= harness.run(TESTS, "test_local")
        dist.destroy_process_group()
    return status


if __name__ == "__main__":
    sys.exit(main())
