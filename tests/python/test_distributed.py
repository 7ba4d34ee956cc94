"""trickle's Python bindings on several processes (gloo, CPU).

    torchrun --standalone --nproc_per_node 4 tests/python/test_distributed.py

with a torchrun whose Python has trickle installed, or without torchrun:

    build/pyenv/bin/python tests/python/launch.py --nproc 4 tests/python/test_distributed.py

(Debian 12's torch 1.13 under Python 3.11 needs `torchrun ... --redirects 2 --tee 2`: see
launch.py.) Exits non-zero when a test fails on any rank.
TRICKLE_TEST_ONLY=substring runs only the tests whose name contains it.
"""

from __future__ import annotations

import datetime
import io
import math
import os
import sys
import threading
import time

import torch
import torch.distributed as dist
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import bits, expect_raises, flat, gather, rank, world  # noqa: E402

import trickle  # noqa: E402

# ---------------------------------------------------------------------------------------
# Helpers


def make_model(seed: int = 0, extra: bool = False) -> nn.Module:
    torch.manual_seed(seed)
    layers = [nn.Linear(12, 20), nn.Tanh(), nn.Linear(20, 6)]
    if extra:
        layers += [nn.Tanh(), nn.Linear(6, 6)]
    return nn.Sequential(*layers)


def perturb(params, step: int, scale: float = 0.01) -> None:
    """A rank-specific change of every position, deterministic in (rank, step)."""
    g = torch.Generator().manual_seed(7919 * (rank() + 1) + step)
    with torch.no_grad():
        for p in params:
            p.add_((torch.randn(p.shape, generator=g) * scale).to(p.dtype))


def identical_mask(vec: torch.Tensor) -> torch.Tensor:
    """Positions where every rank holds the same bits."""
    all_bits = [bits(v) for v in gather(vec)]
    same = torch.ones_like(all_bits[0], dtype=torch.bool)
    for b in all_bits[1:]:
        same &= b == all_bits[0]
    return same


def mean_of_replicas(vec: torch.Tensor) -> torch.Tensor:
    return torch.stack(gather(vec)).double().mean(0).float()


def all_reduce_bytes(n: int, ranks: int, r: int, elem: int = 4) -> int:
    """include/trickle/comm/communicator.hpp detail::all_reduce_bytes."""
    if ranks <= 1:
        return 0
    c = n // ranks + (1 if r < n % ranks else 0)
    return ((n - c) + (ranks - 1) * c) * elem


def exchange_bytes(n: int, ranks: int, r: int) -> int:
    """What comm::process_group's all_reduce_sum of n floats sends from rank r
    (include/trickle/torch/process_group.hpp): one all-gather, (N-1) n values, while that
    sends at most 4 KiB more than the ring all-reduce (always for two ranks) and the buffer
    is at most 1 MiB; else the
    ring's reduce-scatter and all-gather (all_reduce_bytes)."""
    if ranks <= 1 or n == 0:
        return 0
    if 4 * n <= (1 << 20) and (ranks <= 2 or (ranks - 1) * (ranks - 2) * 4 * n <= ranks * 4 * 1024):
        return (ranks - 1) * n * 4
    return all_reduce_bytes(n, ranks, r)


def same_on_all_ranks(value) -> bool:
    t = torch.tensor([float(value)], dtype=torch.float64)
    lo, hi = t.clone(), t.clone()
    dist.all_reduce(lo, op=dist.ReduceOp.MIN)
    dist.all_reduce(hi, op=dist.ReduceOp.MAX)
    return bool(lo.item() == hi.item())


# ---------------------------------------------------------------------------------------
# Tests


def test_broadcast_initial():
    m = make_model(seed=100 + rank())  # different replicas
    n = sum(p.numel() for p in m.parameters())
    before = flat(m.parameters())
    s = trickle.SPARTA(m, fraction=0.01, seed=3)
    v = flat(m.parameters())
    same = identical_mask(v)
    r0 = gather(before)[0]
    st = s.stats
    assert bool(same.all()), f"{int((~same).sum())} positions differ after the initial broadcast"
    assert torch.equal(bits(v), bits(r0)), "the replicas do not hold rank 0's parameters"
    N = world()
    if rank() == 0:
        assert st.initial_bytes_sent == (N - 1) * n * 4, st
        assert st.initial_bytes_received == 0, st
    else:
        assert st.initial_bytes_sent == 0 and st.initial_bytes_received == n * 4, st
    assert st.bytes_sent == 0 and st.steps == 0, st


def test_sparta_full_fraction_makes_replicas_identical():
    m = make_model(seed=rank())
    n = sum(p.numel() for p in m.parameters())
    s = trickle.SPARTA(m, fraction=1.0, seed=5)
    for step in range(3):
        perturb(m.parameters(), step)
        pre = flat(m.parameters())
        differ_before = int((~identical_mask(pre)).sum())
        mean = mean_of_replicas(pre)
        s.step()
        post = flat(m.parameters())
        same = identical_mask(post)
        assert differ_before == n, f"the perturbation left {n - differ_before} positions equal"
        assert bool(same.all()), f"step {step}: {int((~same).sum())} of {n} positions differ after fraction=1.0"
        assert torch.allclose(post, mean, rtol=0, atol=1e-6), "the averaged values are not the replicas' mean"
        assert s.stats.last_values == n, s.stats


def _partial(sampler: str, steps: int):
    m = make_model(seed=rank())
    n = sum(p.numel() for p in m.parameters())
    p = 0.1
    s = trickle.SPARTA(m, fraction=p, sampler=sampler, seed=11)
    chosen = []
    for step in range(steps):
        perturb(m.parameters(), step)
        pre = flat(m.parameters())
        mean = mean_of_replicas(pre)
        s.step()
        post = flat(m.parameters())
        same = identical_mask(post)
        st = s.stats
        k = int(same.sum())
        assert k == st.last_values, f"{sampler} step {step}: {k} positions identical, trickle averaged {st.last_values}"
        if sampler == "uniform":  # round(p n) positions
            expected = int(p * n + 0.5)
        else:  # ceil(p n) positions, the rest of the cycle at its end
            per = math.ceil(p * n)
            expected = min(per, n - (step * per) % n)
        assert k == expected, f"{sampler} step {step}: {k} positions averaged, expected {expected}"
        assert torch.allclose(post[same], mean[same], rtol=0, atol=1e-6), "averaged positions do not hold the mean"
        changed = bits(post) != bits(pre)
        assert not bool((changed & ~same).any()), "a position changed without being averaged"
        assert st.exchanges == step + 1 and st.steps == step + 1 and st.values == sum(
            int(c.sum()) for c in chosen
        ) + k, st
        chosen.append(same)
    return n, chosen


def test_sparta_partial_fraction_uniform():
    _partial("uniform", 3)


def test_sparta_partial_fraction_permutation_covers_everything():
    n, chosen = _partial("permutation", 10)  # ceil(1 / 0.1) exchanges: one cycle
    count = torch.zeros(n, dtype=torch.int64)
    for c in chosen:
        count += c.long()
    assert int(count.max()) == 1, "a position was averaged twice within one permutation cycle"
    assert int(count.min()) == 1, f"{int((count == 0).sum())} positions never averaged in one cycle"


def test_bytes_match_the_cost_model():
    N, r = world(), rank()
    n = 4000  # N divides n and the selected count
    t = torch.randn(n, generator=torch.Generator().manual_seed(r))
    s = trickle.SPARTA([t], fraction=0.01, seed=1)
    steps = 5
    for _ in range(steps):
        s.step()
    st = s.stats
    k = 40
    assert st.last_values == k, st
    per = exchange_bytes(k, N, r)
    assert per == (N - 1) * k * 4  # 40 values: one all-gather
    assert st.last_bytes_sent == per and st.last_bytes_received == per, st
    assert st.bytes_sent == steps * per and st.bytes_received == steps * per, st
    dense = all_reduce_bytes(n, N, r)
    assert dense == 2 * (N - 1) * n * 4 // N
    assert st.dense_bytes == steps * dense, st
    assert abs(st.reduction - dense / per) < 1e-9, st
    assert st.initial_bytes_sent == (N - 1) * n * 4 if r == 0 else st.initial_bytes_received == n * 4, st
    assert same_on_all_ranks(st.bytes_sent), "ranks counted different bytes"
    # Plain fp32: every byte sent is a code.
    assert st.code_bytes_sent == st.bytes_sent and st.scale_bytes_sent == st.padding_bytes_sent == 0, st

    # A count N does not divide: trickle's chunking (rank r's chunk is n/N, +1 for r < n % N).
    u = torch.randn(1003, generator=torch.Generator().manual_seed(r))
    s2 = trickle.SPARTA([u], fraction=1.0, seed=1)
    s2.step()
    assert s2.stats.bytes_sent == exchange_bytes(1003, N, r), s2.stats
    # A large exchange: the reduce-scatter and all-gather, the ring's bytes (rank r's chunk
    # n/N, +1 for r < n % N).
    big = torch.randn(40003, generator=torch.Generator().manual_seed(r))
    s3 = trickle.SPARTA([big], fraction=1.0, seed=1)
    s3.step()
    assert s3.stats.bytes_sent == exchange_bytes(40003, N, r), s3.stats
    if N > 2:
        assert s3.stats.bytes_sent == all_reduce_bytes(40003, N, r), s3.stats
    # One collective per small exchange (the argument check rides in its payload), two for a large one.
    before = s.collectives
    s.step()
    assert s.collectives - before == 1, s.collectives - before
    before = s3.collectives
    s3.step()
    assert s3.collectives - before == (1 if N <= 2 else 2), s3.collectives - before

    # DiLoCo: the outer step all-reduces the deltas (and the weights).
    d = trickle.DiLoCo([t.clone()], interval=2)
    d.step()
    assert d.stats.bytes_sent == 0 and d.stats.exchanges == 0, d.stats
    d.step()
    dst = d.stats
    assert dst.exchanges == 1 and dst.last_values >= n, dst
    # (and the reports every outer round begins with: an all-gather of 16 bytes per worker)
    assert dst.bytes_sent == exchange_bytes(dst.last_values, N, r) + (N - 1) * 16, dst
    assert dst.dense_bytes == 2 * dense, dst


def _outer_round(make, interval: int, rounds: int = 2):
    m = make_model(seed=rank())
    algo = make(m)
    step = 0
    for _ in range(rounds):
        for i in range(interval):
            perturb(m.parameters(), step)
            pre = flat(m.parameters())
            algo.step()
            step += 1
            post = flat(m.parameters())
            same = identical_mask(post)
            if i == interval - 1:
                assert bool(same.all()), f"{int((~same).sum())} positions differ after the outer step"
            elif isinstance(algo, trickle.DiLoCo):
                assert torch.equal(bits(pre), bits(post)), "DiLoCo changed parameters between outer steps"
                assert not bool(same.all()), "replicas identical between outer steps (perturbation lost?)"
    return m, algo


def test_diloco_outer_step_makes_replicas_identical():
    for outer in ("nesterov", "momentum", "sgd", "adam", "average"):
        _, d = _outer_round(lambda m: trickle.DiLoCo(m, interval=3, outer=outer, seed=2), interval=3)
        assert d.stats.exchanges == 2 and d.stats.steps == 6, (outer, d.stats)


def _sparta_bf16_against_fp32(steps: int, **kw):
    """SPARTA in fp32 and in bf16 side by side on alike replicas for `steps` steps; the bf16
    run's stats and its bytes over the fp32 run's."""
    m32, m16 = make_model(seed=rank()), make_model(seed=rank())
    s32 = trickle.SPARTA(m32, fraction=0.2, seed=4, **kw)
    s16 = trickle.SPARTA(m16, fraction=0.2, seed=4, codec="bf16", **kw)
    for i in range(steps):
        perturb(m32.parameters(), i)
        perturb(m16.parameters(), i)
        s32.step()
        s16.step()
    return s16.stats, s16.stats.bytes_sent / s32.stats.bytes_sent


def test_codecs_compress_and_keep_replicas_identical():
    # DiLoCo's outer gradient in int8 (with error feedback and stochastic rounding), and
    # in 2-bit: replicas bit-identical after every outer step, far fewer bytes.
    _, plain = _outer_round(lambda m: trickle.DiLoCo(m, interval=3, seed=2), interval=3)
    _, q8 = _outer_round(lambda m: trickle.DiLoCo(m, interval=3, seed=2, outer_codec="int8", error_feedback=0.5,
                                                  stochastic_rounding=True), interval=3)
    _, q2 = _outer_round(lambda m: trickle.DiLoCo(m, interval=3, seed=2, outer_codec="sign2", codec_block=32),
                         interval=3)
    # (A small model: the slots' padding to whole 64-value blocks and the exact weight sums
    # weigh more than they would on a large one.)
    assert q8.stats.bytes_sent < 0.45 * plain.stats.bytes_sent, (q8.stats.bytes_sent, plain.stats.bytes_sent)
    assert q2.stats.bytes_sent < 0.8 * q8.stats.bytes_sent, (q2.stats.bytes_sent, q8.stats.bytes_sent)
    # The bytes by part: int8 sends a 4-byte scale per 64 codes (and the weights' sum).
    st8 = q8.stats
    parts = st8.code_bytes_sent + st8.scale_bytes_sent + st8.index_bytes_sent + st8.padding_bytes_sent
    assert parts == st8.bytes_sent, st8
    assert 0 < st8.scale_bytes_sent < st8.code_bytes_sent and st8.index_bytes_sent == 0, st8
    # SPARTA's values in bf16: half the bytes of an fp32 ring all-reduce of the same
    # selections. (fp32 itself goes as one all-gather at this size, (N-1) n values, N/2 times
    # the ring's: bf16's encoded all-reduce is a reduce-scatter and an all-gather.)
    st16, ratio = _sparta_bf16_against_fp32(steps=3)
    ring32 = 3 * all_reduce_bytes(st16.last_values, world(), rank())
    assert 0.45 < st16.bytes_sent / ring32 < 0.55, (st16.bytes_sent, ring32)
    assert abs(ratio - (st16.bytes_sent / (3 * exchange_bytes(st16.last_values, world(), rank())))) < 1e-12, ratio
    # Bad codec settings raise on every rank, with trickle's messages.
    expect_raises(ValueError, lambda: trickle.SPARTA(make_model(), codec="int3"), "unknown codec", "int8")
    expect_raises(ValueError, lambda: trickle.DiLoCo(make_model(), outer_codec="int8", codec_block=0),
                  "block_size must be >= 1")
    expect_raises(ValueError, lambda: trickle.DiLoCo(make_model(), error_feedback=0.5), "needs a lossy codec")
    # A codec through a decentralized topology: its bytes travel in the topology's rounds
    # (codec::encoded_link), half of fp32's for bf16 on the ring.
    st, ratio = _sparta_bf16_against_fp32(steps=2, topology="ring")
    assert 0.45 < ratio < 0.55, ratio
    assert st.code_bytes_sent + st.padding_bytes_sent == st.bytes_sent and st.scale_bytes_sent == 0, st


def test_diloco_average_is_the_mean():
    m = make_model(seed=rank())
    d = trickle.DiLoCo(m, interval=2, outer="average")
    perturb(m.parameters(), 0)
    d.step()
    perturb(m.parameters(), 1)
    pre = flat(m.parameters())
    mean = mean_of_replicas(pre)
    d.step()
    post = flat(m.parameters())
    assert torch.allclose(post, mean, rtol=0, atol=1e-6), float((post - mean).abs().max())


def test_sparta_diloco_outer_step_makes_replicas_identical():
    for sampler in ("uniform", "block"):
        _, b = _outer_round(
            lambda m: trickle.SPARTADiLoCo(
                m, fraction=0.1, interval=4, sampler=sampler, block_size=8, outer="nesterov", seed=9
            ),
            interval=4,
        )
        sp, ou = b.sparse_stats, b.outer_stats
        assert ou.exchanges == 2, ou
        assert sp.exchanges == 6, sp  # SPARTA skips the steps with an outer step
        assert b.stats.bytes_sent == sp.bytes_sent + ou.bytes_sent, (b.stats, sp, ou)


def _roundtrip(kind: str, make, k: int = 5, m_steps: int = 7):
    model = make_model(seed=rank())
    algo = make(model, True)
    for step in range(k):
        perturb(model.parameters(), step)
        algo.step()
    buf = io.BytesIO()
    torch.save({"model": model.state_dict(), "algo": algo.state_dict()}, buf)
    for step in range(k, k + m_steps):
        perturb(model.parameters(), step)
        algo.step()
    final1 = flat(model.parameters())
    stats1 = algo.stats

    buf.seek(0)
    saved = torch.load(buf)
    assert isinstance(saved["algo"]["trickle"], bytes) and saved["algo"]["format"] == trickle.STATE_FORMAT
    model2 = make_model(seed=12345)  # anything: overwritten by the checkpoint
    model2.load_state_dict(saved["model"])
    algo2 = make(model2, False)  # no initial broadcast: the replicas are restored
    algo2.load_state_dict(saved["algo"])
    assert algo2.stats.steps == k, algo2.stats
    for step in range(k, k + m_steps):
        perturb(model2.parameters(), step)
        algo2.step()
    final2 = flat(model2.parameters())
    stats2 = algo2.stats
    assert torch.equal(bits(final1), bits(final2)), f"{kind}: the resumed run differs from the uninterrupted one"
    for f in ("steps", "exchanges", "values", "bytes_sent", "bytes_received", "dense_bytes"):
        assert stats1[f] == stats2[f], (kind, f, stats1, stats2)
    assert stats2.initial_bytes_sent == 0 and stats2.initial_bytes_received == 0, stats2


def test_state_dict_round_trip_sparta():
    _roundtrip(
        "SPARTA",
        lambda m, b: trickle.SPARTA(m, fraction=0.07, sampler="permutation", seed=4, broadcast_initial=b),
    )


def test_state_dict_round_trip_diloco():
    _roundtrip(
        "DiLoCo",
        lambda m, b: trickle.DiLoCo(m, interval=3, outer="nesterov", seed=4, broadcast_initial=b),
    )
    _roundtrip(
        "DiLoCo",
        lambda m, b: trickle.DiLoCo(m, interval=4, outer="adam", outer_lr=0.01, seed=4, broadcast_initial=b),
    )


def test_state_dict_round_trip_sparta_diloco():
    _roundtrip(
        "SPARTADiLoCo",
        lambda m, b: trickle.SPARTADiLoCo(
            m, fraction=0.05, interval=4, sampler="layerwise", layerwise_mode="rotating", seed=4,
            broadcast_initial=b,
        ),
    )


def test_load_state_dict_errors_on_every_rank():
    m = make_model(seed=rank())
    s = trickle.SPARTA(m, fraction=0.1, sampler="permutation", seed=1)
    s.step()
    early = s.state_dict()
    s.step()
    late = s.state_dict()
    d = trickle.DiLoCo(m, interval=3)
    # A state of another algorithm, on every rank.
    expect_raises(ValueError, lambda: s.load_state_dict(d.state_dict()), "DiLoCo")
    # Rank 1 loads a state of another step than the others: every rank raises.
    expect_raises(trickle.MismatchError, lambda: s.load_state_dict(early if rank() == 1 else late), "step")
    # Rank 1 loads garbage: every rank raises; the others name rank 1.
    if rank() == 1:
        expect_raises(ValueError, lambda: s.load_state_dict({"format": "nope"}), "not a trickle state")
    else:
        expect_raises(ValueError, lambda: s.load_state_dict(late), "rank 1")
    # The object is unchanged and still works.
    assert s.stats.steps == 2, s.stats
    s.step()
    assert s.stats.steps == 3


def test_state_dict_of_another_rank():
    """A state with nothing of a worker's own loads on any rank (the counts continue from
    the saving worker's); one with a worker's own parts (an error-feedback residual) is
    refused on every rank, naming it, and changes nothing."""
    N, r = world(), rank()
    src = (r + 1) % N
    m = make_model(seed=0)
    params = list(m.parameters())
    s = trickle.SPARTA(m, fraction=0.1, seed=3)
    for t in range(3):
        perturb(params, t)
        s.step()
    states, sent = [None] * N, [None] * N
    dist.all_gather_object(states, s.state_dict())
    dist.all_gather_object(sent, s.stats.bytes_sent)
    s.step()  # this rank moves on; the load below takes it back to src's state
    s.load_state_dict(states[src])  # SPARTA's state is the same on every rank
    assert s.stats.steps == 3 and s.stats.bytes_sent == sent[src], (s.stats, sent)
    s.step()
    assert s.stats.steps == 4
    # DiLoCo through int8 with error feedback keeps a residual of its own.
    dm = make_model(seed=0)
    d = trickle.DiLoCo(dm, interval=2, outer_codec="int8", error_feedback=1.0)
    for t in range(2):
        perturb(list(dm.parameters()), t)
        d.step()
    own = [None] * N
    dist.all_gather_object(own, d.state_dict())
    before = d.state_dict()["trickle"]
    expect_raises(ValueError, lambda: d.load_state_dict(own[src]), f"saved by rank {src} of {N}", "residual")
    assert d.state_dict()["trickle"] == before, "a refused load changed the state"
    # Another world size is refused the same way where it would change the result.
    forged = dict(own[r], world_size=N + 1)
    expect_raises(ValueError, lambda: d.load_state_dict(forged), f"of {N + 1}", "residual")
    d.load_state_dict(own[r])  # its own state loads
    assert d.state_dict()["trickle"] == before


def test_mismatched_models_raise_on_every_rank():
    m = make_model(seed=0, extra=(rank() == 1))
    e = expect_raises(trickle.MismatchError, lambda: trickle.SPARTA(m, fraction=0.1), "disagree")
    assert isinstance(e, ValueError)
    expect_raises(trickle.MismatchError, lambda: trickle.DiLoCo(m, interval=5), "disagree")
    expect_raises(trickle.MismatchError, lambda: trickle.SPARTADiLoCo(m, interval=5), "disagree")
    # Different options are a mismatch too.
    m2 = make_model(seed=0)
    expect_raises(trickle.MismatchError, lambda: trickle.SPARTA(m2, seed=rank()), "seed")


def test_bad_fraction_raises_on_every_rank():
    m = make_model()
    expect_raises(ValueError, lambda: trickle.SPARTA(m, fraction=1.5), "fraction", "1.5")
    expect_raises(ValueError, lambda: trickle.SPARTADiLoCo(m, fraction=0.0), "fraction")
    # Only rank 2 passes a bad one: every rank raises, naming it.
    bad = 1.5 if rank() == 2 else 0.1
    expect_raises(ValueError, lambda: trickle.SPARTA(m, fraction=bad), "fraction", "rank 2")
    expect_raises(TypeError, lambda: trickle.SPARTA(m, fraction="0.1"), "fraction")
    expect_raises(ValueError, lambda: trickle.DiLoCo(m, interval=0), "interval")
    expect_raises(ValueError, lambda: trickle.DiLoCo(m, drop_probability=1.0), "drop")


def test_non_contiguous_parameter_raises_on_every_rank():
    m = make_model()
    if rank() == 1:
        w = m[0].weight
        w.data = w.data.t()  # a transposed view: not contiguous
    expect_raises(ValueError, lambda: trickle.SPARTA(m, fraction=0.1), "contiguous", "0.weight")
    expect_raises(ValueError, lambda: trickle.DiLoCo(m), "contiguous")


def test_unknown_names_raise_on_every_rank():
    m = make_model()
    expect_raises(ValueError, lambda: trickle.SPARTA(m, sampler="foo"), "foo", "uniform, permutation, block, layerwise")
    expect_raises(ValueError, lambda: trickle.SPARTA(m, topology="star"), "star", "all_reduce")
    expect_raises(ValueError, lambda: trickle.DiLoCo(m, outer="lion"), "lion", "nesterov")
    expect_raises(TypeError, lambda: trickle.SPARTA(m, fractoin=0.1), "fractoin", "fraction")
    # Only rank 3 has the bad name: it raises its own error, the others name rank 3.
    if rank() == 3:
        expect_raises(ValueError, lambda: trickle.SPARTA(m, sampler="foo"), "unknown sampler 'foo'")
        expect_raises(TypeError, lambda: trickle.DiLoCo(m, intervall=3), "intervall")
    else:
        expect_raises(ValueError, lambda: trickle.SPARTA(m, sampler="uniform"), "rank 3", "foo")
        expect_raises(ValueError, lambda: trickle.DiLoCo(m, interval=3), "rank 3", "intervall")


def test_other_bad_models_raise_on_every_rank():
    expect_raises(ValueError, lambda: trickle.SPARTA(nn.Linear(3, 3).double()), "dtype")
    expect_raises(ValueError, lambda: trickle.SPARTA([]), "no parameters")
    bad = [torch.zeros(4), "weights"] if rank() == 0 else [torch.zeros(4), torch.zeros(3)]
    expect_raises((TypeError, ValueError), lambda: trickle.SPARTA(bad), "item 1" if rank() == 0 else "rank 0")


def test_mixed_device_model_raises_on_every_rank():
    # This machine has no GPU, so the second device is "meta"; on rank 2 only, so the
    # other ranks must learn of it through the agreement, not by their own check.
    m = nn.Sequential(nn.Linear(3, 3), nn.Linear(3, 2))
    if rank() == 2 % world():
        m[1].to("meta")
    expect = "is on meta" if rank() == 2 % world() else f"rank {2 % world()}"
    expect_raises(ValueError, lambda: trickle.SPARTA(m), expect)


def test_group_still_usable_after_errors():
    m = make_model(seed=rank())
    s = trickle.SPARTA(m, fraction=1.0)
    perturb(m.parameters(), 0)
    s.step()
    assert bool(identical_mask(flat(m.parameters())).all())
    dist.barrier()


def test_step_between_forward_and_backward_raises():
    torch.manual_seed(0)
    m = make_model(seed=rank())
    s = trickle.SPARTA(m, fraction=0.5)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    x = torch.randn(5, 12)
    loss = m(x).pow(2).sum()
    s.step()  # wrong place: the graph saved parameters that step() just rewrote
    expect_raises(RuntimeError, loss.backward, "inplace operation")
    # The right order works.
    opt.zero_grad()
    for _ in range(2):
        loss = m(x).pow(2).sum()
        loss.backward()
        opt.step()
        opt.zero_grad()
        s.step()


def test_mixed_dtypes_make_one_group_each():
    g = torch.Generator().manual_seed(rank())
    params = [
        ("f32", torch.randn(64, generator=g)),
        ("bf16", torch.randn(40, generator=g).to(torch.bfloat16)),
        ("f16", torch.randn(24, generator=g).to(torch.float16)),
        ("f32b", torch.randn(8, generator=g)),
    ]
    s = trickle.SPARTA(params, fraction=1.0)
    groups = s.groups
    assert [gr["elements"] for gr in groups] == [72, 40, 24], groups
    assert groups[0]["names"] == ["f32", "f32b"], groups
    for name, t in params:
        t.add_(torch.randn(t.shape, generator=g).to(t.dtype))
    s.step()
    for name, t in params:
        same = identical_mask(t.float())
        assert bool(same.all()), f"{name}: {int((~same).sum())} positions differ"


def test_every_policy_runs():
    m = make_model(seed=rank())
    for sampler in trickle.SAMPLERS:
        for topology in trickle.TOPOLOGIES:
            s = trickle.SPARTA(m, fraction=0.2, sampler=sampler, topology=topology, block_size=16, seed=1)
            for _ in range(2):
                s.step()
            assert s.stats.exchanges == 2, (sampler, topology, s.stats)
    schedules = [
        dict(schedule="linear", end_fraction=0.01, schedule_steps=3),
        dict(schedule="cosine", end_fraction=0.01, schedule_steps=3, warmup_steps=2),
        dict(schedule="constant", warmup_steps=2, warmup_start_fraction=0.5),
        dict(schedule="piecewise", points=[(1, 0.5), (3, 0.02)]),
    ]
    for kw in schedules:
        s = trickle.SPARTA(m, fraction=0.1, **kw)
        for _ in range(4):
            s.step()
        assert s.stats.exchanges == 4, (kw, s.stats)
    for topology in trickle.TOPOLOGIES:
        d = trickle.DiLoCo(m, interval=2, topology=topology, island_size=2)
        for _ in range(4):
            d.step()
        assert d.stats.exchanges == 2, (topology, d.stats)
    s = trickle.SPARTA(m, fraction=0.2, interval=3)
    for _ in range(6):
        s.step()
    assert s.stats.exchanges == 2 and s.stats.steps == 6, s.stats


def test_sub_group():
    ranks = [0, 1]
    sub = dist.new_group(ranks)  # every rank must call new_group
    if rank() in ranks:
        m = make_model(seed=rank())
        s = trickle.SPARTA(m, fraction=1.0, group=sub)
        assert s.world_size == 2 and s.rank == rank() and s.group is sub
        perturb(m.parameters(), 0)
        s.step()
        mine = flat(m.parameters())
        out = [torch.empty_like(mine) for _ in ranks]
        dist.all_gather(out, mine, group=sub)
        assert torch.equal(bits(out[0]), bits(out[1]))
    dist.barrier()


def test_step_releases_the_gil():
    m = make_model(seed=rank())
    s = trickle.SPARTA(m, fraction=1.0)
    count = [0]
    stop = threading.Event()

    def spin():
        while not stop.is_set():
            count[0] += 1
            time.sleep(0.001)

    th = threading.Thread(target=spin)
    th.start()
    if rank() == 0:
        time.sleep(0.5)  # the other ranks wait in step() meanwhile
    before = count[0]
    s.step()
    during = count[0] - before
    stop.set()
    th.join()
    if rank() != 0:
        assert during >= 20, f"a Python thread made only {during} iterations while step() waited"


def test_dropping_the_object_after_destroying_its_group():
    # The object holds the last reference to the group: destroying it must not deadlock
    # (the group's worker threads may need the GIL to free Python tensors of the last
    # collective, so trickle destroys the group without holding the GIL).
    for i in range(12):
        sub = dist.new_group(list(range(world())))
        m = make_model(seed=rank())
        d = trickle.DiLoCo(m, interval=1, group=sub)
        d.step()
        t = torch.full((4096,), float(rank()))
        out = [torch.empty_like(t) for _ in range(world())]
        dist.all_gather(out, t, group=sub)
        dist.barrier(group=sub)
        dist.destroy_process_group(sub)
        del sub, out, t
        del d  # the last reference to the group
    dist.barrier()


# ---------------------------------------------------------------------------------------
# Parity with the C++ library on several workers: native, sparsifiers, outer lr schedules,
# streaming, per-group stats, set_weight, hooks.


def plain_all_reduce_bytes(count: int) -> int:
    """What this rank sends in the communicator's fp32 all-reduce of `count` values, measured
    on a SPARTA exchange of a whole `count`-value tensor (collective)."""
    s = trickle.SPARTA([torch.zeros(count)], fraction=1.0, broadcast_initial=False)
    s.step()
    assert s.stats.last_values == count
    return s.stats.bytes_sent


def test_native_codec_resolves_per_group():
    r = rank()
    g = torch.Generator().manual_seed(r)
    f32 = torch.randn(400, generator=g)
    b16 = torch.randn(400, generator=g).to(torch.bfloat16)
    fp32_bytes = plain_all_reduce_bytes(400)
    # A mixed model: the float32 group travels as fp32, the bfloat16 group as bf16 (2 bytes),
    # each exactly as a one-dtype model with that codec does.
    mixed = [("f", f32.clone()), ("b", b16.clone())]
    s = trickle.SPARTA(mixed, fraction=1.0, codec="native", broadcast_initial=False)
    s.step()
    only_f = [("f", f32.clone())]
    only_b = [("b", b16.clone())]
    sf = trickle.SPARTA(only_f, fraction=1.0, codec="fp32", broadcast_initial=False)
    sb = trickle.SPARTA(only_b, fraction=1.0, codec="bf16", broadcast_initial=False)
    sf32 = trickle.SPARTA([("b", b16.clone())], fraction=1.0, codec="fp32", broadcast_initial=False)
    for a in (sf, sb, sf32):
        a.step()
    same_b, same_f = identical_mask(mixed[1][1].float()), identical_mask(mixed[0][1])
    # DiLoCo's outer gradient likewise.
    d = trickle.DiLoCo([("b", b16.clone())], interval=1, outer_codec="native")
    db = trickle.DiLoCo([("b", b16.clone())], interval=1, outer_codec="bf16")
    d.step()
    db.step()
    gs = s.group_stats
    assert len(gs) == 2, gs
    assert gs[0].bytes_sent == fp32_bytes == sf.stats.bytes_sent, (repr(gs[0]), repr(sf.stats))
    assert gs[1].as_dict() == {**sb.stats.as_dict(), "initial_bytes_sent": 0}, (repr(gs[1]), repr(sb.stats))
    assert gs[1].bytes_sent < sf32.stats.bytes_sent, (gs[1], sf32.stats)  # bf16 on the wire, not fp32
    assert s.stats.bytes_sent == gs[0].bytes_sent + gs[1].bytes_sent, s.stats
    # The same bits as the one-dtype runs, and the replicas agree.
    assert torch.equal(bits(mixed[0][1]), bits(only_f[0][1])) and torch.equal(bits(mixed[1][1]), bits(only_b[0][1]))
    assert bool(same_b.all()) and bool(same_f.all())
    assert d.stats == db.stats, (repr(d.stats), repr(db.stats))


def test_sparsifiers_bytes_and_sum():
    N, r = world(), rank()
    n = 4000
    g = torch.Generator().manual_seed(r)
    p0 = torch.randn(n, generator=torch.Generator().manual_seed(99))  # the same start everywhere
    inc = torch.randn(n, generator=g)
    weight = plain_all_reduce_bytes(1)  # the weights' sum: one all-reduced float (a scale)
    codes400 = plain_all_reduce_bytes(400)
    # chunk_topk (64, 4): 62 chunks of 64 and one of 32, 4 kept in each: 252 values, 6-bit
    # indices (189 bytes, 3 of padding) and 252 fp32 codes per payload, all_gathered: each
    # worker sends N - 1 payloads.
    p = p0.clone()
    d = trickle.DiLoCo([("p", p)], interval=1, outer="average", outer_sparsifier="chunk_topk", sparse_chunk=64,
                       sparse_k=4)
    with torch.no_grad():
        p.add_(inc)
    deltas = gather(p - p0)
    d.step()
    top = d.stats
    top_p, top_same = p.clone(), identical_mask(p)
    # random_k (10%): 400 shared positions, their fp32 values all-reduced, no index sent.
    p = p0.clone()
    d = trickle.DiLoCo([("p", p)], interval=1, outer="average", outer_sparsifier="random_k", sparse_fraction=0.1)
    with torch.no_grad():
        p.add_(inc)
    d.step()
    rnd = d.stats
    moved = bits(p) != bits(p0)
    rnd_same, moved_same = identical_mask(p), identical_mask(moved.float())
    # Workers that disagree on the sparsifier, or one with a bad k, raise on every worker.
    m = make_model()
    expect_raises(trickle.MismatchError, lambda: trickle.DiLoCo(
        m, outer_sparsifier="chunk_topk" if r == 1 else None), "disagree")
    bad = 0 if r == 2 else 4
    expect_raises(ValueError, lambda: trickle.DiLoCo(m, outer_sparsifier="chunk_topk", sparse_k=bad),
                  "k must be >= 1", "rank 2")

    def parts(st):
        return st.code_bytes_sent + st.scale_bytes_sent + st.index_bytes_sent + st.padding_bytes_sent

    # The reports each outer round begins with (an all-gather of 16 bytes per worker) count
    # as scales, beside the weights' sum.
    reports = trickle._C.outer_report_bytes(N)
    st = top
    assert parts(st) == st.bytes_sent, ("chunk_topk: the parts do not sum to bytes_sent", repr(st))
    assert st.index_bytes_sent == (N - 1) * 189 and st.padding_bytes_sent == (N - 1) * 3, repr(st)
    assert st.code_bytes_sent == (N - 1) * 252 * 4 and st.scale_bytes_sent == weight + reports, repr(st)
    # values, the weight and the reports
    assert st.bytes_sent == (N - 1) * 1200 + weight + reports and st.last_values == n + 1, repr(st)
    # average: the parameters become the snapshot minus the mean of every worker's sparsified
    # outer gradient (snapshot - parameters), on every worker alike.
    kept = [torch.where(_topk_mask(x, 64, 4), x, torch.zeros_like(x)) for x in deltas]
    expected = p0 + torch.stack(kept).sum(0) / N
    assert torch.allclose(top_p, expected, atol=1e-5), (top_p - expected).abs().max()
    assert bool(top_same.all())
    st = rnd
    assert parts(st) == st.bytes_sent, ("random_k: the parts do not sum to bytes_sent", repr(st))
    assert st.code_bytes_sent == codes400 and st.index_bytes_sent == 0, repr(st)
    assert st.scale_bytes_sent == weight + reports and st.bytes_sent == st.code_bytes_sent + weight + reports, repr(st)
    assert int(moved.sum()) == 400 and bool(moved_same.all()), int(moved.sum())
    assert bool(rnd_same.all())


def _topk_mask(delta: torch.Tensor, chunk: int, k: int) -> torch.Tensor:
    keep = torch.zeros(delta.numel(), dtype=torch.bool)
    for c0 in range(0, delta.numel(), chunk):
        part = delta[c0:c0 + chunk].abs()
        top = sorted(range(part.numel()), key=lambda i: (-float(part[i]), i))[:k]
        keep[[c0 + i for i in top]] = True
    return keep


def test_outer_lr_schedule_on_every_worker():
    N, r = world(), rank()
    p = torch.randn(64, generator=torch.Generator().manual_seed(7))
    d = trickle.DiLoCo([("p", p)], interval=1, outer="sgd", outer_lr=0.8, outer_lr_schedule="linear",
                       outer_lr_end_fraction=0.25, outer_lr_schedule_steps=2)
    g = torch.Generator().manual_seed(r)
    snap = p.clone()
    errors, agree = [], []
    for mult in (1.0, 0.625, 0.25, 0.25):  # linear from 1 to 0.25 over 2 outer steps, then 0.25
        with torch.no_grad():
            p.add_(torch.randn(64, generator=g) * 0.1)
        mean_delta = torch.stack(gather(snap - p)).sum(0) / N
        d.step()
        snap = snap - 0.8 * mult * mean_delta  # sgd: snapshot - lr_t * the averaged outer gradient
        errors.append(float((p - snap).abs().max()))
        agree.append(bool(identical_mask(p).all()))
    # A worker with another schedule is a mismatch, named by its field.
    m = make_model()
    end = 0.5 if r == 3 else 0.25
    expect_raises(trickle.MismatchError, lambda: trickle.DiLoCo(m, outer_lr_schedule="cosine", outer_lr_end_fraction=end),
                  "outer.lr_end_fraction")
    # A worker with an unknown schedule name: every worker raises, the others naming it.
    name = "exp" if r == 1 else "cosine"
    expect_raises(ValueError, lambda: trickle.SPARTADiLoCo(m, outer_lr_schedule=name),
                  "unknown outer_lr_schedule 'exp'" if r == 1 else "rank 1")
    assert max(errors) < 1e-5 and all(agree), (errors, agree)


def test_streaming_fragments_on_every_worker():
    r = rank()
    m = make_model(seed=rank())  # tensors of 240, 20, 120 and 6 values
    params = list(m.parameters())
    d = trickle.DiLoCo(m, interval=4, outer="average", fragments=2, fragment_tensors=[2, 2])
    sizes = (260, 126)
    expected = [plain_all_reduce_bytes(c + 1) for c in sizes]  # a fragment's values and the weight
    sent, agree = [], []
    for t in range(4):
        perturb(params, t)
        before = d.stats.bytes_sent
        d.step()
        sent.append(d.stats.bytes_sent - before)
        agree.append([bool(identical_mask(x.detach().reshape(-1)).all()) for x in params])
    # overlap_steps: the average lands one step later, then the fragment agrees everywhere.
    m2 = make_model(seed=rank())
    p2 = list(m2.parameters())
    d2 = trickle.DiLoCo(m2, interval=4, outer="average", fragments=2, fragment_tensors=[2, 2], overlap_steps=1)
    late = []
    for t in range(3):
        perturb(p2, t)
        d2.step()
        late.append(all(bool(identical_mask(x.detach().reshape(-1)).all()) for x in p2[2:]))
    # Bad streaming options on one worker: every worker raises.
    mix = 1.5 if r == 1 else 0.0
    expect_raises(ValueError, lambda: trickle.DiLoCo(m, interval=4, mix=mix), "mix must be in [0, 1]", "rank 1")
    frag = 3 if r == 0 else 1
    expect_raises(trickle.MismatchError, lambda: trickle.DiLoCo(m, interval=4, fragments=frag), "fragments")
    # Fragment 1 (tensors 2, 3) after step 1, fragment 0 after step 3: each sends its values
    # and the weight, all-reduced, and its tensors (only) agree right after; nothing between.
    assert sent == [0, expected[1], 0, expected[0]], (sent, expected)
    assert agree == [[False] * 4, [False, False, True, True], [False] * 4, [True, True, False, False]], agree
    assert d.stats.exchanges == 2, d.stats
    assert late == [False, False, True], late


def test_overlap_across_processes():
    """SPARTA's overlap and DiLoCo's delayed outer step over a real process group: the
    exchange travels on trickle's progress thread, over a group of the object's own, while
    the trainer goes on (and runs its own collectives); it lands when the semantics say."""
    N, r = world(), rank()
    n = 1000
    t = torch.randn(n, generator=torch.Generator().manual_seed(r))
    s = trickle.SPARTA([t], fraction=1.0, seed=3, overlap=True)
    assert s.options["overlap"] is True
    assert s._own_group is not None and s.group is dist.distributed_c10d._get_default_group()
    perturb([t], 0)
    gathered = t.clone()
    s.step()  # the exchange of step 1 starts; nothing lands yet
    assert s.stats.exchanges == 0 and s.stats.bytes_sent == 0, s.stats
    assert not bool(identical_mask(t).all())
    x = torch.ones(1)
    dist.all_reduce(x)  # the trainer's own collective, on its own group, meanwhile
    assert x.item() == N
    s.step()  # lands: the mean of step 1's values plus what changed since (nothing)
    assert bool(identical_mask(t).all()), "overlapped SPARTA: replicas differ after the average landed"
    assert torch.allclose(t, mean_of_replicas(gathered), atol=1e-6)
    assert s.stats.exchanges == 1 and s.stats.last_bytes_sent == exchange_bytes(n, N, r), s.stats
    # state_dict() applies the exchange still pending (step 2's) first.
    perturb([t], 1)
    st = s.state_dict()
    assert s.stats.exchanges == 2 and st["algorithm"] == "SPARTA", s.stats

    # DiLoCo, overlap_steps=2 with one fragment: the outer step of step 4 lands after step 6,
    # and the parameters become the new global ones: the blocking run's bits after step 4.
    a = torch.randn(n, generator=torch.Generator().manual_seed(10 + r))
    b = a.clone()
    da = trickle.DiLoCo([a], interval=4, outer="average")
    db = trickle.DiLoCo([b], interval=4, outer="average", overlap_steps=2)
    assert da._own_group is None and db._own_group is not None
    for step in range(4):
        perturb([a], step)
        perturb([b], step)
        da.step()
        db.step()
    after_outer = a.clone()
    assert bool(identical_mask(a).all()) and not bool(identical_mask(b).all())
    assert da.stats.exchanges == 1 and db.stats.exchanges == 0, (da.stats, db.stats)
    for step in range(4, 6):
        perturb([b], step)
        db.step()
        assert db.stats.exchanges == (1 if step == 5 else 0), db.stats
    assert torch.equal(bits(b), bits(after_outer)), "the delayed outer step differs from the blocking one"
    # What the library decided, as it says it: these exchanges run behind the steps.
    assert s.overlap == {"sparse_steps": 1, "outer_steps": 0}, s.overlap
    assert da.overlap == {"sparse_steps": 0, "outer_steps": 0}, da.overlap
    assert db.overlap == {"sparse_steps": 0, "outer_steps": 2}, db.overlap
    # An encoded outer gradient travels in flight too (the route runs the whole bf16
    # all-reduce on the progress thread): the blocking bf16 run's bits and bytes.
    e1 = torch.randn(n, generator=torch.Generator().manual_seed(20 + r))
    e2 = e1.clone()
    d1 = trickle.DiLoCo([e1], interval=4, outer="average", outer_codec="bf16")
    d2 = trickle.DiLoCo([e2], interval=4, outer="average", outer_codec="bf16", overlap_steps=2)
    assert d2.overlap == {"sparse_steps": 0, "outer_steps": 2}, d2.overlap
    for step in range(4):
        perturb([e1], step)
        perturb([e2], step)
        d1.step()
        d2.step()
    for step in range(4, 6):
        perturb([e2], step)
        d2.step()
    assert torch.equal(bits(e2), bits(e1)), "the delayed bf16 outer step differs from the blocking one"
    # The same codes; the blocking whole-group round also sends its 16-byte report to the
    # N - 1 others first (who takes part: a non-finite outer gradient is excluded), which the
    # one-fragment in-flight round does without.
    assert d2.stats.code_bytes_sent == d1.stats.code_bytes_sent and d2.stats.exchanges == 1, (d1.stats, d2.stats)
    assert d1.stats.bytes_sent - d2.stats.bytes_sent == trickle._C.outer_report_bytes(N), (d1.stats, d2.stats)
    # carry_local: the same late outer step lands plus the progress made while it travelled.
    c = torch.randn(n, generator=torch.Generator().manual_seed(10 + r))
    dc = trickle.DiLoCo([c], interval=4, outer="average", overlap_steps=2, carry_local=True)
    for step in range(6):
        perturb([c], step)
        if step == 3:
            started = c.clone()  # the parameters its exchange starts from
        if step == 5:
            now = c.clone()
        dc.step()
    assert torch.equal(bits(c), bits(after_outer + (now - started))), "carry_local: not global + local progress"
    assert not bool(identical_mask(c).all())  # each worker keeps its own progress
    expect_raises(ValueError, lambda: trickle.DiLoCo([c], interval=4, carry_local=True), "carry_local needs overlap_steps")
    # Ranks that disagree on overlapping raise together, naming it.
    expect_raises(trickle.MismatchError, lambda: trickle.SPARTA([t], fraction=0.5, overlap=(r == 1)), "overlap")


def test_ddp_dense_baseline():
    """trickle.DDP: every parameter averaged after every interval-th step, the same bits on
    every rank (the rank-order fp32 sum times 1/N), bytes by the process group's cost model,
    small buffers as one all-gather and large ones in pairwise rounds; bad input refused on
    every rank."""
    N, r = world(), rank()
    m = make_model(seed=r)
    params = list(m.parameters())
    d = trickle.DDP(m, interval=2)
    assert d.options == {"interval": 2, "broadcast_initial": True}
    assert bool(identical_mask(flat(params)).all()), "DDP: the initial broadcast left replicas apart"
    n = flat(params).numel()
    perturb(params, 0)
    d.step()
    assert d.stats.exchanges == 0 and not bool(identical_mask(flat(params)).all())
    perturb(params, 1)
    before = flat(params)
    d.step()
    assert d.stats.exchanges == 1 and d.stats.last_bytes_sent == exchange_bytes(n, N, r), d.stats
    assert bool(identical_mask(flat(params)).all()), "DDP: replicas differ after an average"
    assert torch.allclose(flat(params), mean_of_replicas(before), atol=1e-6)
    st = d.state_dict()
    assert st["algorithm"] == "DDP"
    d.load_state_dict(st)

    # A buffer past ring_min_bytes (256 KiB) goes round the pipelined ring (three ranks or
    # more): the ring's bytes, and exactly the ring-order sum's bits (chunk q: rank q + 1's
    # value first, rank q's last).
    big = torch.randn(100_000, generator=torch.Generator().manual_seed(50 + r))
    b = trickle.DDP([big], broadcast_initial=False)
    values = gather(big.clone())
    b.step()
    k = big.numel()
    acc = torch.empty(k)
    for q in range(N):
        lo = q * (k // N) + min(q, k % N)
        hi = lo + k // N + (1 if q < k % N else 0)
        order = [(q + s) % N for s in range(1, N + 1)] if N > 2 else list(range(N))
        part = values[order[0]][lo:hi].clone()
        for o in order[1:]:
            part += values[o][lo:hi]
        acc[lo:hi] = part
    expected = acc * torch.tensor(1.0 / N, dtype=torch.float32)
    assert torch.equal(bits(big), bits(expected)), "DDP: not the ring-order fp32 sum's bits"
    def chunk(q):
        q %= N
        return k // N + (1 if q < k % N else 0)
    ring_sent = (2 * k - chunk(r) - chunk(r + 1)) * 4  # communicator.hpp's ring_all_reduce_bytes
    assert b.stats.last_bytes_sent == (ring_sent if N > 2 else exchange_bytes(k, N, r)), b.stats

    expect_raises(ValueError, lambda: trickle.DDP(m, interval=0), "interval")
    expect_raises(TypeError, lambda: trickle.DDP(m, fraction=0.1), "fraction")
    expect_raises(trickle.MismatchError, lambda: trickle.DDP(m, interval=1 + (r == 1)), "interval")


def test_set_weight_on_one_worker():
    r = rank()
    m = make_model(seed=r)
    params = list(m.parameters())
    d = trickle.DiLoCo(m, interval=2, outer="average")
    d.set_weight(1.0 if r == 0 else 0.0)
    for t in range(2):
        perturb(params, t)
    mine = gather(flat(params))[0]
    d.step()
    d.step()
    same = identical_mask(flat(params))
    # Weights 1, 0, 0, 0: the outer step lands on rank 0's parameters, everywhere.
    assert torch.allclose(flat(params), mine, atol=1e-6)
    assert bool(same.all())


def test_hooks_on_every_worker():
    r = rank()
    m = make_model(seed=r)
    s = trickle.SPARTA(m, fraction=0.1, seed=2)
    totals = []

    def collective(step, st):  # registered on every worker: it may run a collective
        t = torch.tensor([st.bytes_sent], dtype=torch.int64)
        dist.all_reduce(t)
        totals.append((step, int(t.item())))

    s.add_hook(collective, every=2)

    def fails(step, st):
        if r == 1 and step == 3:
            raise RuntimeError("rank 1's hook failed")

    h = s.add_hook(fails)
    errors = []
    for _ in range(4):
        perturb(m.parameters(), 0)
        try:
            s.step()
        except RuntimeError as e:
            errors.append((s.stats.steps, str(e)))
    h.remove()
    # The failure on rank 1 broke nothing: a full exchange still makes the replicas agree.
    s.step()
    s2 = trickle.SPARTA(m, fraction=1.0)
    s2.step()
    same = identical_mask(flat(m.parameters()))
    assert errors == ([(3, "rank 1's hook failed")] if r == 1 else []), errors
    assert [k for k, _ in totals] == [2, 4] and s.stats.steps == 5, (totals, s.stats)
    assert bool(same.all())


def test_non_finite_worker_is_excluded_on_every_rank():
    # Rank 2's parameters hold a NaN before the outer step: it is excluded and named on every
    # rank, and the replicas end equal, finite, and with the bits of a run in which rank 2
    # had weight 0 (docs/robustness.md), under the mean and under a robust rule.
    r, bad = rank(), 2 % world()
    results = []
    for rule in ("mean", "median"):
        m, ref = make_model(seed=r), make_model(seed=r)
        d = trickle.DiLoCo(m, interval=2, outer="nesterov", aggregate=rule)
        z = trickle.DiLoCo(ref, interval=2, outer="nesterov", aggregate=rule)
        if r == bad:
            z.set_weight(0.0)
        for t in range(2):
            perturb(m.parameters(), t)
            perturb(ref.parameters(), t)
            if t == 1 and r == bad:
                with torch.no_grad():
                    m[0].weight[3, 4] = float("nan")
            d.step()
            z.step()
        after = flat(m.parameters())
        results.append((rule, d.aggregation, z.aggregation, after, flat(ref.parameters()), identical_mask(after)))
    for rule, a, za, after, ref_after, same in results:
        assert a.rule == rule and a.rounds == 1, (rule, repr(a))
        assert a.excluded == [bad] and a.excluded_total == 1 and a.skipped == 0, (rule, repr(a))
        assert a.weights[bad] == 0.0 and math.isnan(a.norm[bad]), (rule, repr(a))
        assert all(w == 1.0 for i, w in enumerate(a.weights) if i != bad), (rule, repr(a))
        assert za.excluded == [], (rule, repr(za))
        assert bool(torch.isfinite(after).all()), rule
        assert bool(same.all()), (rule, f"{int((~same).sum())} positions differ")
        assert torch.equal(bits(after), bits(ref_after)), (rule, "not the bits of the run with weight 0")


def test_median_resists_one_huge_update():
    # Rank 1 moves its parameters by 1e6; the median (and trimmed:1, which for 4 workers keeps
    # the two middle values too) stays close to the honest ranks' mean, and the record names
    # what happened: rank 1's norm and distance, trimmed in every coordinate, clipped by clip:TAU.
    N, r, liar = world(), rank(), 1
    out = {}
    for rule in ("median", "trimmed:1", "clip:1", "mean"):
        if rule == "trimmed:1" and N < 3:
            continue
        m = make_model(seed=r)
        d = trickle.DiLoCo(m, interval=1, outer="average", aggregate=rule)
        start = flat(m.parameters())
        perturb(m.parameters(), 0)
        if r == liar:
            with torch.no_grad():
                for p in m.parameters():
                    p.add_(1e6)
        deltas = gather(flat(m.parameters()) - start)
        d.step()
        after = flat(m.parameters())
        out[rule] = (d.aggregation, d.stats, start, after, deltas, identical_mask(after))
    n = sum(p.numel() for p in make_model().parameters())
    for rule, (a, st, start, after, deltas, same) in out.items():
        honest = start + torch.stack([x for i, x in enumerate(deltas) if i != liar]).double().mean(0).float()
        err = float((after - honest).abs().max())
        assert bool(same.all()), rule
        assert a.rule == rule and a.rounds == 1 and a.excluded == [], (rule, repr(a))
        assert a.norm[liar] > 1e6 and all(a.norm[i] < 10 for i in range(N) if i != liar), (rule, a.norm)
        if rule == "mean":
            assert err > 1e5, (rule, err)  # the mean is dragged away (the contrast)
            continue
        assert err < (0.05 if rule != "clip:1" else 0.5), (rule, err)
        assert a.distance[liar] > 1e6, (rule, a.distance)
        if rule == "trimmed:1":
            assert a.trimmed_fraction[liar] == 1.0 and a.clipped == [liar], (rule, repr(a))
        if rule == "clip:1":
            assert a.clipped == [liar] and a.clipped_total == 1, (rule, repr(a))
        # A robust rule all-gathers every contribution (n values and the weight, fp32), after
        # the reports (16 bytes per worker).
        assert st.bytes_sent == (N - 1) * 4 * (n + 1) + (N - 1) * 16, (rule, repr(st))


def test_bad_aggregate_raises_on_every_rank():
    m = make_model()
    expect_raises(ValueError, lambda: trickle.DiLoCo(m, aggregate="trimmed:x"), "trimmed:x", "integer K >= 1")
    expect_raises(TypeError, lambda: trickle.SPARTADiLoCo(m, aggregate=1), "aggregate must be a str")
    # Only rank 2 passes bad text: it raises its own error, the others name rank 2.
    text = "median:3" if rank() == 2 else "median"
    expect_raises(ValueError, lambda: trickle.DiLoCo(m, aggregate=text), "median:3",
                  "is not a rule" if rank() == 2 else "rank 2")
    # A robust rule with an encoded outer gradient: the library's message, on every rank.
    expect_raises(ValueError, lambda: trickle.DiLoCo(m, aggregate="median", outer_codec="int8"),
                  "aggregate median", "cannot use an encoded all-reduce", "choose the fp32 codec")
    expect_raises(ValueError, lambda: trickle.SPARTADiLoCo(m, aggregate="clip:0.5", outer_codec="int8"),
                  "aggregate clip:0.5", "choose the fp32 codec")
    expect_raises(ValueError, lambda: trickle.DiLoCo(m, aggregate=f"trimmed:{(world() + 1) // 2}"),
                  "trim count must be below half the workers")


TESTS = [
    test_overlap_across_processes,
    test_ddp_dense_baseline,
    test_broadcast_initial,
    test_sparta_full_fraction_makes_replicas_identical,
    test_sparta_partial_fraction_uniform,
    test_sparta_partial_fraction_permutation_covers_everything,
    test_bytes_match_the_cost_model,
    test_diloco_outer_step_makes_replicas_identical,
    test_diloco_average_is_the_mean,
    test_codecs_compress_and_keep_replicas_identical,
    test_sparta_diloco_outer_step_makes_replicas_identical,
    test_state_dict_round_trip_sparta,
    test_state_dict_round_trip_diloco,
    test_state_dict_round_trip_sparta_diloco,
    test_load_state_dict_errors_on_every_rank,
    test_state_dict_of_another_rank,
    test_mismatched_models_raise_on_every_rank,
    test_bad_fraction_raises_on_every_rank,
    test_non_contiguous_parameter_raises_on_every_rank,
    test_unknown_names_raise_on_every_rank,
    test_other_bad_models_raise_on_every_rank,
    test_mixed_device_model_raises_on_every_rank,
    test_group_still_usable_after_errors,
    test_step_between_forward_and_backward_raises,
    test_mixed_dtypes_make_one_group_each,
    test_every_policy_runs,
    test_sub_group,
    test_step_releases_the_gil,
    test_dropping_the_object_after_destroying_its_group,
    test_native_codec_resolves_per_group,
    test_sparsifiers_bytes_and_sum,
    test_outer_lr_schedule_on_every_worker,
    test_streaming_fragments_on_every_worker,
    test_set_weight_on_one_worker,
    test_hooks_on_every_worker,
    test_non_finite_worker_is_excluded_on_every_rank,
    test_median_resists_one_huge_update,
    test_bad_aggregate_raises_on_every_rank,
]


def main() -> int:
    if "RANK" not in os.environ:
        print(
            "run under torchrun (torchrun --standalone --nproc_per_node 4 " + __file__ + ") or "
            "tests/python/launch.py (python tests/python/launch.py --nproc 4 " + __file__ + ")",
            file=sys.stderr,
        )
        return 2
    torch.set_num_threads(1)
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
    if world() != 4 and rank() == 0:
        print(f"note: written for 4 ranks, running on {world()}", flush=True)
    harness.log(f"trickle {trickle.__version__} from {os.path.dirname(trickle.__file__)}, torch {torch.__version__}")
    status = harness.run(TESTS, "test_distributed")
    dist.barrier()
    dist.destroy_process_group()
    return status


if __name__ == "__main__":
    sys.exit(main())
