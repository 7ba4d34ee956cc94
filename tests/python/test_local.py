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
    for name in ("SPARTA", "DiLoCo", "SPARTADiLoCo", "Stats", "MismatchError", "CommError", "STATE_FORMAT"):
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
    assert set(d) == set(trickle.Stats.FIELDS), d
    assert st["values"] == st.values == d["values"] and isinstance(st.values, int)
    assert st.as_dict() == d
    assert "bytes_sent" in st and len(st) == len(trickle.Stats.FIELDS)
    assert pickle.loads(pickle.dumps(st)) == st
    expect_raises(AttributeError, lambda: st.nonexistent, "fields")
    try:
        st.steps = 3
    except AttributeError:
        pass
    else:
        raise AssertionError("Stats is writable")
    assert "trickle.Stats(" in repr(st)


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
    # A device other than the CPU (meta here; CUDA alike) is refused with the reason.
    expect_raises(ValueError, lambda: trickle.SPARTA([torch.empty(3, device="meta")]), "CPU tensors only")
    if torch.cuda.is_available():
        expect_raises(ValueError, lambda: trickle.SPARTA([torch.zeros(3, device="cuda")]), "CPU tensors only")


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


TESTS_BEFORE_INIT = [test_not_initialized_is_a_clear_error]
TESTS = [
    test_names_and_signatures,
    test_sparta_steps_and_stats,
    test_stats_object,
    test_diloco_and_sparta_diloco,
    test_model_forms,
    test_bad_arguments,
    test_moved_parameters_are_refused,
    test_autograd_rule,
    test_state_dict_file_round_trip,
    test_sub_group_of_one,
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
