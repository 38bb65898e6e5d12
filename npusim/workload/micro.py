"""Micro-benchmark workloads: a partitioned GEMM and an explicit task graph.

These exercise every part (HBM DMA, SRAM, systolic array, vector unit, NoC collectives)
without an LLM, so they serve as the quickstart scenario and as a way for users to time
hand-written graphs.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Annotated, Any, Literal, Union

from pydantic import ConfigDict, Field, ValidatorFunctionWrapHandler, WrapValidator, model_validator

from npusim.core.errors import MappingError
from npusim.core.registry import IntNotBool, NumbersNotBooleans, PartConfig, register
from npusim.core.units import Bytes, TimePs, format_bytes
from npusim.mapping.taskgraph import Op, TaskGraph
from npusim.workload.program import Program


class GemmWorkloadConfig(PartConfig):
    """``C[m,n] = A[m,k] @ W[k,n]`` split by columns of ``W`` over cores (1-D N partition).

    Each core streams its weight slice from its HBM into SRAM in tiles of ``tile_n``
    columns (double-buffered: tile ``j`` reuses the buffer of tile ``j-2``), multiplies
    on its systolic array, applies an element-wise epilogue on the vector unit, and the
    output slices are all-gathered over the NoC in ring order.
    """

    kind: Literal["gemm"] = "gemm"
    m: int = Field(gt=0, description="Rows of the activation (tokens).")
    k: int = Field(gt=0, description="Reduction dimension (hidden size).")
    n: int = Field(gt=0, description="Output columns (split across cores).")
    dtype_bytes: int = Field(2, ge=1, le=8, description="Bytes per element (2 = FP16/BF16).")
    cores: list[IntNotBool] = Field([0, 1, 2, 3], min_length=1,
                                    description="Core ids, in ring order.")
    tile_n: int = Field(256, gt=0, description="Weight columns per streamed tile.")
    weights_in: Literal["hbm", "sram"] = Field(
        "hbm", description="Where weights live: streamed from HBM, or resident in SRAM.")
    gather: bool = Field(True, description="All-gather the output slices over the NoC.")
    repeat: int = Field(1, ge=1, le=1_000_000, description="Identical segments to run back "
                                                          "to back (like layers); repeats are "
                                                          "memoised. At most 10^6.")

    @model_validator(mode="after")
    def _check(self) -> "GemmWorkloadConfig":
        if len(set(self.cores)) != len(self.cores):
            raise ValueError(f"cores lists a core twice: {self.cores}")
        if self.n < len(self.cores):
            raise ValueError(f"n={self.n} is smaller than the {len(self.cores)} cores it is split over")
        return self


@register("workload", GemmWorkloadConfig)
def lower_gemm(device, config: GemmWorkloadConfig, seed: int = 0) -> Program:
    """One GEMM split by columns of W over the cores (1-D N partition)."""
    num_cores = getattr(device, "num_cores", None)
    for core in config.cores:
        if num_cores is not None and not 0 <= core < num_cores:
            raise MappingError(f"workload.cores: core {core} does not exist "
                               f"(the device has cores 0..{num_cores - 1})")
    if config.weights_in == "hbm" and getattr(device.config, "hbm", False) is None:
        raise MappingError("workload.weights_in = hbm streams the weights from each core's "
                           "HBM, but the device has none (hw.hbm is not set); expected "
                           "weights_in: sram on an SRAM-only chip, or an hbm section (hw.hbm)")
    parts = len(config.cores)
    sram = getattr(getattr(getattr(device.config, "core", None), "sram", None), "capacity_bytes", None)
    resident = config.k * -(-config.n // parts) * config.dtype_bytes  # the widest core's slice
    if config.weights_in == "sram" and sram is not None and resident > sram:
        raise MappingError(f"workload.weights_in: sram, but each core's weight slice is "
                           f"{format_bytes(resident)} (k x n / {parts} cores x {config.dtype_bytes} B) "
                           f"and a core has {format_bytes(sram)} of SRAM; use weights_in: hbm, "
                           "more cores, or more SRAM (hw.core.sram.capacity_bytes)")
    widest_tile = min(config.tile_n, -(-config.n // parts))
    buffered = 2 * config.k * widest_tile * config.dtype_bytes  # double-buffered weight tiles
    if config.weights_in == "hbm" and sram is not None and buffered > sram:
        raise MappingError(f"workload.tile_n = {config.tile_n}: two weight tiles of k x "
                           f"{widest_tile} columns x {config.dtype_bytes} B = "
                           f"{format_bytes(buffered)} are double-buffered in SRAM, and a core "
                           f"has {format_bytes(sram)}; expected tile_n at most "
                           f"{max(1, sram // (2 * config.k * config.dtype_bytes))} (or more "
                           "hw.core.sram.capacity_bytes)")
    graph = TaskGraph(name="gemm")
    outputs = []
    for rank, core in enumerate(config.cores):
        cols = config.n // parts + (1 if rank < config.n % parts else 0)
        done: list[int] = []
        loads: list[int] = []
        for start in range(0, cols, config.tile_n):
            width = min(config.tile_n, cols - start)
            deps = []
            if config.weights_in == "hbm":
                buffer_free = [done[-2]] if len(done) >= 2 else []
                load = graph.transfer(f"core{core}.hbm", f"core{core}.sram",
                                      config.k * width * config.dtype_bytes, buffer_free,
                                      f"load W[:, {start}:{start + width}] @core{core}")
                loads.append(load)
                deps.append(load)
            op = Op("gemm", m=config.m, k=config.k, n=width, dtype_bytes=config.dtype_bytes,
                    name="gemm")
            done.append(graph.compute(f"core{core}.sa", op, deps + done[-1:],
                                      f"gemm tile {start // config.tile_n} @core{core}"))
        epilogue = Op("elementwise", elements=config.m * cols, dtype_bytes=config.dtype_bytes,
                      name="epilogue")
        outputs.append(graph.compute(f"core{core}.vec", epilogue, done[-1:], f"epilogue @core{core}"))
    if config.gather and parts > 1:
        graph.collective("allgather", [f"core{c}" for c in config.cores],
                         config.m * config.n * config.dtype_bytes, outputs, "allgather C")
    program = Program(info={"flops": 2 * config.m * config.k * config.n * config.repeat})
    for index in range(config.repeat):
        program.append(graph, f"gemm[{index}]")
    return program


class _TaskSpec(NumbersNotBooleans):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field("", description="Unique name other tasks refer to in 'after'.")
    after: list[str] = Field(default_factory=list, description="Names of tasks this one waits for.")


class OpSpec(NumbersNotBooleans):
    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["gemm", "elementwise", "softmax", "reduce"] = Field(description="Operation kind.")
    m: int = Field(1, ge=1, description="GEMM rows.")
    k: int = Field(1, ge=1, description="GEMM reduction dimension.")
    n: int = Field(1, ge=1, description="GEMM columns.")
    batch: int = Field(1, ge=1, description="Independent GEMMs of this shape.")
    elements: int = Field(0, ge=0, description="Elements for non-GEMM ops.")
    dtype_bytes: int = Field(2, ge=1, le=8, description="Bytes per element.")


class ComputeSpec(_TaskSpec):
    type: Literal["compute"] = "compute"
    unit: str = Field(description="Compute unit, e.g. core0.sa.")
    op: OpSpec = Field(description="The operation and its shape.")


class TransferSpec(_TaskSpec):
    type: Literal["transfer"] = "transfer"
    src: str = Field(description="Source endpoint, e.g. core0.hbm.")
    dst: str = Field(description="Destination endpoint, e.g. core0.sram.")
    size_bytes: Bytes = Field(description="Bytes to move, e.g. 1MiB.")
    pattern: Literal["sequential", "random"] = Field("sequential", description="Access pattern.")
    chunk_bytes: Bytes = Field(0, description="Request size (0: the device's burst group).")


class CollectiveSpec(_TaskSpec):
    type: Literal["collective"] = "collective"
    collective: Literal["allgather", "reduce_scatter", "allreduce", "broadcast", "all_to_all"] = \
        Field(description="Collective kind.")
    group: list[str] = Field(min_length=1, description="Member endpoints in ring order.")
    size_bytes: Bytes = Field(description="Each member's full output size.")

    @model_validator(mode="after")
    def _check_group(self) -> "CollectiveSpec":
        for i, member in enumerate(self.group):
            if member in self.group[:i]:  # reported at tasks[N].group (see the loader)
                raise ValueError(f"group: {member!r} is listed twice (group[{self.group.index(member)}] "
                                 f"and group[{i}] of {self.group}); expected each member once")
        return self


class HostSpec(_TaskSpec):
    type: Literal["host"] = "host"
    duration_ps: TimePs = Field(description="Fixed delay, e.g. 5us.")
    resource: str = Field("host", description="Serialising resource ('none' = no resource).")


_TASK_TYPES: dict[str, type[_TaskSpec]] = {
    "compute": ComputeSpec, "transfer": TransferSpec, "collective": CollectiveSpec, "host": HostSpec}


def _validate_task(value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
    """Validate a task by its ``type`` without the union tag in error locations.

    pydantic puts the tag of a discriminated union into every error's location
    (``tasks.0.collective.group.0``), and the loader only drops such a tag when it is not
    also a key the user wrote, which ``collective`` is.  Validating the selected class
    directly keeps the locations relative to the task (``tasks[0].group[0]``); a missing
    or unknown ``type`` still goes to the union, which reports it.
    """
    if isinstance(value, Mapping):
        cls = _TASK_TYPES.get(value.get("type")) if isinstance(value.get("type"), str) else None
        if cls is not None:
            unknown = [key for key in value if key not in cls.model_fields]
            if unknown:  # "KEY: ..." is reported at tasks[N].KEY, with what the task takes
                key = unknown[0]
                close = difflib.get_close_matches(str(key), list(cls.model_fields), n=1)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                raise ValueError(f"{key}: unknown key for a {value['type']} task{hint} "
                                 f"(known keys: {', '.join(sorted(cls.model_fields))})")
            return cls.model_validate(value)
    return handler(value)


TaskSpec = Annotated[Union[ComputeSpec, TransferSpec, CollectiveSpec, HostSpec],
                     Field(discriminator="type"), WrapValidator(_validate_task)]


class TaskGraphWorkloadConfig(PartConfig):
    """An explicit task graph written in the scenario (for experiments and tests)."""

    kind: Literal["taskgraph"] = "taskgraph"
    tasks: list[TaskSpec] = Field(min_length=1, description="Tasks in dependency order.")
    repeat: int = Field(1, ge=1, le=1_000_000, description="Identical segments to run back to "
                                                          "back. At most 10^6.")

    @model_validator(mode="after")
    def _check_names(self) -> "TaskGraphWorkloadConfig":
        seen: set[str] = set()
        for index, task in enumerate(self.tasks):
            for ref in task.after:
                if ref not in seen:
                    raise ValueError(f"tasks[{index}].after names {ref!r}, which is not an "
                                     "earlier task (tasks must be listed in dependency order)")
            if task.name:
                if task.name in seen:
                    raise ValueError(f"tasks[{index}].name {task.name!r} is used twice")
                seen.add(task.name)
        return self


def _check_units(device, spec, index: int) -> None:
    """Every unit and endpoint a task names exists, checked here so the error names the
    task's field (the executor would only know the unit)."""
    if not hasattr(device, "part"):
        return
    # Transfers and collectives name memory endpoints (``core3.hbm``), which the device
    # resolves itself where it can; compute tasks name units.
    endpoint = getattr(device, "endpoint", None) or device.part
    checks: list[tuple[str, str, object]] = []
    if isinstance(spec, ComputeSpec):
        checks.append(("unit", spec.unit, getattr(device, "compute_unit", device.part)))
    elif isinstance(spec, TransferSpec):
        checks += [("src", spec.src, endpoint), ("dst", spec.dst, endpoint)]
    elif isinstance(spec, CollectiveSpec) and hasattr(device, "endpoint"):
        checks += [(f"group[{i}]", member, endpoint) for i, member in enumerate(spec.group)]
    for field, name, resolve in checks:
        try:
            resolve(name)
        except MappingError as exc:
            raise MappingError(f"workload.tasks[{index}].{field}: {exc}") from None


def _check_op_kind(device, unit_name: str, op: Op, index: int) -> None:
    """A unit that cannot run the task's op is the task's error, named at its field (the
    executor would name only the unit)."""
    unit = device.compute_unit(unit_name) if hasattr(device, "compute_unit") else None
    if unit is None or not hasattr(unit, "supports") or unit.supports(op):
        return
    able = [name for name in device.compute_units()
            if getattr(device.part(name), "supports", lambda _: True)(op)]
    shown = ", ".join(able[:3]) + (", ..." if len(able) > 3 else "")
    raise MappingError(f"workload.tasks[{index}].unit: {unit_name} ({type(unit).__name__}) "
                       f"cannot run the task's op.kind {op.kind!r}; expected a unit that "
                       f"runs {op.kind} ops" + (f", such as {shown}" if able else ""))


@register("workload", TaskGraphWorkloadConfig)
def lower_taskgraph(device, config: TaskGraphWorkloadConfig, seed: int = 0) -> Program:
    graph = TaskGraph(name="taskgraph")
    ids: dict[str, int] = {}
    for index, spec in enumerate(config.tasks):
        _check_units(device, spec, index)
        deps = [ids[name] for name in spec.after]
        name = spec.name or f"task{index}"
        if isinstance(spec, ComputeSpec):
            op = Op(spec.op.kind, spec.op.m, spec.op.k, spec.op.n, spec.op.batch,
                    spec.op.elements, dtype_bytes=spec.op.dtype_bytes, name=spec.op.kind)
            _check_op_kind(device, spec.unit, op, index)
            tid = graph.compute(spec.unit, op, deps, name)
        elif isinstance(spec, TransferSpec):
            tid = graph.transfer(spec.src, spec.dst, spec.size_bytes, deps, name,
                                 spec.pattern, spec.chunk_bytes)
        elif isinstance(spec, CollectiveSpec):
            tid = graph.collective(spec.collective, spec.group, spec.size_bytes, deps, name)
        else:
            tid = graph.host(spec.duration_ps, deps, name, spec.resource)
        ids[name] = tid
    program = Program()
    for index in range(config.repeat):
        program.append(graph, f"taskgraph[{index}]")
    return program
