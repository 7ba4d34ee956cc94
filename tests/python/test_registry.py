"""Every registered policy name reachable from Python (world size 1, gloo over a FileStore).

    build/pyenv/bin/python tests/python/test_registry.py

The package's lists of names (trickle.SAMPLERS, SCHEDULES, TOPOLOGIES, CODECS,
OUTER_OPTIMIZERS; SPARSIFIERS, the package's list of the C++ sparsifiers) are the C++ registries (include/trickle/*/registry.hpp) as the extension
hands them over; each name is accepted by the algorithm that takes it, builds and steps,
and reaches a distinct C++ policy: a state saved under one name loads under the same name
and is refused (as another configuration) under every other. Exits non-zero when a test
fails. TRICKLE_TEST_ONLY=substring runs only the tests whose name contains it.
"""

from __future__ import annotations

import os
import sys
import tempfile

import torch
import torch.distributed as dist
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import expect_raises  # noqa: E402

import trickle  # noqa: E402
from trickle import _C  # noqa: E402


def make_model(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 3))


# Each family: the keyword its names are passed as, the algorithm that takes it, and the
# package's list of its names.
FAMILIES = {
    "sampler": ("sampler", trickle.SPARTA, trickle.SAMPLERS),
    "schedule": ("schedule", trickle.SPARTA, trickle.SCHEDULES),
    "topology": ("topology", trickle.SPARTA, trickle.TOPOLOGIES),
    "codec": ("codec", trickle.SPARTA, trickle.CODECS),
    "outer": ("outer", trickle.DiLoCo, trickle.OUTER_OPTIMIZERS),
    "sparsifier": ("outer_sparsifier", trickle.DiLoCo, trickle.SPARSIFIERS),
}


def extra_options(family: str, name: str) -> dict:
    """What a policy needs besides its name to be built on one worker."""
    keys = _C.policy_options[family][name]
    out = {}
    if "points" in keys:
        out["points"] = [(2, 0.25), (4, 0.5)]
    if "island_size" in keys:
        out["island_size"] = 1  # one worker: an island of one
    return out


def build(family: str, name: str, **more):
    """The algorithm of `family` with the policy `name`: SPARTA averaging half the
    parameters at every step, or DiLoCo with an outer step every 2 steps."""
    key, cls, _ = FAMILIES[family]
    options = {key: name, **extra_options(family, name), **more}
    if cls is trickle.SPARTA:
        options.setdefault("fraction", 0.5)
    else:
        options.setdefault("interval", 2)
    return cls(make_model(), **options)


def test_names_are_the_registries():
    for family, (_, _, names) in FAMILIES.items():
        assert isinstance(names, tuple) and names, family
        assert names == tuple(_C.registry[family]), (family, names, _C.registry[family])
        assert tuple(_C.policy_options[family]) == names, family
        assert len(set(names)) == len(names), names
        assert all(isinstance(n, str) and n and "-" not in n for n in names), names
    assert set(_C.registry) == set(FAMILIES)
    assert "CODECS" in trickle.__all__
    # The built-in policies are there, spelled as the C++ policies spell them.
    for family, name in [("codec", "fp8_e4m3"), ("topology", "all_reduce"), ("schedule", "piecewise"),
                         ("sampler", "layerwise"), ("outer", "nesterov"), ("sparsifier", "chunk_topk")]:
        assert name in _C.registry[family], (family, name)


def test_every_name_builds_and_steps():
    for family, (key, _, names) in FAMILIES.items():
        for name in names:
            a = build(family, name)
            assert a.options[key] == name, (family, name, a.options)
            for _ in range(4):
                a.step()
            assert a.stats.steps == 4, (family, name, a.stats)


def test_every_name_is_a_distinct_policy_in_cpp():
    # The configuration hash in a state covers the policy: the same name loads, any other
    # is refused, so no two names reach the same C++ policy and none is dropped on the way.
    for family, (_, _, names) in FAMILIES.items():
        states = {}
        for name in names:
            a = build(family, name, broadcast_initial=False)
            a.step()
            states[name] = a.state_dict()
        for name in names:
            b = build(family, name, broadcast_initial=False)
            b.load_state_dict(states[name])
            for other in names:
                if other != name:
                    expect_raises(ValueError, lambda: b.load_state_dict(states[other]), "different configuration")


def test_unknown_names_list_the_registered_ones():
    m = make_model()
    for family, (key, cls, names) in FAMILIES.items():
        e = expect_raises(ValueError, lambda: cls(m, **{key: "no_such_policy"}), f"unknown {key} 'no_such_policy'")
        assert ", ".join(names) in str(e), (family, str(e))
    # One spelling: trickle-sim's deprecated '-' aliases are not names here.
    expect_raises(ValueError, lambda: trickle.SPARTA(m, codec="fp8-e4m3"), "unknown codec", "fp8_e4m3")
    expect_raises(ValueError, lambda: trickle.SPARTA(m, topology="all-reduce"), "unknown topology", "all_reduce")


def test_keywords_apply_to_the_policies_that_take_them():
    m = make_model()
    # momentum applies to the optimizers with a momentum field, named from the registry.
    taking = [n for n in trickle.OUTER_OPTIMIZERS if "momentum" in _C.policy_options["outer"][n]]
    assert "momentum" in taking and "nesterov" in taking and "adam" not in taking, taking
    for name in trickle.OUTER_OPTIMIZERS:
        if name not in taking:
            expect_raises(ValueError, lambda: trickle.DiLoCo(m, outer=name, momentum=0.5), "momentum applies to",
                          *[repr(t) for t in taking])
        if "outer_lr" not in _C.policy_options["outer"][name]:
            expect_raises(ValueError, lambda: trickle.DiLoCo(m, outer=name, outer_lr=0.5), "no learning rate")
    for name in trickle.SCHEDULES:
        if "warmup_steps" not in _C.policy_options["schedule"][name]:
            expect_raises(ValueError, lambda: trickle.SPARTA(m, schedule=name, warmup_steps=3,
                                                             **extra_options("schedule", name)), "warmup_steps")
        else:
            trickle.SPARTA(m, schedule=name, warmup_steps=3, **extra_options("schedule", name)).step()


def test_outer_lr_schedules_by_name():
    # Every registered schedule is an outer lr schedule of every optimizer with a learning
    # rate (those whose policy_options list outer_lr_schedule), each a distinct configuration;
    # an optimizer without one refuses any schedule but constant.
    m = make_model()
    with_lr = [n for n in trickle.OUTER_OPTIMIZERS if "outer_lr_schedule" in _C.policy_options["outer"][n]]
    assert with_lr == [n for n in trickle.OUTER_OPTIMIZERS if "outer_lr" in _C.policy_options["outer"][n]], with_lr
    assert "average" not in with_lr and "nesterov" in with_lr, with_lr

    def lr_options(name):
        return {"outer_lr_" + k: v for k, v in extra_options("schedule", name).items()}

    for outer in with_lr:
        states = {}
        for name in trickle.SCHEDULES:
            a = trickle.DiLoCo(m, interval=1, outer=outer, outer_lr_schedule=name, broadcast_initial=False,
                               **lr_options(name))
            for _ in range(2):
                a.step()
            assert a.stats.exchanges == 2 and a.options["outer_lr_schedule"] == name, (outer, name, a.stats)
            states[name] = a.state_dict()
        b = trickle.DiLoCo(m, interval=1, outer=outer, outer_lr_schedule="cosine", broadcast_initial=False)
        for name in trickle.SCHEDULES:
            if name != "cosine":
                expect_raises(ValueError, lambda: b.load_state_dict(states[name]), "different configuration")
        b.load_state_dict(states["cosine"])
    for outer in trickle.OUTER_OPTIMIZERS:
        if outer in with_lr:
            continue
        trickle.DiLoCo(m, outer=outer, outer_lr_schedule="constant").step()
        for name in trickle.SCHEDULES:
            if name != "constant":
                expect_raises(ValueError, lambda: trickle.DiLoCo(m, outer=outer, outer_lr_schedule=name,
                                                                 **lr_options(name)), "no learning rate to schedule")


def test_native_is_a_codec_name_everywhere():
    m = make_model()
    assert "native" not in trickle.CODECS  # not a registered codec: resolved per parameter group
    for a in (trickle.SPARTA(m, codec="native"), trickle.DiLoCo(m, interval=1, outer_codec="native"),
              trickle.SPARTADiLoCo(m, interval=2, codec="native", outer_codec="native")):
        for _ in range(2):
            a.step()
        assert a.stats.steps == 2
    e = expect_raises(ValueError, lambda: trickle.SPARTA(m, codec="fp64"), "unknown codec 'fp64'")
    assert ", ".join(trickle.CODECS + ("native",)) in str(e), str(e)
    expect_raises(ValueError, lambda: trickle.DiLoCo(m, outer_codec="fp64"), "unknown outer_codec", "native")


def test_option_defaults_are_the_librarys():
    """The options' plain fields: the keywords of the same names take the library's defaults
    (trickle::for_each_option, the one list the binding also reads the options by)."""
    from trickle import _algorithms as A

    lib = trickle._C.option_defaults
    assert set(lib) == {"sparta", "diloco", "sparsifier"}, sorted(lib)
    for kind, part in (("SPARTA", "sparta"), ("DiLoCo", "diloco"), ("SPARTADiLoCo", "diloco")):
        for name, value in lib[part].items():
            assert name in A._DEFAULTS[kind], (kind, name)
            if name == "fragment_tensors":
                assert value == [] and A._DEFAULTS[kind][name] is None  # None: balanced by size
            elif kind == "SPARTADiLoCo" and name == "interval":
                assert A._DEFAULTS[kind][name] == lib["diloco"]["interval"]
            else:
                assert A._DEFAULTS[kind][name] == value, (kind, name, A._DEFAULTS[kind][name], value)
    assert lib["sparta"]["fraction"] == 0.005 and lib["diloco"]["interval"] == 500, lib
    for name, value in lib["sparsifier"].items():
        assert A._DEFAULTS["DiLoCo"][name] == value, (name, value)
    # The report bytes of the cost model (trickle/algorithm/cost.hpp).
    assert [trickle._C.outer_report_bytes(n) for n in (1, 2, 4)] == [0, 16, 48]


TESTS = [
    test_names_are_the_registries,
    test_every_name_builds_and_steps,
    test_every_name_is_a_distinct_policy_in_cpp,
    test_unknown_names_list_the_registered_ones,
    test_keywords_apply_to_the_policies_that_take_them,
    test_outer_lr_schedules_by_name,
    test_native_is_a_codec_name_everywhere,
    test_option_defaults_are_the_librarys,
]


def main() -> int:
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as d:
        dist.init_process_group("gloo", init_method="file://" + os.path.join(d, "store"), rank=0, world_size=1)
        status = harness.run(TESTS, "test_registry")
        dist.destroy_process_group()
    return status


if __name__ == "__main__":
    sys.exit(main())
