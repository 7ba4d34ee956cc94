# Type stubs of the trickle package: every class, keyword argument (with its type and
# default), property and function an editor or a type checker should see. The runtime
# signatures are built in trickle/_algorithms.py (_signature); tests/python/test_stubs.py
# checks that these stubs list the same keyword arguments, defaults, members, docstrings
# and names, so that they cannot drift.

from typing import Any, Callable, Dict, Iterator, List, Literal, Mapping, Optional, Sequence, Tuple, Union

import torch
from torch.distributed import ProcessGroup, Store

__version__: str

# The registered policy names (the C++ registries, include/trickle/*/registry.hpp), and
# "native" for the codecs (each parameter group in its own dtype).
SamplerName = Literal['uniform', 'permutation', 'block', 'layerwise']
ScheduleName = Literal['constant', 'linear', 'cosine', 'piecewise']
TopologyName = Literal['all_reduce', 'ring', 'gossip', 'exponential', 'islands']
CodecName = Literal['fp32', 'bf16', 'fp16', 'fp8_e4m3', 'fp8_e5m2', 'fp8_block', 'int8', 'int4', 'sign2', 'native']
OuterName = Literal['sgd', 'momentum', 'nesterov', 'adam', 'average']
SparsifierName = Literal['chunk_topk', 'random_k']
LayerwiseMode = Literal['per_tensor', 'rotating']

SAMPLERS: Tuple[str, ...]
SCHEDULES: Tuple[str, ...]
TOPOLOGIES: Tuple[str, ...]
CODECS: Tuple[str, ...]
OUTER_OPTIMIZERS: Tuple[str, ...]
SPARSIFIERS: Tuple[str, ...]
STATE_FORMAT: str

# What an algorithm takes as its model: an nn.Module (its named_parameters()), a tensor, a
# mapping name -> tensor, or an iterable of tensors or (name, tensor) pairs.
Model = Union[
    torch.nn.Module,
    torch.Tensor,
    Mapping[str, torch.Tensor],
    Sequence[torch.Tensor],
    Sequence[Tuple[str, torch.Tensor]],
    Iterator[torch.Tensor],
]

Hook = Callable[[int, "Stats"], Any]

class MismatchError(ValueError):
    """Workers disagree about the configuration, the model's parameters, or a checkpoint (a ValueError). Raised on every worker at once."""

class CommError(RuntimeError):
    """A collective operation failed: a peer left, a timeout, or ranks that called differently."""

class Stats:
    """One worker's traffic account (trickle::exchange_stats), read-only.

    Fields (attributes, and keys: stats["bytes_sent"]; dict(stats) and stats.as_dict() give
    a plain dict, in this order):
      steps, exchanges          step() calls, and those that communicated
      values                    values this worker put on the wire, over all exchanges
      bytes_sent, bytes_received, calls    over all exchanges
      last_bytes_sent, last_bytes_received, last_calls, last_values   the latest exchange
      dense_bytes               what a dense fp32 all-reduce of all parameters at every
                                step would have sent, under the same cost model
      reduction                 dense_bytes / bytes_sent (0.0 before anything was sent)
      initial_bytes_sent, initial_bytes_received, initial_calls   the initial broadcast at
                                construction (not part of the totals above)
      code_bytes_sent, scale_bytes_sent, index_bytes_sent, padding_bytes_sent
                                bytes_sent by part: codes (plain fp32 values too), per-block
                                scales (and DiLoCo's weight sum, when the outer gradient is
                                encoded), a sparsifier's indices, and padding; they sum to
                                bytes_sent
    Every field is an int but reduction (a float). repr() shows every field; str() is a
    short progress line. Stats(mapping) or Stats(**fields) builds one (every field needed).
    Not a Mapping subclass on purpose: `values` is a field, not Mapping.values().
    """

    FIELDS: Tuple[str, ...]
    steps: int
    exchanges: int
    values: int
    bytes_sent: int
    bytes_received: int
    calls: int
    last_bytes_sent: int
    last_bytes_received: int
    last_calls: int
    last_values: int
    dense_bytes: int
    reduction: float
    initial_bytes_sent: int
    initial_bytes_received: int
    initial_calls: int
    code_bytes_sent: int
    scale_bytes_sent: int
    index_bytes_sent: int
    padding_bytes_sent: int
    def __init__(self, fields: Optional[Mapping[str, Union[int, float]]] = None, /, **kwargs: Union[int, float]) -> None:
        """Stats(mapping) or Stats(**fields): every field is needed."""
    def keys(self) -> Tuple[str, ...]:
        """The field names, in order (so that dict(stats) works)."""
    def as_dict(self) -> Dict[str, Union[int, float]]:
        """The fields as a plain dict (for loggers: wandb.log(stats.as_dict()))."""
    def __getitem__(self, key: str) -> Union[int, float]:
        """A field by name: stats["bytes_sent"]."""
    def __iter__(self) -> Iterator[str]:
        """The field names."""
    def __len__(self) -> int:
        """The number of fields."""
    def __contains__(self, key: object) -> bool:
        """Whether key is a field name."""

class Aggregation:
    """How DiLoCo's outer steps combined the workers' contributions (trickle::aggregation_stats;
    docs/robustness.md), read-only: the same on every worker.

    Fields (attributes, and keys: agg["excluded"]; dict(agg) and agg.as_dict() give a plain
    dict, in this order):
      rule                      the rule's name: mean, trimmed:K, median or clip:TAU
      rounds                    outer rounds aggregated so far
      weights                   each worker's weight in the last round (0: dropped or excluded)
      norm                      each worker's ||delta_i||, its unweighted outer gradient, in the
                                last round (inf or nan: non-finite)
      distance                  ||delta_i - aggregate|| per worker (robust rules, workers taking
                                part; nan otherwise)
      trimmed_fraction          trimmed:K: per worker, the fraction of coordinates where it was
                                dropped
      clipped                   the ranks clipped (clip) or dropped in most coordinates (trimmed)
                                in the last round
      excluded                  the ranks excluded in the last round: a non-finite contribution
      clipped_total, excluded_total   clipped entries and exclusions over all rounds
      skipped                   rounds skipped because every contribution was excluded
    The per-worker fields are lists in rank order (empty before the first outer step);
    rule is a str, the counts ints. Aggregation(mapping) or Aggregation(**fields) builds one
    (every field needed).
    """

    FIELDS: Tuple[str, ...]
    rule: str
    rounds: int
    weights: List[float]
    norm: List[float]
    distance: List[float]
    trimmed_fraction: List[float]
    clipped: List[int]
    excluded: List[int]
    clipped_total: int
    excluded_total: int
    skipped: int
    def __init__(self, fields: Optional[Mapping[str, Any]] = None, /, **kwargs: Any) -> None:
        """Aggregation(mapping) or Aggregation(**fields): every field is needed."""
    def keys(self) -> Tuple[str, ...]:
        """The field names, in order (so that dict(agg) works)."""
    def as_dict(self) -> Dict[str, Any]:
        """The fields as a plain dict (the lists copied)."""
    def __getitem__(self, key: str) -> Any:
        """A field by name: agg["excluded"]."""
    def __iter__(self) -> Iterator[str]:
        """The field names."""
    def __len__(self) -> int:
        """The number of fields."""
    def __contains__(self, key: object) -> bool:
        """Whether key is a field name."""

class HookHandle:
    """What add_hook() returns: remove() unregisters the hook (a second call does nothing).
    Also a context manager: `with algo.add_hook(fn): ...` removes the hook on exit.
    """

    id: int
    def remove(self) -> None:
        """Unregisters the hook; nothing happens if it is already removed (or its algorithm gone)."""
    @property
    def active(self) -> bool:
        """Whether the hook is still registered."""
    def __enter__(self) -> "HookHandle":
        """The handle itself."""
    def __exit__(self, *exc: object) -> None:
        """Removes the hook."""

class Elastic:
    """An elastic worker's place (SPARTA, DiLoCo or SPARTADiLoCo with elastic=): the store holding the view, this worker's stable id (>= 0), how many workers form the first epoch, the timeout in seconds, the job name (a prefix of the store's keys), liveness in seconds (0: off), carry, the trainer's state (an optimizer, or a mapping of names to objects with state_dict()) a joiner takes from a live worker, and renew_every, renew the view at every k-th round only, and store_recovery, seconds to wait for a store that failed to come back at its address (0: off). See trickle/_elastic.py and docs/elastic.md."""

    store: Store
    id: int
    initial: int
    timeout: float
    job: str
    liveness: float
    start_timeout: float
    join_timeout: float
    hostname: str
    carry: Any
    renew_every: int
    store_recovery: float
    def __init__(self, store: Store, id: int, initial: int, timeout: float = 10.0, job: str = "trickle",
                 liveness: float = 0.0, start_timeout: float = 300.0, join_timeout: float = 600.0,
                 hostname: str = "", carry: Any = None, renew_every: int = 1,
                 store_recovery: float = 0.0) -> None:
        """Checks the arguments (TypeError / ValueError) and keeps them."""

def build_info() -> Dict[str, Any]:
    """What this trickle extension was built with: trickle, torch, cuda (whether it takes CUDA tensors), cuda_version and cuda_archs (its kernels' toolkit and GPU architectures, or None), nccl (trickle's own NCCL communicator: False; CUDA tensors go through the trainer's group), gloo, cxx, cplusplus and codecs."""

def connect_store(host: str, port: int, timeout: float = 30.0) -> Store:
    """A client of the TCPStore at host:port; raises RuntimeError naming the address when no store answers within `timeout` seconds."""

class _Algorithm:
    def step(self) -> None:
        """Collective: call on every worker after every optimizer.step(), never between a forward pass and its backward; then calls the hooks due at this step."""
    def add_hook(self, fn: Hook, *, every: int = 1) -> HookHandle:
        """Registers fn(step, stats), called on this worker after every `every`-th step(); returns a HookHandle (remove(), or a context manager). A hook's exception propagates from step() after the step completed."""
    def state_dict(self) -> Dict[str, Any]:
        """This worker's algorithm state (not the model's parameters), for torch.save."""
    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Collective: restores a state_dict() of the same algorithm and configuration; raises on every worker alike, changing nothing, if any worker's state is unusable."""
    @property
    def stats(self) -> Stats:
        """This worker's traffic account, summed over the parameter groups."""
    @property
    def group_stats(self) -> List[Stats]:
        """Each parameter group's account (the order of `groups`)."""
    @property
    def groups(self) -> List[Dict[str, Any]]:
        """The parameter groups, one per dtype: dtype, device, names, elements."""
    @property
    def options(self) -> Dict[str, Any]:
        """The options this object was built with (as passed to the C++ side)."""
    @property
    def collectives(self) -> int:
        """The collectives this worker's communicator started so far (construction included; 0 over trickle.Elastic); a SPARTA exchange over a small model is one."""
    @property
    def group(self) -> Optional[ProcessGroup]:
        """The torch.distributed process group (None for an elastic worker)."""
    @property
    def overlap(self) -> Dict[str, int]:
        """The steps an exchange runs behind compute as the library decided it: sparse_steps (SPARTA, 1 with overlap=True) and outer_steps (a DiLoCo fragment, overlap_steps); 0 where it blocks the step that starts it."""
    @property
    def membership(self) -> Dict[str, Any]:
        """Over trickle.Elastic: the view and what changed it (epoch, workers, quorum, changes, joined, left, joins_refused, rounds_retried, rounds_below_quorum, state_bytes, wait_seconds)."""
    @property
    def rank(self) -> int:
        """This worker's rank in the group (over trickle.Elastic: in the current view)."""
    @property
    def world_size(self) -> int:
        """The number of workers (over trickle.Elastic: in the current view)."""

class SPARTA(_Algorithm):
    """SPARTA: after every `interval`-th step, all workers average the same random `fraction`
    of the parameters (chosen from the shared seed; only values travel).

    trickle.SPARTA(model, **options); model: an nn.Module (its named_parameters()), a mapping
    name -> tensor, a tensor, or an iterable of tensors or (name, tensor) pairs; CPU tensors
    of dtype float32, float16 or bfloat16, contiguous. The names in the option lists are
    trickle.SAMPLERS, SCHEDULES, TOPOLOGIES and CODECS (read from the C++ registries), and
    "native" for codec. A keyword of a policy other than the chosen one (block_size with
    sampler="uniform", say) is ignored; points and warmup_steps where they cannot apply are
    refused. Options (keyword only):
      fraction=0.005: base fraction of the parameters averaged per exchange, in (0, 1]
      interval=1: exchange after every interval-th step
      sampler='uniform': which positions: uniform | permutation | block | layerwise
      block_size=256: block sampler: values per aligned block
      layerwise_mode='per_tensor': layerwise sampler: per_tensor (every tensor its share) | rotating (contiguous windows)
      schedule='constant': fraction schedule: constant | linear | cosine | piecewise
      end_fraction=0.001: linear / cosine: the fraction reached after schedule_steps steps
      schedule_steps=1000: linear / cosine: steps from fraction to end_fraction
      points=None: piecewise: [(step, fraction), ...], steps strictly increasing
      warmup_steps=0: a linear ramp from warmup_start_fraction over this many steps (0: none)
      warmup_start_fraction=0.05: where the warm-up starts
      codec='fp32': SPARTA's values on the wire: fp32 | bf16 | fp16 | fp8_e4m3 | fp8_e5m2 | fp8_block | int8 | int4 | sign2 | native
      overlap=False: SPARTA: the exchange of step t travels during step t + 1 and is applied then, corrected for the local change (fp32 with the all_reduce topology travels on trickle's progress thread; CPU parameters)
      elastic=None: a trickle.Elastic instead of group: workers are processes that may die and join
      min_workers=1: with elastic: the quorum; with fewer workers in the view an exchange (an outer step) is skipped and the step trains locally
      seed=0: shared seed of the random choices (the same on every worker)
      topology='all_reduce': how values are combined: all_reduce | ring | gossip | exponential | islands
      island_size=2: islands topology: workers per island
      broadcast_initial=True: at construction, give every worker rank 0's parameters
      codec_block=64: values per scale of the block codecs (fp8_block, int8, int4, sign2)
      stochastic_rounding=False: round with the shared Philox stream instead of to nearest (int8, int4, sign2)
      group=None: the torch.distributed process group (None: the default group)

    Methods: step(), add_hook(fn, every=1), state_dict(), load_state_dict(state).
    Properties: stats, group_stats, groups, options, group, rank, world_size, membership.
    """

    def __init__(
        self,
        model: Model,
        *,
        fraction: float = 0.005,
        interval: int = 1,
        sampler: SamplerName = 'uniform',
        block_size: int = 256,
        layerwise_mode: LayerwiseMode = 'per_tensor',
        schedule: ScheduleName = 'constant',
        end_fraction: float = 0.001,
        schedule_steps: int = 1000,
        points: Optional[Sequence[Tuple[int, float]]] = None,
        warmup_steps: int = 0,
        warmup_start_fraction: float = 0.05,
        codec: CodecName = 'fp32',
        overlap: bool = False,
        elastic: Optional[Elastic] = None,
        min_workers: int = 1,
        seed: int = 0,
        topology: TopologyName = 'all_reduce',
        island_size: int = 2,
        broadcast_initial: bool = True,
        codec_block: int = 64,
        stochastic_rounding: bool = False,
        group: Optional[ProcessGroup] = None,
    ) -> None:
        """Builds the algorithm over `model` (collective: every worker, the same options); see the class docstring."""

class DiLoCo(_Algorithm):
    """DiLoCo: workers train alone for `interval` steps (H), then one outer-optimizer step on
    the averaged parameter change (the outer gradient).

    trickle.DiLoCo(model, **options); model as for trickle.SPARTA. The outer gradient travels
    through outer_codec, or through outer_sparsifier (its values through outer_codec). An
    outer learning-rate schedule multiplies outer_lr at outer step t by the schedule's
    fraction at t - 1 (outer::lr_scheduled). fragments / fragment_tensors / overlap_steps /
    mix / carry_local make it Streaming DiLoCo (docs/streaming.md). aggregate chooses how the outer step
    combines the contributions, a robust rule against outliers (docs/robustness.md); under
    every rule a worker whose outer gradient is not finite is left out of the round, named
    in `aggregation` on every worker. Options (keyword only):
      interval=500: H: an outer step after every H-th step
      outer='nesterov': outer optimizer: sgd | momentum | nesterov | adam | average
      outer_lr=None: the outer learning rate (None: the optimizer's default; sgd 1.0, momentum/nesterov 0.7, adam 1e-3)
      momentum=None: momentum / nesterov: the momentum (None: 0.9)
      betas=(0.9, 0.999): adam: (beta1, beta2)
      eps=1e-08: adam: epsilon
      outer_lr_schedule='constant': outer learning-rate schedule, a multiplier of outer_lr in (0, 1] at each outer step: constant | linear | cosine | piecewise (constant: none)
      outer_lr_end_fraction=0.1: linear / cosine lr schedule: the multiplier reached after outer_lr_schedule_steps
      outer_lr_schedule_steps=100: linear / cosine lr schedule: outer steps from 1 to outer_lr_end_fraction
      outer_lr_points=None: piecewise lr schedule: [(k, multiplier), ...], k = outer step - 1 (from 0), increasing
      outer_lr_warmup_steps=0: a linear ramp of the multiplier over this many outer steps (0: none)
      outer_lr_warmup_start_fraction=0.05: the multiplier the lr warm-up starts from
      weight=1.0: this worker's weight in the average (e.g. its shard size); set_weight() changes it later
      drop_probability=0.0: each worker's contribution to an outer step is dropped with this probability, in [0, 1)
      prune_fraction=0.0: zero this fraction of each tensor's outer gradient, smallest magnitudes first, in [0, 1)
      outer_codec='fp32': the outer gradient on the wire: fp32 | bf16 | fp16 | fp8_e4m3 | fp8_e5m2 | fp8_block | int8 | int4 | sign2 | native
      error_feedback=0.0: beta in [0, 1]: resend beta x the last outer gradient's compression error
      outer_sparsifier=None: None | chunk_topk | random_k: send only part of the outer gradient (values through outer_codec; needs topology='all_reduce')
      sparse_chunk=64: chunk_topk: values per chunk
      sparse_k=4: chunk_topk: values kept per chunk (largest magnitudes), 1 <= sparse_k <= sparse_chunk
      sparse_fraction=0.01: random_k: fraction of the values kept, in (0, 1] (shared positions, no index sent)
      fragments=1: Streaming DiLoCo: F fragments cut at tensor boundaries, their outer steps staggered over the round
      fragment_tensors=None: Streaming DiLoCo: tensors per fragment, in order (None: F fragments balanced by size)
      overlap_steps=0: Streaming DiLoCo: tau in [0, interval), the inner steps a fragment's exchange travels before its average is applied (with fragments=1: the whole outer step, delayed by tau; the eager outer step)
      mix=0.0: Streaming DiLoCo: alpha in [0, 1], a late average merged as alpha x local + (1 - alpha) x global
      carry_local=False: Streaming DiLoCo: a late average lands plus this worker's progress since its exchange began (no inner step lost, however large overlap_steps; needs overlap_steps > 0 and mix = 0)
      state_in_pinned_host=False: CUDA parameters: keep the snapshot and the outer optimizer's state in pinned host memory instead of on the GPU (large models)
      aggregate='mean': how the outer step combines the contributions: mean | trimmed:K | median | clip:TAU (robust rules need topology='all_reduce', outer_codec='fp32', no streaming; a non-finite worker is excluded under any)
      elastic=None: a trickle.Elastic instead of group: workers are processes that may die and join
      min_workers=1: with elastic: the quorum; with fewer workers in the view an exchange (an outer step) is skipped and the step trains locally
      seed=0: shared seed of the random choices (the same on every worker)
      topology='all_reduce': how values are combined: all_reduce | ring | gossip | exponential | islands
      island_size=2: islands topology: workers per island
      broadcast_initial=True: at construction, give every worker rank 0's parameters
      codec_block=64: values per scale of the block codecs (fp8_block, int8, int4, sign2)
      stochastic_rounding=False: round with the shared Philox stream instead of to nearest (int8, int4, sign2)
      group=None: the torch.distributed process group (None: the default group)

    Methods: step(), add_hook(fn, every=1), set_weight(w), state_dict(), load_state_dict(state).
    Properties: stats, group_stats, groups, options, group, rank, world_size, membership,
    aggregation, group_aggregation.
    """

    def __init__(
        self,
        model: Model,
        *,
        interval: int = 500,
        outer: OuterName = 'nesterov',
        outer_lr: Optional[float] = None,
        momentum: Optional[float] = None,
        betas: Tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-08,
        outer_lr_schedule: ScheduleName = 'constant',
        outer_lr_end_fraction: float = 0.1,
        outer_lr_schedule_steps: int = 100,
        outer_lr_points: Optional[Sequence[Tuple[int, float]]] = None,
        outer_lr_warmup_steps: int = 0,
        outer_lr_warmup_start_fraction: float = 0.05,
        weight: float = 1.0,
        drop_probability: float = 0.0,
        prune_fraction: float = 0.0,
        outer_codec: CodecName = 'fp32',
        error_feedback: float = 0.0,
        outer_sparsifier: Optional[SparsifierName] = None,
        sparse_chunk: int = 64,
        sparse_k: int = 4,
        sparse_fraction: float = 0.01,
        fragments: int = 1,
        fragment_tensors: Optional[Sequence[int]] = None,
        overlap_steps: int = 0,
        mix: float = 0.0,
        carry_local: bool = False,
        state_in_pinned_host: bool = False,
        aggregate: str = 'mean',
        elastic: Optional[Elastic] = None,
        min_workers: int = 1,
        seed: int = 0,
        topology: TopologyName = 'all_reduce',
        island_size: int = 2,
        broadcast_initial: bool = True,
        codec_block: int = 64,
        stochastic_rounding: bool = False,
        group: Optional[ProcessGroup] = None,
    ) -> None:
        """Builds the algorithm over `model` (collective: every worker, the same options); see the class docstring."""
    def set_weight(self, weight: float) -> None:
        """This worker's weight in the coming outer steps (finite, >= 0); local."""
    @property
    def aggregation(self) -> Aggregation:
        """How the outer steps combined the workers' contributions (the first parameter group's): rule, rounds, per-worker weights / norm / distance, the ranks clipped and excluded in the last round, the totals."""
    @property
    def group_aggregation(self) -> List[Aggregation]:
        """Each parameter group's Aggregation (the order of `groups`)."""

class SPARTADiLoCo(_Algorithm):
    """SPARTA inside DiLoCo's rounds: SPARTA every `sparta_interval` steps, an outer step
    every `interval` steps (at a step that ends a round, only the outer step runs). Takes
    SPARTA's and DiLoCo's options (interval is DiLoCo's H). stats is the sum of both parts;
    sparse_stats and outer_stats are each part's (the initial broadcast is on the DiLoCo
    part). Options (keyword only):
      fraction=0.005: base fraction of the parameters averaged per exchange, in (0, 1]
      interval=500: H: an outer step after every H-th step
      sampler='uniform': which positions: uniform | permutation | block | layerwise
      block_size=256: block sampler: values per aligned block
      layerwise_mode='per_tensor': layerwise sampler: per_tensor (every tensor its share) | rotating (contiguous windows)
      schedule='constant': fraction schedule: constant | linear | cosine | piecewise
      end_fraction=0.001: linear / cosine: the fraction reached after schedule_steps steps
      schedule_steps=1000: linear / cosine: steps from fraction to end_fraction
      points=None: piecewise: [(step, fraction), ...], steps strictly increasing
      warmup_steps=0: a linear ramp from warmup_start_fraction over this many steps (0: none)
      warmup_start_fraction=0.05: where the warm-up starts
      codec='fp32': SPARTA's values on the wire: fp32 | bf16 | fp16 | fp8_e4m3 | fp8_e5m2 | fp8_block | int8 | int4 | sign2 | native
      overlap=False: SPARTA: the exchange of step t travels during step t + 1 and is applied then, corrected for the local change (fp32 with the all_reduce topology travels on trickle's progress thread; CPU parameters)
      sparta_interval=1: the SPARTA part exchanges after every sparta_interval-th step
      outer='nesterov': outer optimizer: sgd | momentum | nesterov | adam | average
      outer_lr=None: the outer learning rate (None: the optimizer's default; sgd 1.0, momentum/nesterov 0.7, adam 1e-3)
      momentum=None: momentum / nesterov: the momentum (None: 0.9)
      betas=(0.9, 0.999): adam: (beta1, beta2)
      eps=1e-08: adam: epsilon
      outer_lr_schedule='constant': outer learning-rate schedule, a multiplier of outer_lr in (0, 1] at each outer step: constant | linear | cosine | piecewise (constant: none)
      outer_lr_end_fraction=0.1: linear / cosine lr schedule: the multiplier reached after outer_lr_schedule_steps
      outer_lr_schedule_steps=100: linear / cosine lr schedule: outer steps from 1 to outer_lr_end_fraction
      outer_lr_points=None: piecewise lr schedule: [(k, multiplier), ...], k = outer step - 1 (from 0), increasing
      outer_lr_warmup_steps=0: a linear ramp of the multiplier over this many outer steps (0: none)
      outer_lr_warmup_start_fraction=0.05: the multiplier the lr warm-up starts from
      weight=1.0: this worker's weight in the average (e.g. its shard size); set_weight() changes it later
      drop_probability=0.0: each worker's contribution to an outer step is dropped with this probability, in [0, 1)
      prune_fraction=0.0: zero this fraction of each tensor's outer gradient, smallest magnitudes first, in [0, 1)
      outer_codec='fp32': the outer gradient on the wire: fp32 | bf16 | fp16 | fp8_e4m3 | fp8_e5m2 | fp8_block | int8 | int4 | sign2 | native
      error_feedback=0.0: beta in [0, 1]: resend beta x the last outer gradient's compression error
      outer_sparsifier=None: None | chunk_topk | random_k: send only part of the outer gradient (values through outer_codec; needs topology='all_reduce')
      sparse_chunk=64: chunk_topk: values per chunk
      sparse_k=4: chunk_topk: values kept per chunk (largest magnitudes), 1 <= sparse_k <= sparse_chunk
      sparse_fraction=0.01: random_k: fraction of the values kept, in (0, 1] (shared positions, no index sent)
      fragments=1: Streaming DiLoCo: F fragments cut at tensor boundaries, their outer steps staggered over the round
      fragment_tensors=None: Streaming DiLoCo: tensors per fragment, in order (None: F fragments balanced by size)
      overlap_steps=0: Streaming DiLoCo: tau in [0, interval), the inner steps a fragment's exchange travels before its average is applied (with fragments=1: the whole outer step, delayed by tau; the eager outer step)
      mix=0.0: Streaming DiLoCo: alpha in [0, 1], a late average merged as alpha x local + (1 - alpha) x global
      carry_local=False: Streaming DiLoCo: a late average lands plus this worker's progress since its exchange began (no inner step lost, however large overlap_steps; needs overlap_steps > 0 and mix = 0)
      state_in_pinned_host=False: CUDA parameters: keep the snapshot and the outer optimizer's state in pinned host memory instead of on the GPU (large models)
      aggregate='mean': how the outer step combines the contributions: mean | trimmed:K | median | clip:TAU (robust rules need topology='all_reduce', outer_codec='fp32', no streaming; a non-finite worker is excluded under any)
      elastic=None: a trickle.Elastic instead of group: workers are processes that may die and join
      min_workers=1: with elastic: the quorum; with fewer workers in the view an exchange (an outer step) is skipped and the step trains locally
      seed=0: shared seed of the random choices (the same on every worker)
      topology='all_reduce': how values are combined: all_reduce | ring | gossip | exponential | islands
      island_size=2: islands topology: workers per island
      broadcast_initial=True: at construction, give every worker rank 0's parameters
      codec_block=64: values per scale of the block codecs (fp8_block, int8, int4, sign2)
      stochastic_rounding=False: round with the shared Philox stream instead of to nearest (int8, int4, sign2)
      group=None: the torch.distributed process group (None: the default group)

    Methods: step(), add_hook(fn, every=1), set_weight(w), state_dict(), load_state_dict(state).
    Properties: stats, sparse_stats, outer_stats, group_stats, sparse_group_stats,
    outer_group_stats, groups, options, group, rank, world_size, membership, aggregation,
    group_aggregation.
    """

    def __init__(
        self,
        model: Model,
        *,
        fraction: float = 0.005,
        interval: int = 500,
        sampler: SamplerName = 'uniform',
        block_size: int = 256,
        layerwise_mode: LayerwiseMode = 'per_tensor',
        schedule: ScheduleName = 'constant',
        end_fraction: float = 0.001,
        schedule_steps: int = 1000,
        points: Optional[Sequence[Tuple[int, float]]] = None,
        warmup_steps: int = 0,
        warmup_start_fraction: float = 0.05,
        codec: CodecName = 'fp32',
        overlap: bool = False,
        sparta_interval: int = 1,
        outer: OuterName = 'nesterov',
        outer_lr: Optional[float] = None,
        momentum: Optional[float] = None,
        betas: Tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-08,
        outer_lr_schedule: ScheduleName = 'constant',
        outer_lr_end_fraction: float = 0.1,
        outer_lr_schedule_steps: int = 100,
        outer_lr_points: Optional[Sequence[Tuple[int, float]]] = None,
        outer_lr_warmup_steps: int = 0,
        outer_lr_warmup_start_fraction: float = 0.05,
        weight: float = 1.0,
        drop_probability: float = 0.0,
        prune_fraction: float = 0.0,
        outer_codec: CodecName = 'fp32',
        error_feedback: float = 0.0,
        outer_sparsifier: Optional[SparsifierName] = None,
        sparse_chunk: int = 64,
        sparse_k: int = 4,
        sparse_fraction: float = 0.01,
        fragments: int = 1,
        fragment_tensors: Optional[Sequence[int]] = None,
        overlap_steps: int = 0,
        mix: float = 0.0,
        carry_local: bool = False,
        state_in_pinned_host: bool = False,
        aggregate: str = 'mean',
        elastic: Optional[Elastic] = None,
        min_workers: int = 1,
        seed: int = 0,
        topology: TopologyName = 'all_reduce',
        island_size: int = 2,
        broadcast_initial: bool = True,
        codec_block: int = 64,
        stochastic_rounding: bool = False,
        group: Optional[ProcessGroup] = None,
    ) -> None:
        """Builds the algorithm over `model` (collective: every worker, the same options); see the class docstring."""
    def set_weight(self, weight: float) -> None:
        """This worker's weight in the coming outer steps (finite, >= 0); local."""
    @property
    def aggregation(self) -> Aggregation:
        """How the outer steps combined the workers' contributions (the first parameter group's): rule, rounds, per-worker weights / norm / distance, the ranks clipped and excluded in the last round, the totals."""
    @property
    def group_aggregation(self) -> List[Aggregation]:
        """Each parameter group's Aggregation (the order of `groups`)."""
    @property
    def sparse_stats(self) -> Stats:
        """The SPARTA part's account, summed over the parameter groups."""
    @property
    def outer_stats(self) -> Stats:
        """The DiLoCo part's account (with the initial broadcast), summed over the parameter groups."""
    @property
    def sparse_group_stats(self) -> List[Stats]:
        """The SPARTA part's account of each parameter group."""
    @property
    def outer_group_stats(self) -> List[Stats]:
        """The DiLoCo part's account of each parameter group."""

class DDP(_Algorithm):
    """The dense baseline (trickle::ddp): after every `interval`-th step, every parameter is
    averaged over the workers, one fp32 sum of the whole model (deterministic: the same bits
    on every worker, run to run). With the face of the others (stats, hooks, state_dict, the
    initial broadcast, agreement), so that comparing a strategy with dense training changes
    one line. It averages parameters after the optimizer step, not gradients before it: with
    SGD the two are the same; with a stateful optimizer (Adam) each worker's moments follow
    its own gradients. CPU parameters (float32, float16, bfloat16). Options (keyword only):
      interval=1: average every parameter after every interval-th step (1: every step, as DDP's gradients)
      broadcast_initial=True: at construction, give every worker rank 0's parameters
      group=None: the torch.distributed process group (None: the default group)

    Methods: step(), add_hook(fn, every=1), state_dict(), load_state_dict(state).
    Properties: stats, group_stats, groups, options, group, rank, world_size.
    """

    def __init__(
        self,
        model: Model,
        *,
        interval: int = 1,
        broadcast_initial: bool = True,
        group: Optional[ProcessGroup] = None,
    ) -> None:
        """Builds the algorithm over `model` (collective: every worker, the same options); see the class docstring."""

SelectionName = Literal['top_k', 'shared']

class DeMo(torch.optim.Optimizer):
    """DeMo (Peng, Quesnelle, Kingma, 2024) over a torch.distributed group, as an optimizer.

        dist.init_process_group("gloo")
        opt = trickle.DeMo(model.parameters(), lr=3e-4, k=32, chunk=64)
        loss.backward(); opt.step(); opt.zero_grad()

    Per step and parameter: m <- compression_decay * m + grad; the k largest DCT-II
    coefficients of each chunk of m (1-D chunks of `chunk` values for vectors, chunk x chunk
    tiles for matrices, a tensor of more dimensions as dim 0 x the rest) leave m and are
    exchanged; p <- p - lr * (sign(mean of the decoded coefficients) + weight_decay * p).
    Replicas that start equal stay equal, bit for bit.

    Arguments (lr, compression_decay, weight_decay, chunk and k per parameter group too):
      lr=1e-3                 step size of the sign update (> 0); a scheduler may change it
      compression_decay=0.999 the momentum's decay beta, in [0, 1]
      weight_decay=0.0        decoupled weight decay (>= 0)
      chunk=64                chunk size s, in [1, 256]
      k=32                    coefficients sent per chunk, in [1, s * s] (vectors: min(k, s))
      selection="top_k"       "top_k": each worker's own largest (DeMo as published; indices
                              and values all-gathered), "shared": k per chunk chosen by the
                              shared seed (no indices; the values summed by an all-reduce)
      values="fp32"           the values' codec (trickle.CODECS: "bf16", "sign2", ...)
      codec_block=32          values per scale, for the block codecs
      seed=0                  the shared seed (selection="shared")
      broadcast_initial=True  at construction (and add_param_group), give every worker the
                              group's rank 0's parameters: DeMo keeps equal replicas equal
      group=None              the process group (None: the default group)

    Collective: construction, step(), add_param_group() and load_state_dict() run on every
    worker with the same arguments; parameters are contiguous CPU float32 tensors. Options
    that workers disagree on raise trickle.MismatchError on every worker. Only lr may change
    after construction (the same on every worker). state_dict() holds each group's momentum
    and step count; loading it resumes bit for bit.
    """

    def __init__(
        self,
        params: Any,
        lr: float = 1e-3,
        *,
        compression_decay: float = 0.999,
        weight_decay: float = 0.0,
        chunk: int = 64,
        k: int = 32,
        selection: SelectionName = "top_k",
        values: CodecName = "fp32",
        codec_block: int = 32,
        seed: int = 0,
        broadcast_initial: bool = True,
        group: Optional[ProcessGroup] = None,
    ) -> None:
        """Builds the optimizer (collective: every worker, the same arguments); see the class docstring."""
    def add_param_group(self, param_group: Dict[str, Any]) -> None:
        """Adds a parameter group and builds its engine (collective: every worker, alike)."""
    def step(self, closure: Optional[Callable[[], Any]] = None) -> Any:
        """Collective: one DeMo step of every parameter group (after backward())."""
    def group_stats(self) -> List[Stats]:
        """Each parameter group's traffic account (this worker's)."""
    @property
    def stats(self) -> Stats:
        """This worker's traffic account over every parameter group."""
    def momentum(self, group: int = 0) -> torch.Tensor:
        """Group `group`'s momentum on this worker, in the frequency domain."""
    def state_dict(self) -> Dict[str, Any]:
        """torch.optim's state dict, plus each group's DeMo state under 'trickle_demo'."""
    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
        """Collective: restores what state_dict() returned, on every worker at once."""

__all__ = [
    "SPARTA",
    "DiLoCo",
    "SPARTADiLoCo",
    "DDP",
    "DeMo",
    "Stats",
    "Aggregation",
    "HookHandle",
    "MismatchError",
    "CommError",
    "Elastic",
    "connect_store",
    "SAMPLERS",
    "SCHEDULES",
    "TOPOLOGIES",
    "CODECS",
    "OUTER_OPTIMIZERS",
    "SPARSIFIERS",
    "STATE_FORMAT",
    "build_info",
]
