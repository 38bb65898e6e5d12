"""The NPU as a serving backend: replicas of pipeline stages and what an iteration costs.

A *replica* is one pipeline (``stages`` TP groups) holding the whole model; PD fusion
uses ``dp`` replicas over the chip, PD disaggregation a set of prefill replicas on the
sides of the mesh and decode replicas in the centre (NpuSim Fig. 6).  The engine asks a
replica for the segments of an iteration (one per stage plus the LM head) and times
them through the session; it never sees the task graphs.
"""

from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass, field
from types import SimpleNamespace

from npusim.core import registry
from npusim.core.errors import MappingError, with_source
from npusim.core.text import counted
from npusim.mapping.taskgraph import TaskGraph
from npusim.serving.config import layers_field
from npusim.serving.core_variants import specialise_cores
from npusim.serving.interpolation import decode_corners, token_corners
from npusim.serving.state import Entry
from npusim.strategies.npu.llm_mapping import split_layers, stage_layers
from npusim.strategies.npu.stage_builder import StageBuilder, hand_off, plan_key
from npusim.strategies.npu.heads import busiest_kv_heads, kv_bytes_on_core
from npusim.strategies.npu.llm_memory import StagePlan, plan_stages
from npusim.strategies.npu.partition import get_partition
from npusim.strategies.npu.placement import Group
from npusim.workload.layer_ops import SequenceChunk
from npusim.workload.llm import layer_counts_problem, pool_stages
from npusim.workload.program import BlendedSegment, ChainedSegment, LazySegment


@dataclass
class Replica:
    """One pipeline: its stage groups, memory plans and graph builder."""

    index: int
    role: str                      # "fused", "prefill" or "decode"
    groups: list[Group]
    plans: list[StagePlan]
    builder: StageBuilder
    model: object
    #: Interned memo keys (plan keys, batch shapes, part signatures -> small ints), shared
    #: by the replicas of one simulation: the memo hashes an int instead of a nested
    #: tuple on each of the hundreds of thousands of lookups of a serving run.
    key_ids: dict = field(default_factory=dict)
    #: Most sequences one decode iteration takes (the scheduler's ``decode_slots``):
    #: the top of the decode interpolation grid.
    max_decode_count: int | None = None
    #: Segments per batch shape (and granularity): iterations repeat shapes thousands
    #: of times, and the segment objects depend on nothing else.
    _segments: dict = field(default_factory=dict, repr=False)
    _stage_lists: dict = field(default_factory=dict, repr=False)

    @property
    def cores(self) -> tuple[int, ...]:
        return tuple(core for group in self.groups for core in group.cores)

    @functools.cached_property
    def plan_keys(self) -> list[tuple]:
        """:func:`plan_key` of every stage (asked for every stage of every iteration)."""
        return [self.intern(plan_key(self.model, plan)) for plan in self.plans]

    @functools.cached_property
    def hand_offs(self) -> list[tuple[int, tuple[int, ...]]]:
        """:func:`hand_off` into every stage (lead cores, hop distances)."""
        return [hand_off(self.builder.device, self.groups[index - 1] if index else None, group)
                for index, group in enumerate(self.groups)]

    def intern(self, key: tuple) -> int:
        """A small int standing for ``key`` (equal keys, equal ints, in this simulation)."""
        return self.key_ids.setdefault(key, len(self.key_ids))

    @property
    def name(self) -> str:
        """``decode0``, ``fused1``, ...: how metrics and tables name this replica."""
        return f"{self.role}{self.index}"

    @property
    def kv_capacity_tokens(self) -> int:
        """KV tokens every stage can hold (the smallest stage decides)."""
        return min(plan.kv_capacity_tokens for plan in self.plans)

    def segments(self, entries: list[Entry], bucket: int, granularity: str = "stage",
                 grid: int | None = None, token_grid: int | None = None
                 ) -> list[tuple[int, str, object]]:
        """``(pipeline position, label, segment)`` for every stage, then the LM head if
        a token is sampled (position ``stages``).  With ``granularity="part"`` a stage
        is a :class:`ChainedSegment` of its parts (cut at attention blocks, see
        :meth:`StageBuilder.stage_parts`), which batches of the same token count share.

        With ``grid`` (points per octave), the stages of a decode-only batch are
        :class:`BlendedSegment` s of the grid shapes around it
        (:mod:`npusim.serving.interpolation`), unless it is on the grid; its LM head is
        exact.  Other batches have their contexts rounded up to ``bucket`` tokens.
        With ``token_grid`` (points per octave) and parts, a dense part off the token
        grid is the :class:`BlendedSegment` of the dense parts at the grid token counts
        around it (:func:`token_corners`).  Equal batch shapes get the same segment
        objects: a repeated shape costs a lookup.
        """
        if granularity != "part":
            token_grid = None  # dense parts exist only when stages are cut
        corners = None
        if grid is not None and all(e.is_decode for e in entries):
            count, total = len(entries), sum(e.context_len for e in entries)
            corners = decode_corners(count, total, bucket, grid, self.max_decode_count)
        if corners is None:
            chunks = _bucketed(entries, bucket)
            cache_key: tuple = (granularity, token_grid, _shape_key(chunks))
        else:
            # Decode-only: the shape is (no prefills, count, total); the evenly spread
            # chunks are made only when a segment has to be built.
            chunks = None
            if len(corners[0]) == 1:  # on the grid: the grid shape itself
                corners = None
                cache_key = (granularity, token_grid, ((), count, total))
            else:
                cache_key = (granularity, token_grid, "blend", grid, count, total)
        cached = self._segments.get(cache_key)
        if cached is not None:
            return cached
        if chunks is None:
            chunks = _spread(count, total)
        stages = self._blended(*corners, granularity, token_grid) if corners else None
        out = ((stages or self._stage_segments(chunks, granularity, token_grid))
               + self._lm_head(chunks))
        self._segments[cache_key] = out
        return out

    def _stage_segments(self, chunks: tuple[SequenceChunk, ...] | tuple[int, int],
                        granularity: str, token_grid: int | None = None
                        ) -> list[tuple[int, str, LazySegment | ChainedSegment]]:
        """The stage (or part) segments of a batch of ``chunks`` (cached per shape), or
        of ``(count, total)`` decode sequences spread evenly; with parts and a
        ``token_grid`` (points per octave), dense parts off that grid are blends."""
        if chunks and type(chunks[0]) is int:  # (count, total): spread only on a miss
            shape_key: tuple = ((), *chunks)
            chunks = None
        else:
            shape_key = _shape_key(chunks)
        shape = self.intern(shape_key)
        cached = self._stage_lists.get((granularity, token_grid, shape))
        if cached is not None:
            return cached
        if chunks is None:
            chunks = _spread(*shape_key[1:])
        out = []
        for index, (group, plan) in enumerate(zip(self.groups, self.plans)):
            previous = self.groups[index - 1] if index else None
            label = f"r{self.index}.stage{index}"
            if granularity == "stage":
                cores = (previous.cores if previous else ()) + group.cores
                lead, hops = self.hand_offs[index]
                out.append((index, label, LazySegment(
                    ("serve-stage", self.role, previous is None, self.plan_keys[index], shape,
                     hops), cores,
                    functools.partial(self.builder.stage, group, previous, plan, chunks, label),
                    label, exact_key=True, lead_cores=lead)))
                continue
            cut = self.builder.stage_parts(plan, chunks, previous is None, self.plan_keys[index])
            grid_cuts = self._token_grid_cuts(chunks, index, token_grid, cut) if token_grid else None
            parts: list[LazySegment | BlendedSegment] = []
            for number, (key, part) in enumerate(cut):
                segment: LazySegment | BlendedSegment = self._part(index, number, key, part)
                if grid_cuts and not key[1]:  # a dense part, off the token grid
                    weights, denominator = grid_cuts
                    corners = tuple((weight, self._part(index, number, *grid_cut[number]))
                                    for weight, grid_cut in weights)
                    segment = BlendedSegment(
                        self.intern(("dense-blend", label, number, denominator,
                                     tuple((weight, c.key) for weight, c in corners))),
                        corners, denominator, segment.name)
                parts.append(segment)
            # The label fixes the cores, the part keys the shapes.
            chain_key = self.intern(("chain", label, tuple(segment.key for segment in parts)))
            out.append((index, label, ChainedSegment(chain_key, tuple(parts), label)))
        self._stage_lists[(granularity, token_grid, shape)] = out
        return out

    def _part(self, index: int, number: int, key: tuple, part: tuple) -> LazySegment:
        """Part ``number`` (from :meth:`StageBuilder.stage_parts`) of stage ``index``; the
        first part receives the activations from the previous stage's cores."""
        group, plan = self.groups[index], self.plans[index]
        previous = self.groups[index - 1] if index and number == 0 else None
        name = f"r{self.index}.stage{index}.part{number}"
        return LazySegment((self.role, key), (previous.cores if previous else ()) + group.cores,
                           functools.partial(self.builder.build_part, group, previous, plan,
                                             part, name), name, exact_key=True, prefetch=True)

    def _token_grid_cuts(self, chunks: tuple[SequenceChunk, ...], index: int, points: int,
                         cut: list[tuple[tuple, tuple]]
                         ) -> tuple[list[tuple[int, list[tuple[tuple, tuple]]]], int] | None:
        """The stage cut into parts for one prefill of each grid token count around the
        batch's, with their weights, or ``None`` if the batch is on the grid or the cuts
        do not line up (a dense part's work depends only on the token count, so the
        grid batches' dense parts stand for the batch's)."""
        corners = token_corners(sum(c.new_tokens for c in chunks), points)
        if corners is None:
            return None
        weights, denominator = corners
        cuts = [(weight, self.builder.stage_parts(self.plans[index], (SequenceChunk(tokens, 0, False),),
                                                  index == 0, self.plan_keys[index]))
                for weight, tokens in weights]
        if any([key[1] for key, _ in grid_cut] != [key[1] for key, _ in cut] for _, grid_cut in cuts):
            return None
        return cuts, denominator

    def _blended(self, corners: list[tuple[int, int, int]], denominator: int, granularity: str,
                 token_grid: int | None = None) -> list[tuple[int, str, BlendedSegment]] | None:
        """Each stage as the blend of its segments at the ``corners`` shapes, or ``None``
        if the corner shapes do not cut into the same segments."""
        lists = [(weight, self._stage_segments((count, total), granularity, token_grid))
                 for weight, count, total in corners]
        first = lists[0][1]
        if any([(p, label) for p, label, _ in segments] != [(p, label) for p, label, _ in first]
               for _, segments in lists):
            return None
        out = []
        for i, (position, label, _) in enumerate(first):
            parts = tuple((weight, segments[i][2]) for weight, segments in lists)
            key = self.intern(("blend", self.index, label, denominator,
                               tuple((weight, part.key) for weight, part in parts)))
            out.append((position, label, BlendedSegment(key, parts, denominator, label)))
        return out

    def _lm_head(self, chunks: tuple[SequenceChunk, ...]) -> list[tuple[int, str, LazySegment]]:
        """The LM head segment if the batch samples a token (position ``stages``)."""
        if not any(c.sample for c in chunks):
            return []
        cores = self.groups[-1].cores + self.cores
        everyone = Group(self.cores)
        label = f"r{self.index}.lm_head"
        return [(len(self.groups), label, LazySegment(
            # The graph depends on the sampled rows only (one per sampling sequence).
            ("serve-lm_head", self.role, self.plans[-1].lm_head_in_sram,
             sum(c.sample for c in chunks)), cores,
            functools.partial(self.builder.lm_head, self.groups[-1], everyone,
                              self.plans[-1], chunks), label, exact_key=True))]


def _spread(count: int, total: int) -> tuple[SequenceChunk, ...]:
    """``count`` decode sequences reading ``total`` keys, spread evenly (merged decode
    attention only sees the count and the total)."""
    base, extra = divmod(total, count)
    return tuple(SequenceChunk(1, base + (1 if i >= count - extra else 0), True)
                 for i in range(count))


def _bucketed(entries: list[Entry], bucket: int) -> tuple[SequenceChunk, ...]:
    """Chunks in a canonical order (prefills by size, then decodes) with contexts
    rounded up to ``bucket`` tokens: iterations that differ only inside a bucket share
    one timed segment.  A prefill chunk's own tokens are exact: they set its GEMMs' row
    count, which rounding would inflate (until 2026-11-27 they were rounded up to half a
    bucket, timing a 100-token prompt as 128 tokens)."""
    def ctx(value: int) -> int:
        return -(-value // bucket) * bucket

    # A recomputed prefix is timed as part of the chunk: its tokens run again, causally,
    # after the context that was kept (none for chunk_kv: recompute).
    prefills = sorted((e.new_tokens + e.recomputed_tokens,
                       ctx(e.context_len - e.recomputed_tokens), e.samples)
                      for e in entries if not e.is_decode)
    decodes = [e.context_len for e in entries if e.is_decode]
    # Decode attention is merged (keys summed), so only the count and the total matter;
    # the total is rounded up to 1/16 of its power of two (at most +6.25% of decode
    # attention work, never less), then spread evenly over the sequences.
    count, total = len(decodes), sum(decodes)
    if count:
        step = max(bucket, 1 << max(0, total.bit_length() - 5))
        total = -(-total // step) * step
    return (tuple(SequenceChunk(n, c, s) for n, c, s in prefills)
            + (_spread(count, total) if count else ()))


def _shape_key(chunks: tuple[SequenceChunk, ...]) -> tuple:
    def is_decode(c: SequenceChunk) -> bool:  # as Entry.is_decode: a one-token chunk
        # that samples nothing (a prompt's middle chunk) has no LM head row
        return c.new_tokens == 1 and c.context_len > 0 and c.sample
    prefills = tuple((c.new_tokens, c.context_len, c.sample) for c in chunks if not is_decode(c))
    decodes = [c.context_len for c in chunks if is_decode(c)]
    # Decode attention is merged (keys summed), so only the count and the total matter.
    return prefills, len(decodes), sum(decodes)


def build_replicas(device, config, model, max_request_tokens: int) -> list[Replica]:
    """Cut the chip into replicas as ``config.pd`` says; plan each one's memory."""
    noc = device.config.noc
    width, height, total = noc.width, noc.height, device.num_cores
    pd = config.pd
    place = registry.lookup("placement", config.placement.kind).impl
    layers = model.num_hidden_layers
    problem = pd.chip_problem(total)  # (a scenario was checked when read: a backstop)
    if problem:
        raise MappingError("{}: {}".format(*problem))
    roles = pd.pools(total)
    for pool in roles:  # before any replica is built (or fails to fit)
        role, cores, tp, dp = pool
        cores_field = pool.cores_field
        if cores // tp // dp > layers and (role != "fused" or pd.cores is not None):
            # A stage holds at least one layer: asked-for cores beyond that would idle.
            # (Fusion's default, the whole chip, uses what the layers can fill.)
            raise MappingError(
                f"workload.pd.{cores_field} = {cores}: {counted(dp, 'pipeline')} of TP {tp} "
                f"groups make {counted(cores // tp // dp, 'stage')} each, but {model.name} has {layers} layers (one "
                f"or more per stage), so {cores - layers * tp * dp} cores would sit idle; "
                f"expected at most {layers * tp * dp} cores, or a larger TP or DP")
        counts = getattr(pd, layers_field(role))
        if counts is not None:  # (the config checked the pools whose cores it gives)
            stages = pool_stages(cores, tp, dp, layers)
            capped = ", at most one stage per layer" if stages < cores // tp // dp else ""
            problem = layer_counts_problem(
                counts, layers, model.name, stages,
                f"{cores} {'' if role == 'fused' else role + ' '}cores / (tp {tp} x dp {dp})"
                f"{capped}")
            if problem:
                raise MappingError(f"workload.pd.{layers_field(role)}: {counts} {problem}")
    replicas: list[Replica] = []
    key_ids: dict = {}
    taken: set[int] = set()
    # Decode pools are placed first, so they get the centre of the mesh (Fig. 6).
    for pool in sorted(roles, key=lambda r: r[0] != "decode"):
        role, cores, tp, dp = pool
        if cores < tp * dp:
            raise MappingError(f"workload.pd: {role} needs at least tp x dp = {tp * dp} cores, got {cores}")
        groups_total = total // tp
        try:
            layout = place(width, height, tp, groups_total, config=config.placement)
        except MappingError as exc:  # say which setting asked for it
            field = "tp" if (pd.mode == "fusion" or not getattr(pd, f"{role}_tp", None)) else f"{role}_tp"
            raise MappingError(f"workload.pd.{field} = {tp} with workload.placement: "
                               f"{config.placement.kind}: {exc}") from None
        stages = pool_stages(cores, tp, dp, layers)
        if stages < 1:
            raise MappingError(f"workload.pd: {cores} {role} cores make no TP group of {tp}")
        candidates = [g for g in layout if not taken.intersection(g.cores)]
        if len(candidates) < stages * dp and taken:
            # A pool with another TP than the first one's: its groups on the whole chip
            # straddle the taken cores, so lay them out on the free cores instead.  Only
            # linear placements gain (their lines skip taken cores); block placements
            # find the same whole blocks.  Not done always: it would move the groups of
            # pools that line up today.
            free = [core for core in range(total) if core not in taken]
            try:
                layout = place(width, height, tp, len(free) // tp, config=config.placement,
                               cores=free)
            except MappingError:
                pass  # not even on the free cores: the error below says how many fit
            else:
                candidates = list(layout)
        # Decode takes the groups nearest the mesh centre, prefill the sides (Fig. 6).  A
        # fused pool on part of the chip takes the first groups along the placement's own
        # path, so pipeline neighbours stay adjacent (the sides would scatter its stages
        # over the corners, 6-10 hops apart).
        if role != "fused":
            cx, cy = (width - 1) / 2, (height - 1) / 2
            candidates.sort(key=lambda g: sum(abs(c % width - cx) + abs(c // width - cy)
                                              for c in g.cores) / len(g.cores))
            if role == "prefill":
                candidates.reverse()
        chosen = candidates[:stages * dp]
        if len(chosen) < stages * dp:
            raise MappingError(f"workload.pd: cannot place {stages * dp} {role} groups of {tp} "
                               f"cores on the cores left ({len(candidates)} groups free)")
        # Keep pipeline neighbours adjacent: order the chosen groups as the placement did.
        order = {g.cores: i for i, g in enumerate(layout)}
        chosen.sort(key=lambda g: order[g.cores])
        for g in chosen:
            taken.update(g.cores)
        if role == "decode" and pd.decode_core is not None:
            specialise_cores(device, tuple(c for g in chosen for c in g.cores), pd.decode_core)
        for r in range(dp):
            try:
                replicas.append(_replica(device, config, model, role, len(replicas),
                                         chosen[r * stages:(r + 1) * stages], tp,
                                         max_request_tokens, key_ids))
            except MappingError as exc:  # a core's memory plan: say whose core it is
                split = (getattr(pd, layers_field(role))
                         or [len(r) for r in split_layers(layers, stages)])
                given = role != "fused" or pd.cores is not None  # else fusion's default
                cores_are = (f"workload.pd.{pool.cores_field} = {cores}" if given
                             else f"the chip's {cores} cores")
                # (the error keeps its type: an out-of-memory error keeps its byte counts)
                raise with_source(exc, f"the {role} pool ({cores_are}: "
                                       f"{counted(dp, 'pipeline')} of "
                                       f"{counted(stages, 'stage')} at TP {tp}, layers per stage "
                                       f"{_runs(split)})") from None
    return replicas


def _runs(counts) -> str:
    """``[9, 9, 9, 9]`` as ``9 x 4``, ``[6, 5, 5]`` as ``6, 5 x 2``: a list said briefly."""
    runs = [(value, len(list(group))) for value, group in itertools.groupby(counts)]
    return ", ".join(f"{value} x {size}" if size > 1 else f"{value}" for value, size in runs)


def _replica(device, config, model, role: str, index: int, groups: list[Group], tp: int,
             max_request_tokens: int, key_ids: dict) -> Replica:
    scheduler = config.scheduler_for(role)
    iteration_tokens = scheduler.iteration_tokens
    setting = ("workload.scheduler.max_batch_tokens (token_budget with chunked_prefill "
               "unless prefill_chunk_units is set, plus a request's tokens with chunk_kv: "
               "recompute)")
    if role == "decode":
        # A decode pool never prefills (a recompute victim prefills again on the prefill
        # pool; a swapped one brings its KV back): one token per running request, so its
        # activation buffers need hold only that many, not the prefill pool's chunks.
        if scheduler.decode_slots <= iteration_tokens:  # else the token budget binds
            iteration_tokens = scheduler.decode_slots
            limit = next(name for name in ("max_batch_size", "max_batch_tokens", "token_budget")
                         if getattr(scheduler, name, None) == scheduler.decode_slots)
            owner = ("workload.pd.decode_scheduler" if limit in (config.pd.decode_scheduler or {})
                     else "workload.scheduler")
            setting = f"{owner}.{limit} (a decode pool's iteration: one token per request)"
    elif getattr(scheduler, "chunk_kv", "keep") == "recompute":
        # A chunk runs its prompt prefix again, beyond the budget's new tokens: up to a
        # whole request's tokens more activations in one iteration.
        iteration_tokens += max_request_tokens
    shim = SimpleNamespace(
        dtype_bytes=config.dtype_bytes, kv_dtype_bytes=config.kv_dtype_bytes, tp=tp,
        prefill_chunk=iteration_tokens, prompt_len=iteration_tokens,
        iteration_tokens_setting=setting,
        tp_setting="workload.pd." + ("tp" if role == "fused" or not getattr(config.pd, f"{role}_tp", None)
                                     else f"{role}_tp"),
        # Plan for the smallest useful KV (one token); requests that can never fit are
        # rejected one by one by the engine, with the reason.
        batch=1, total_len=1, weight_tile_bytes=config.weight_tile_bytes,
        stream_chunk_bytes=config.stream_chunk_bytes, partition=config.partition,
        sram_buffers=config.sram_buffers)
    everyone = Group(tuple(core for group in groups for core in group.cores))
    ranges = stage_layers(model.num_hidden_layers, len(groups),
                          getattr(config.pd, layers_field(role)), f"workload.pd.{layers_field(role)}",
                          "its pool's stages")  # (build_replicas checked the list)
    sram = device.config.core.sram.capacity_bytes
    kv_dtype = config.kv_dtype_bytes or config.dtype_bytes
    per_token = kv_bytes_on_core(2 * model.kv_size * kv_dtype * max(len(r) for r in ranges),
                                 busiest_kv_heads(model, tp), model.num_key_value_heads)
    kv_sram_tokens = int(config.kv_sram_fraction * sram / max(per_token, 1))
    plans = plan_stages(device, model, shim, ranges, groups, everyone, kv_sram_tokens=kv_sram_tokens)
    builder = StageBuilder(device, model, shim, get_partition(config.partition), device.config.noc.width,
                       kv_dtype, merge_decode=True, key_ids=key_ids)
    return Replica(index, role, groups, plans, builder, model, key_ids,
                   max_decode_count=scheduler.decode_slots)


def kv_transfer_graph(source: Replica, target: Replica, tokens: int, kv_bytes_per_token_layer: int
                      ) -> TaskGraph:
    """KV of ``tokens`` tokens from the prefill replica's stage cores to the decode
    replica's cores owning the same layers (each core its 1/tp slice, over the NoC).

    The KV crosses the NoC once: KV heads that several decode cores read (a TP above
    the KV heads, :mod:`~npusim.strategies.npu.heads`) are not sent once per reader,
    an approximation that under-counts such transfers by at most that replication."""
    graph = TaskGraph(name="kv_transfer")
    owner = {}
    for group, plan in zip(target.groups, target.plans):
        for layer in plan.layers:
            owner[layer] = group
    for group, plan in zip(source.groups, source.plans):
        for layer in plan.layers:
            dst = owner[layer]
            size = tokens * kv_bytes_per_token_layer
            share = -(-size // len(group.cores))
            for i, core in enumerate(group.cores):
                to = dst.cores[i % len(dst.cores)]
                graph.transfer(f"core{core}.sram", f"core{to}.sram", share, (),
                               f"kv L{layer} core{core}->core{to}")
    return graph


def kv_swap_graph(replica: Replica, tokens: int, kv_bytes_per_token_layer: int, host: str,
                  out: bool) -> TaskGraph:
    """KV of ``tokens`` tokens between the replica's stage cores and host memory (swap
    preemption): each core moves its 1/tp slice of its stage's layers, ``out`` to the
    host, else back.  The KV is read from (written to) the core's HBM, where the
    per-request ring buffer keeps it, or its SRAM on a chip without HBM."""
    graph = TaskGraph(name="kv_swap_out" if out else "kv_swap_in")
    level = "hbm" if replica.builder.has_hbm else "sram"
    for group, plan in zip(replica.groups, replica.plans):
        size = tokens * kv_bytes_per_token_layer * len(plan.layers)
        share = -(-size // len(group.cores))
        for core in group.cores:
            memory = f"core{core}.{level}"
            src, dst = (memory, host) if out else (host, memory)
            graph.transfer(src, dst, share, (), f"kv swap {'out' if out else 'in'} core{core}",
                           chunk_bytes=replica.builder.config.stream_chunk_bytes)
    return graph

