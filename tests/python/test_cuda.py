"""trickle's Python package on CUDA tensors, against its own CPU path (needs a GPU and a CUDA build).

    torchrun --standalone --nproc-per-node 4 tests/python/test_cuda.py            # 4 ranks on one GPU, Gloo
    TRICKLE_TEST_BACKEND=nccl torchrun --standalone --nproc-per-node 1 tests/python/test_cuda.py

Every rank holds the same model twice, once on the CPU and once on its GPU (all ranks may
share one GPU over Gloo; NCCL needs one GPU per rank), changes both alike, and steps a
trickle object over each: the CUDA replicas must hold the bits of the CPU ones after SPARTA
exchanges (every sampler, several codecs, fp32 and bf16), DiLoCo outer steps (several
outer optimizers, fp32 / int8 / bf16 on the wire; a sparsifier is refused on the GPU, as the
library documents) and SPARTA + DiLoCo, with
the same bytes counted; a state_dict round trip must continue bit for bit; a mismatched
model must raise on every rank; and trickle must follow the trainer's current stream. The
CPU objects run over a Gloo group (the default group over Gloo, a Gloo subgroup over
NCCL), the CUDA ones over the default group. Skips (exit 0, saying why) without a GPU or
without a CUDA build of trickle. Run by scripts/gpu_check.sh.

TRICKLE_TEST_DRY_RUN=1 runs the same tests with the "GPU" copy on the CPU as well (no
device, no stream test): a check of this script itself where there is no GPU, which
tests/python/run.sh makes in CI.
"""

from __future__ import annotations

import datetime
import io
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import expect_raises, rank, world  # noqa: E402

import trickle  # noqa: E402

DEVICE = None  # torch.device of this rank's GPU (the CPU in a dry run)
DRY_RUN = os.environ.get("TRICKLE_TEST_DRY_RUN") == "1"
CPU_GROUP = None  # a Gloo group for the CPU objects (and the harness)


def make_model(seed: int = 0, extra: bool = False, dtype=torch.float32) -> nn.Module:
    torch.manual_seed(seed)
    layers = [nn.Linear(24, 40), nn.Tanh(), nn.Linear(40, 12)]
    if extra:
        layers += [nn.Linear(12, 12)]
    return nn.Sequential(*layers).to(dtype)


def twins(dtype=torch.float32, seed: int = 0):
    """The same model on the CPU and on this rank's GPU."""
    cpu = make_model(seed, dtype=dtype)
    gpu = make_model(seed, dtype=dtype).to(DEVICE)
    return cpu, gpu


def perturb(cpu: nn.Module, gpu: nn.Module, step: int, scale: float = 0.01) -> None:
    """A rank-specific change, the same on both copies (made on the CPU, copied over)."""
    g = torch.Generator().manual_seed(7919 * (rank() + 1) + step)
    with torch.no_grad():
        for pc, pg in zip(cpu.parameters(), gpu.parameters()):
            d = (torch.randn(pc.shape, generator=g) * scale).to(pc.dtype)
            pc.add_(d)
            pg.copy_(pc.to(DEVICE))


def sync() -> None:
    if not DRY_RUN:
        torch.cuda.synchronize(DEVICE)


def same_bits(cpu: nn.Module, gpu: nn.Module, what: str) -> None:
    sync()
    for (name, pc), pg in zip(cpu.named_parameters(), gpu.parameters()):
        a = pc.detach().contiguous().view(torch.int16 if pc.element_size() == 2 else torch.int32)
        b = pg.detach().cpu().contiguous().view(a.dtype)
        diff = int((a != b).sum())
        assert diff == 0, f"{what}: parameter {name}: {diff} of {a.numel()} values differ from the CPU path"


BYTE_FIELDS = ("exchanges", "values", "bytes_sent", "bytes_received", "code_bytes_sent", "scale_bytes_sent",
               "index_bytes_sent")


# The reports each DiLoCo outer round begins with on CPU parameters (docs/diloco.md, "Who
# takes part"): one all-gather of 16 bytes per worker, counted as scales. The device path
# does not exchange them (a non-finite outer gradient is not excluded there), so its
# counters are the CPU's less 16 (N - 1) bytes sent and received per outer round. (The
# first GPU run of this file, 4 ranks over Gloo, found exactly that difference.)
def report_bytes(n: int) -> int:
    return trickle._C.outer_report_bytes(n)


REPORT_FIELDS = ("bytes_sent", "bytes_received", "scale_bytes_sent")


def same_stats(a: trickle.Stats, b: trickle.Stats, what: str, report_rounds: int = 0) -> None:
    """a: the CPU object's stats; b: the CUDA object's; report_rounds: the outer rounds whose
    reports only the CPU object sent."""
    reports = 0 if DRY_RUN else report_bytes(world()) * report_rounds
    for f in BYTE_FIELDS:
        expected = a[f] - (reports if f in REPORT_FIELDS else 0)
        assert expected == b[f], f"{what}: {f} is {b[f]} on CUDA, {a[f]} on the CPU (less {reports} of reports)"


def run_pair(make, what: str, dtype=torch.float32, steps: int = 9, outer_rounds=None):
    """Builds make(model, group) over both copies, steps both `steps` times; compares.
    outer_rounds(cpu_object): its DiLoCo outer rounds (whose reports the CUDA object does not
    send), for DiLoCo and SPARTA + DiLoCo."""
    cpu, gpu = twins(dtype)
    a = make(cpu, CPU_GROUP)
    b = make(gpu, None)
    assert b._impl.on_cuda is not DRY_RUN and not a._impl.on_cuda
    for t in range(steps):
        perturb(cpu, gpu, t)
        a.step()
        b.step()
    same_bits(cpu, gpu, what)
    same_stats(a.stats, b.stats, what, outer_rounds(a) if outer_rounds else 0)
    return a, b, cpu, gpu


def diloco_rounds(d) -> int:
    return d.stats["exchanges"]


def sparta_diloco_rounds(d) -> int:
    return d.outer_stats["exchanges"]


# ---------------------------------------------------------------------------------------


def test_build_reports_cuda():
    info = trickle.build_info()
    if DRY_RUN:
        harness.log(f"  dry run on the CPU: build cuda={info['cuda']}")
        return
    assert info["cuda"] is True and info["cuda_version"] and info["cuda_archs"], info
    harness.log(f"  build: CUDA {info['cuda_version']}, archs {info['cuda_archs']}; torch {info['torch']} "
                f"(CUDA {torch.version.cuda}); GPU {torch.cuda.get_device_name(DEVICE)}")


def test_sparta_matches_cpu():
    for sampler in trickle.SAMPLERS:
        for codec in ("fp32", "int8", "bf16"):
            run_pair(lambda m, g: trickle.SPARTA(m, fraction=0.1, sampler=sampler, codec=codec, seed=3, group=g),
                     f"SPARTA sampler={sampler} codec={codec}")


def test_sparta_bf16_model_matches_cpu():
    run_pair(lambda m, g: trickle.SPARTA(m, fraction=0.2, sampler="block", block_size=16, codec="native", seed=5,
                                         group=g), "SPARTA bf16 model, native codec", dtype=torch.bfloat16)


def test_diloco_matches_cpu():
    for outer, kw in (("nesterov", {}), ("adam", {"outer_lr": 0.01}), ("sgd", {}), ("average", {})):
        for codec in ("fp32", "int8", "bf16"):
            run_pair(lambda m, g: trickle.DiLoCo(m, interval=3, outer=outer, outer_codec=codec, seed=2, group=g,
                                                 **kw), f"DiLoCo outer={outer} outer_codec={codec}",
                     outer_rounds=diloco_rounds)


def test_diloco_sparsifier_refused_on_cuda():
    """The sparsifiers run on host parameters in this version: on a GPU the constructor
    refuses one, on every rank, naming the value codecs that do run there (the first GPU run
    of this file expected the CPU's bits and found the refusal)."""
    def make(m, g):
        return trickle.DiLoCo(m, interval=3, outer_sparsifier="chunk_topk", sparse_chunk=64, sparse_k=4, seed=2,
                              group=g)
    if DRY_RUN:
        run_pair(make, "DiLoCo outer_sparsifier=chunk_topk")
        return
    _, gpu = twins()
    expect_raises(ValueError, lambda: make(gpu, None), "chunk_topk sparsifier runs on host parameters", "int8")


def test_diloco_bf16_model_matches_cpu():
    run_pair(lambda m, g: trickle.DiLoCo(m, interval=3, outer_codec="native", seed=2, group=g),
             "DiLoCo bf16 model", dtype=torch.bfloat16, outer_rounds=diloco_rounds)


def test_sparta_diloco_matches_cpu():
    a, b, _, _ = run_pair(lambda m, g: trickle.SPARTADiLoCo(m, fraction=0.05, interval=4, sampler="uniform",
                                                            outer_codec="int8", seed=4, group=g),
                          "SPARTA + DiLoCo", outer_rounds=sparta_diloco_rounds)
    same_stats(a.sparse_stats, b.sparse_stats, "SPARTA + DiLoCo, sparse part")
    same_stats(a.outer_stats, b.outer_stats, "SPARTA + DiLoCo, outer part", sparta_diloco_rounds(a))


def change(model: nn.Module, step: int) -> None:
    """This rank's change at `step`, made on the CPU and applied on the GPU."""
    g = torch.Generator().manual_seed(7919 * (rank() + 1) + step)
    with torch.no_grad():
        for p in model.parameters():
            p.add_((torch.randn(p.shape, generator=g) * 0.01).to(p.device, p.dtype))


def test_state_dict_round_trip():
    # The resumed object must not broadcast rank 0's parameters at construction: each rank
    # resumes its own replica, which differ between outer steps.
    make = lambda m, b=True: trickle.DiLoCo(m, interval=3, outer="nesterov", seed=9, broadcast_initial=b)  # noqa: E731
    gpu = make_model().to(DEVICE)
    d = make(gpu)
    for t in range(4):
        change(gpu, t)
        d.step()
    buf = io.BytesIO()
    torch.save({"model": gpu.state_dict(), "trickle": d.state_dict()}, buf)
    for t in range(4, 10):
        change(gpu, t)
        d.step()
    buf.seek(0)
    saved = torch.load(buf, map_location=DEVICE)
    resumed = make_model().to(DEVICE)
    resumed.load_state_dict(saved["model"])
    r = make(resumed, False)
    r.load_state_dict(saved["trickle"])
    for t in range(4, 10):
        change(resumed, t)
        r.step()
    sync()
    for (name, a), b in zip(gpu.named_parameters(), resumed.parameters()):
        assert torch.equal(a.detach().view(torch.int32), b.detach().view(torch.int32)), \
            f"state_dict round trip: {name} differs after the resumed outer steps"
    assert r.stats["exchanges"] == d.stats["exchanges"] == 3, (r.stats, d.stats)


def test_mismatched_model_raises_on_every_rank():
    m = make_model(extra=(rank() == world() - 1 and world() > 1)).to(DEVICE)
    if world() > 1:
        expect_raises(trickle.MismatchError, lambda: trickle.SPARTA(m, fraction=0.1), "disagree")
        expect_raises(trickle.MismatchError, lambda: trickle.DiLoCo(m, interval=5), "disagree")
    # A model split over CPU and CUDA is refused, naming the CPU parameter.
    if not DRY_RUN:
        mixed = nn.Sequential(nn.Linear(3, 3).to(DEVICE), nn.Linear(3, 2))
        expect_raises(ValueError, lambda: trickle.SPARTA(mixed), "is on cpu", "one trickle object per device")


def test_follows_the_current_stream():
    if DRY_RUN:
        return
    cpu, gpu = twins()
    a = trickle.SPARTA(cpu, fraction=0.3, seed=1, group=CPU_GROUP)
    b = trickle.SPARTA(gpu, fraction=0.3, seed=1)
    s = torch.cuda.Stream(DEVICE)
    for t in range(5):
        perturb(cpu, gpu, t)
        a.step()
        s.wait_stream(torch.cuda.current_stream(DEVICE))
        with torch.cuda.stream(s):
            b.step()
            with torch.no_grad():  # the trainer's next kernel on the same stream sees the result
                for p in gpu.parameters():
                    p.mul_(1.0)
        torch.cuda.current_stream(DEVICE).wait_stream(s)
    same_bits(cpu, gpu, "SPARTA on a side stream")


def test_collectives_per_exchange():
    _, gpu = twins()
    s = trickle.SPARTA(gpu, fraction=0.01, seed=1)
    s.step()
    before = s.collectives
    for _ in range(10):
        s.step()
    per_step = (s.collectives - before) / 10
    harness.log(f"  collectives per SPARTA step ({'CPU, dry run' if DRY_RUN else 'staged' if s._impl.stages_through_host else 'NCCL'}):"
                f" {per_step:g}")
    # One collective a step; none over NCCL with one rank, where there is nothing to
    # exchange and process_group_cuda starts no collective (the staged path's host group
    # still runs its one).
    expected = 0 if (not DRY_RUN and world() == 1 and not s._impl.stages_through_host) else 1
    assert per_step == expected, (per_step, expected)


TESTS = [
    test_build_reports_cuda,
    test_sparta_matches_cpu,
    test_sparta_bf16_model_matches_cpu,
    test_diloco_matches_cpu,
    test_diloco_sparsifier_refused_on_cuda,
    test_diloco_bf16_model_matches_cpu,
    test_sparta_diloco_matches_cpu,
    test_state_dict_round_trip,
    test_mismatched_model_raises_on_every_rank,
    test_follows_the_current_stream,
    test_collectives_per_exchange,
]


def main() -> int:
    global DEVICE, CPU_GROUP
    if not DRY_RUN and not trickle.build_info()["cuda"]:
        print("test_cuda: skipped: this build of trickle has no CUDA (trickle.build_info()['cuda'] is False)")
        return 0
    if not DRY_RUN and not torch.cuda.is_available():
        print("test_cuda: skipped: no GPU (torch.cuda.is_available() is False)")
        return 0
    if "RANK" not in os.environ:
        print("test_cuda: run under torchrun (see the docstring)", file=sys.stderr)
        return 2
    backend = os.environ.get("TRICKLE_TEST_BACKEND", "gloo")
    local = int(os.environ.get("LOCAL_RANK", "0"))
    if DRY_RUN:
        DEVICE = torch.device("cpu")
    else:
        DEVICE = torch.device("cuda", local % torch.cuda.device_count())
        torch.cuda.set_device(DEVICE)
    torch.set_num_threads(1)
    dist.init_process_group(backend, timeout=datetime.timedelta(seconds=120))
    CPU_GROUP = dist.new_group(backend="gloo") if backend != "gloo" else None
    harness.log(f"trickle {trickle.__version__}, torch {torch.__version__}, backend {backend}, {world()} rank(s)"
                + (", dry run on the CPU" if DRY_RUN else ""))
    status = harness.run(TESTS, f"test_cuda ({backend})")
    dist.destroy_process_group()
    return status


if __name__ == "__main__":
    sys.exit(main())
