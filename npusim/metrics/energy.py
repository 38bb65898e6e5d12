"""Energy roll-up: a run's per-unit counters x per-event energies, plus static power.

:func:`energy_metrics` turns ``Result.unit_stats`` (what the parts counted: flops, bytes
read and written, DRAM row activations, bytes per NoC link or, at the analytic level,
NoC bytes x route hops, and the compute units' operand traffic with their scratchpad)
into joules with the
parameters of :class:`npusim.hw.energy.EnergyConfig`, and adds the static power of every
part over the run.  The model, its sources and its gaps are in ``docs/energy.md``.

Conservation holds by construction: ``energy_j`` is the sum of ``energy_by_unit_j`` and
of ``energy_by_level_j`` (each level is a partition of the same per-unit terms).
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any, Iterable, Mapping

from npusim.hw.energy import EnergyConfig

PJ = 1e-12          # joules per picojoule
PS_PER_S = 10 ** 12

#: Levels of ``energy_by_level_j`` besides the per-part suffixes (``sa``, ``vec``,
#: ``sram``, ``hbm``, ``noc``): point-to-point links and all static energy.
LINK_LEVEL = "link"
STATIC_LEVEL = "static"
#: Level and unit-name suffix of a compute unit's operand traffic with its scratchpad
#: (``core0.sa.sram_operands`` in ``energy_by_unit_j``, charged to ``sram``).
SRAM_LEVEL = "sram"
OPERANDS_SUFFIX = ".sram_operands"
#: How operand traffic is counted, stated in ``basis.sram_operands`` (docs/energy.md).
OPERAND_COUNTING = {
    "systolic": "fold model of the array's timing (SCALE-Sim v2 per-operand SRAM counts): "
                "ws reads each input row once per column fold and each weight once, "
                "writes outputs once per row (K) fold and reads partial sums back for "
                "every row fold after the first; is swaps inputs and weights; os reads "
                "inputs once per column fold, weights once per row fold, writes outputs "
                "once; padding moves nothing; partial sums at operand width",
    "vector": "each element read once, one result per element written (reduce: reads "
              "only); second operands of binary ops and intermediate passes not counted",
    "other_compute": "not counted (no dataflow to derive operand traffic from)",
}


def generated_tokens(metrics: Mapping[str, Any], tables: Mapping[str, list] | None = None
                     ) -> int | None:
    """Output tokens a run produced: the serving engine's per-request ``generated``
    counts (every request, finished or not: their energy was spent), else an LLM run's
    ``output_tokens`` metric; ``None`` for workloads without tokens (micro-benchmarks)."""
    rows = (tables or {}).get("requests")
    if rows:
        return int(sum(row.get("generated", 0) or 0 for row in rows))
    tokens = metrics.get("output_tokens")
    return int(tokens) if isinstance(tokens, (int, float)) else None


def noc_hop_pj_per_bit(config: EnergyConfig, device: Any) -> tuple[float, float | None]:
    """``(pJ per bit per hop, link length in mm or None if given directly)`` for the
    device's NoC: ``noc_pj_per_bit_per_hop`` if set, else router energy + wire energy x
    link length, the length being ``noc_link_length_mm`` or the core pitch
    ``sqrt(chip area / cores)`` of :mod:`npusim.hw.area` (1 mm without an area model)."""
    if config.noc_pj_per_bit_per_hop is not None:
        return config.noc_pj_per_bit_per_hop, None
    length = config.noc_link_length_mm
    if length is None:
        length = 1.0  # assumption for devices without an area model (docs/energy.md)
        hw = getattr(device, "config", None)
        if getattr(hw, "kind", None) == "npu":
            from npusim.hw.area import npu_area_mm2
            length = math.sqrt(npu_area_mm2(hw)["total"] / hw.num_cores)
    return config.noc_router_pj_per_bit + config.wire_pj_per_bit_per_mm * length, length


def sram_pj_per_bit(config: EnergyConfig, capacity_bytes: int) -> tuple[float, float]:
    """``(read, write)`` pJ per bit of a scratchpad of ``capacity_bytes``: the configured
    values, or by default the array read plus the wire across half its macro
    (:func:`npusim.hw.energy.sram_read_pj_per_bit`, the macro's area from the default
    :class:`~npusim.hw.area.AreaConfig`) and writes 1.4x reads."""
    from npusim.hw.area import AreaConfig
    from npusim.hw.energy import SRAM_WRITE_TO_READ, sram_read_pj_per_bit

    read = config.sram_read_pj_per_bit
    if read is None:
        read = sram_read_pj_per_bit(capacity_bytes, AreaConfig().sram_mm2_per_mib)
    write = config.sram_write_pj_per_bit
    if write is None:
        write = SRAM_WRITE_TO_READ * read
    return read, write


def scratchpad_of(device: Any, unit: str) -> str | None:
    """Name of the SRAM scratchpad ``unit`` (a compute part) reads its operands from: the
    :class:`~npusim.hw.memory.sram.Sram` beside it (``core3.sram`` for ``core3.sa``), or
    ``None`` if its group has none."""
    from npusim.hw.memory.sram import Sram

    prefix = unit.rsplit(".", 1)[0] + "." if "." in unit else ""
    if not prefix:
        return None
    same = prefix + "sram"
    if isinstance(device.parts.get(same), Sram):
        return same
    return next((name for name, part in device.parts.items()
                 if name.startswith(prefix) and isinstance(part, Sram)), None)


def static_power_w(part: Any, config: EnergyConfig) -> float | None:
    """Static power of one part in W (``None``: a part type the model does not know)."""
    from npusim.hw.compute.systolic import SystolicArray
    from npusim.hw.compute.vector import VectorUnit
    from npusim.hw.interconnect.link import Link
    from npusim.hw.interconnect.noc import MeshNoc
    from npusim.hw.memory.dram import DramChannel
    from npusim.hw.memory.sram import Sram

    cfg = part.config
    if isinstance(part, SystolicArray):
        return config.sa_static_w_per_mac * cfg.rows * cfg.cols
    if isinstance(part, VectorUnit):
        return config.vec_static_w_per_alu * cfg.lanes * cfg.alus_per_lane
    if isinstance(part, Sram):
        return config.sram_static_w_per_mib * cfg.capacity_bytes / 2 ** 20
    if isinstance(part, DramChannel):
        return config.dram_static_w_per_channel * cfg.channels
    if isinstance(part, MeshNoc):
        return config.router_static_w * part.num_nodes
    if isinstance(part, Link):
        return config.link_static_w
    return None


def _suffix(name: str) -> str:
    return name.rsplit(".", 1)[-1] if "." in name else name


def unmatched_dram_families(config: EnergyConfig | None, device: Any) -> list[tuple[str, str]]:
    """``(field path, message)`` for each family a user added to ``dram_pj_per_bit`` that
    matches no DRAM of ``device``: a misspelt key (``HMB2``) would otherwise be unused
    without a word while the DRAM is charged another family's figure."""
    from npusim.hw.memory.dram import DramChannel

    if config is None or not config.added_dram_families():
        return []
    standards = sorted({part.config.standard for part in device.parts.values()
                        if isinstance(part, DramChannel)})
    used = {config.dram_pj_per_bit_for(standard)[1] for standard in standards}
    shown = ", ".join(repr(s) for s in standards) or "none"
    return [(f"run.energy.dram_pj_per_bit.{family}",
             f"matches no DRAM of this device (their 'standard' strings: {shown}); a key "
             "is matched at the start of a DRAM's standard, e.g. HBM2 for 'HBM2 2.0 Gb/s'")
            for family in config.added_dram_families() if family not in used]


def energy_metrics(unit_stats: Mapping[str, Mapping[str, int]], device: Any, latency_ps: int,
                   energy_config: EnergyConfig | None = None,
                   segment_rows: Iterable[tuple] | None = None, *,
                   tokens: int | None = None) -> dict[str, Any]:
    """Energy and power of a run (a nested, JSON-ready, deterministic dict).

    ``unit_stats`` are the counters of :meth:`Session.unit_stats` summed over the run,
    ``device`` the device they came from, ``latency_ps`` the run's makespan,
    ``energy_config`` the parameters (``None``: the 7 nm defaults), ``segment_rows`` the
    session's ``(index, label, start_ps, end_ps, reused)`` rows (used for the peak-power
    estimate), ``tokens`` the output tokens produced (for ``energy_per_token_j``).

    Keys: ``energy_j``, ``dynamic_energy_j``, ``static_energy_j``, ``energy_by_unit_j``
    (every unit with nonzero energy, dynamic + static), ``energy_by_level_j`` (``sa``,
    ``vec``, ``sram``, ``hbm``, ``noc``, ``link`` dynamic, and ``static``),
    ``static_power_w``, ``average_power_w``,
    ``peak_power_w``, ``energy_per_token_j`` (``None`` without tokens),
    ``energy_per_flop_pj`` (``None`` without flops), ``tokens``, ``basis`` (how the
    NoC hops, DRAM activations and operand traffic were obtained, the per-hop and
    per-bit energies used).

    A compute unit's ``sram_operand_bytes_read``/``_written`` (its operands' traffic with
    its core's scratchpad) is charged at that scratchpad's read/write pJ per bit, as the
    unit ``<unit>.sram_operands`` at level ``sram``, active while the unit is busy (at
    least bytes / the scratchpad's peak bandwidth, for the peak-power estimate).
    """
    from npusim.hw.compute.systolic import SystolicArray
    from npusim.hw.compute.vector import VectorUnit
    from npusim.hw.interconnect.link import Link
    from npusim.hw.interconnect.noc import MeshNoc
    from npusim.hw.memory.dram import DramChannel
    from npusim.hw.memory.sram import Sram
    from npusim.hw.base import ComputeUnit, Interconnect, MemoryTarget

    cfg = energy_config or EnergyConfig()
    seconds = latency_ps / PS_PER_S
    dynamic_pj: dict[str, float] = {}
    level_of: dict[str, str] = {}
    busy_of: dict[str, int] = {}
    static_w: dict[str, float] = {}
    basis: dict[str, Any] = {}
    approximated: list[str] = []
    hop_pj, link_mm = noc_hop_pj_per_bit(cfg, device)
    operand_users = _operand_users(unit_stats, device)
    operand_srams = {sram for sram in operand_users.values() if sram is not None}

    for name in sorted(device.parts):
        part = device.parts[name]
        stats = unit_stats.get(name, {})
        links = sorted(u for u in unit_stats if u.startswith(name + ".link("))
        moved_bits = 8 * (stats.get("bytes_read", 0) + stats.get("bytes_written", 0))
        level = _suffix(name)
        if isinstance(part, SystolicArray):
            mac_pj = cfg.mac_int8_pj if part.config.dtype_bytes == 1 else cfg.mac_fp16_pj
            energy = stats.get("flops", 0) / 2 * mac_pj  # a MAC is 2 flops
        elif isinstance(part, VectorUnit):
            energy = stats.get("flops", 0) * cfg.vector_op_pj
        elif isinstance(part, Sram):
            read_pj, write_pj = sram_pj_per_bit(cfg, part.config.capacity_bytes)
            energy = 8 * (stats.get("bytes_read", 0) * read_pj
                          + stats.get("bytes_written", 0) * write_pj)
            if moved_bits:  # per scratchpad size (one entry on a homogeneous chip)
                basis.setdefault("sram", {})[str(part.config.capacity_bytes)] = {
                    "read_pj_per_bit": read_pj, "write_pj_per_bit": write_pj}
        elif isinstance(part, DramChannel):
            dcfg = part.config
            pj_bit, family = cfg.dram_pj_per_bit_for(dcfg.standard)
            if "activates" in stats:
                acts, how = stats["activates"], "counted"
            else:
                # Analytic level: no row-buffer state.  One activation per row streamed,
                # what the tlm model counts for a sequential stream (a lower bound).
                acts = -(-moved_bits // (8 * dcfg.row_bytes))
                how = "estimated_one_per_row_streamed"
            energy = (moved_bits * pj_bit
                      + acts * cfg.dram_activate_pj_per_row_kib * dcfg.row_bytes / 1024)
            if moved_bits:  # summed per DRAM type (one entry on a homogeneous chip)
                entry = basis.setdefault("dram", {}).setdefault(dcfg.standard or "unknown", {
                    "pj_per_bit": pj_bit, "standard_family": family, "activations": 0,
                    "activations_basis": how})
                entry["activations"] += acts
        elif isinstance(part, MeshNoc):
            if links:
                # tlm: bytes per router-to-router link = bytes x hops, one term per link.
                for link in links:
                    link_bits = 8 * unit_stats[link].get("bytes", 0)
                    dynamic_pj[link] = link_bits * hop_pj
                    level_of[link] = level
                    busy_of[link] = unit_stats[link].get("busy_ps", 0)
                energy, how = 0.0, "link_stats"
            elif "hop_bytes" in stats:
                # analytic: no per-link traffic, but each transfer's route is known:
                # bytes x hops is what the tlm links carry in total for the same transfers.
                energy, how = 8 * stats["hop_bytes"] * hop_pj, "route_hops"
            else:
                # Counters without routes (stats from elsewhere): one hop per byte, exact
                # for neighbour transfers and low for longer routes.
                energy, how = moved_bits * hop_pj, "one_hop_assumed"
            if moved_bits:
                basis["noc"] = {"pj_per_bit_per_hop": hop_pj, "link_length_mm": link_mm,
                                "hops_basis": how}
        elif isinstance(part, Link):
            energy, level = moved_bits * cfg.link_pj_per_bit, LINK_LEVEL
        else:
            # A part type without its own model (a future device's unit): charge generic
            # costs rather than nothing, and list it in basis.approximated_parts.
            if isinstance(part, ComputeUnit):
                energy = stats.get("flops", 0) / 2 * cfg.mac_fp16_pj  # assumption: FP16 MACs
            elif isinstance(part, MemoryTarget):
                energy = moved_bits * cfg.dram_default_pj_per_bit
            elif isinstance(part, Interconnect):
                energy = moved_bits * cfg.link_pj_per_bit
            else:
                energy = 0.0
            approximated.append(name)
        dynamic_pj[name] = energy
        level_of[name] = level
        busy_of[name] = stats.get("busy_ps", 0)
        if name in operand_users:
            _charge_operands(name, stats, operand_users[name], device, cfg, dynamic_pj,
                             level_of, busy_of, basis)
        # A scratchpad its core's units read operands from is in use even without DMA.
        active = bool(stats) or bool(links) or name in operand_srams
        power = static_power_w(part, cfg) or 0.0
        if cfg.static_scope == "device" or active:
            static_w[name] = power

    dynamic_j = {u: e * PJ for u, e in dynamic_pj.items()}
    static_j = {u: p * seconds for u, p in static_w.items()}
    by_unit = {}
    for unit in sorted(set(dynamic_j) | set(static_j)):
        total = dynamic_j.get(unit, 0.0) + static_j.get(unit, 0.0)
        if total:
            by_unit[unit] = total
    by_level: dict[str, list[float]] = defaultdict(list)
    for unit, joules in dynamic_j.items():
        by_level[level_of[unit]].append(joules)
    by_level[STATIC_LEVEL].extend(static_j.values())
    energy_by_level = {level: math.fsum(values) for level, values in sorted(by_level.items())}

    energy_j = math.fsum(by_unit.values())
    dynamic_total = math.fsum(dynamic_j.values())
    static_total = math.fsum(static_j.values())
    static_power = math.fsum(static_w.values())
    average_power = energy_j / seconds if seconds else 0.0
    flops = sum(s.get("flops", 0) for s in unit_stats.values())
    return {
        "energy_j": energy_j,
        "dynamic_energy_j": dynamic_total,
        "static_energy_j": static_total,
        "energy_by_unit_j": by_unit,
        "energy_by_level_j": energy_by_level,
        "static_power_w": static_power,
        "average_power_w": average_power,
        "peak_power_w": _peak_power_w(dynamic_j, busy_of, latency_ps, static_power,
                                      average_power, segment_rows),
        "tokens": tokens,
        "energy_per_token_j": energy_j / tokens if tokens else None,
        "energy_per_flop_pj": energy_j / PJ / flops if flops else None,
        "basis": {**dict(sorted(_as_records(basis).items())), "static_scope": cfg.static_scope,
                  "process": cfg.process, "approximated_parts": sorted(approximated)},
    }


def _as_records(basis: dict[str, Any]) -> dict[str, Any]:
    """``basis`` with the entries kept per scratchpad size and per DRAM standard as lists
    of records (``sram: [{capacity_bytes: 67108864, read_pj_per_bit: ...}]``, ``dram:
    [{standard: "HBM2E 3.2 Gb/s ...", pj_per_bit: ...}]``) rather than mappings keyed by
    those values: a sweep flattens mappings into one column per key, so a swept SRAM
    size made a column per size, and a standard's name with a dot in it none at all."""
    out = dict(basis)
    if "sram" in out:
        out["sram"] = [{"capacity_bytes": int(size), **entry}
                       for size, entry in sorted(out["sram"].items(), key=lambda kv: int(kv[0]))]
    if "dram" in out:
        out["dram"] = [{"standard": standard, **entry}
                       for standard, entry in sorted(out["dram"].items())]
    return out


def _operand_users(unit_stats: Mapping[str, Mapping[str, int]], device: Any
                   ) -> dict[str, str | None]:
    """``unit -> its scratchpad (or None)`` for every part that counted operand traffic."""
    from npusim.executor.base import SRAM_OPERAND_READ, SRAM_OPERAND_WRITTEN

    return {name: scratchpad_of(device, name) for name, stats in unit_stats.items()
            if name in device.parts
            and (stats.get(SRAM_OPERAND_READ, 0) or stats.get(SRAM_OPERAND_WRITTEN, 0))}


def _charge_operands(unit: str, stats: Mapping[str, int], sram: str | None, device: Any,
                     cfg: EnergyConfig, dynamic_pj: dict, level_of: dict, busy_of: dict,
                     basis: dict) -> None:
    """Charge ``unit``'s operand traffic at its scratchpad's pJ per bit (a separate unit
    ``<unit>.sram_operands`` at level ``sram``, busy while ``unit`` is, or as long as the
    scratchpad's peak bandwidth needs for the bytes), and say how it was counted in
    ``basis.sram_operands``."""
    from npusim.executor.base import SRAM_OPERAND_READ, SRAM_OPERAND_WRITTEN
    from npusim.hw.compute.systolic import SystolicArray

    read, written = stats.get(SRAM_OPERAND_READ, 0), stats.get(SRAM_OPERAND_WRITTEN, 0)
    entry = basis.setdefault("sram_operands", {
        "counted": dict(OPERAND_COUNTING), "bytes_read": 0, "bytes_written": 0,
        "systolic_dataflows": [], "units_without_scratchpad": []})
    part = device.parts[unit]
    if isinstance(part, SystolicArray):
        # With operand_swap each GEMM may run in the swapped dataflow (ws <-> is).
        dataflows = {"ws", "is"} if part.config.operand_swap else {part.config.dataflow}
        entry["systolic_dataflows"] = sorted(set(entry["systolic_dataflows"]) | dataflows)
    if sram is None:
        # No scratchpad beside it (not on the NPU): nothing to charge it at; say so.
        entry["units_without_scratchpad"].append(unit)
        return
    capacity = device.parts[sram].config.capacity_bytes
    read_pj, write_pj = sram_pj_per_bit(cfg, capacity)
    basis.setdefault("sram", {})[str(capacity)] = {"read_pj_per_bit": read_pj,
                                                   "write_pj_per_bit": write_pj}
    entry["bytes_read"] += read
    entry["bytes_written"] += written
    name = unit + OPERANDS_SUFFIX
    dynamic_pj[name] = 8 * (read * read_pj + written * write_pj)
    level_of[name] = SRAM_LEVEL
    # Active while the unit is busy, but never shorter than the scratchpad needs to move
    # the bytes at its peak bandwidth: a unit timed without that bound (a vector unit
    # without operand_bandwidth_bps takes operands at the ALUs' rate, up to 16 KiB/cycle
    # on large_core_64 against 512 B/cycle of SRAM) would put a burst of tens of watts
    # per core into the peak-power estimate.  An NPU core's vector unit has the bound.
    peak_bps = device.parts[sram].peak_bandwidth_bps
    floor_ps = -(-(read + written) * PS_PER_S // peak_bps) if peak_bps else 0
    busy_of[name] = max(stats.get("busy_ps", 0), floor_ps)


def _peak_power_w(dynamic_j: Mapping[str, float], busy_ps: Mapping[str, int], latency_ps: int,
                  static_w: float, average_w: float, segment_rows: Iterable[tuple] | None
                  ) -> float:
    """Estimate of the highest power the chip draws.

    The collectors keep no per-segment unit counters (memo hits share one stats dict),
    so the per-segment maximum cannot be formed.  Instead: static power plus, for every
    unit, its dynamic energy over its own busy time (its active power), as if all units
    were active at once.  That bounds the power of any moment at which each unit runs at
    its average active power; it is never below the average power over the time the
    segments cover (idle gaps between serving iterations excluded).
    """
    active = 0.0
    for unit, joules in dynamic_j.items():
        if not joules:
            continue
        busy = min(busy_ps.get(unit, 0), latency_ps) or latency_ps
        active += joules / (busy / PS_PER_S) if busy else 0.0
    covered_ps = _covered_ps(segment_rows) if segment_rows is not None else latency_ps
    covered_ps = min(covered_ps, latency_ps) or latency_ps
    dynamic = math.fsum(dynamic_j.values())
    during_segments = static_w + (dynamic / (covered_ps / PS_PER_S) if covered_ps else 0.0)
    return max(static_w + active, during_segments, average_w)


def _covered_ps(segment_rows: Iterable[tuple]) -> int:
    """Length of the union of the segments' ``[start_ps, end_ps)`` intervals."""
    spans = sorted((row[2], row[3]) for row in segment_rows)
    covered, end = 0, None
    for start, stop in spans:
        if end is None or start > end:
            covered += stop - start
            end = stop
        elif stop > end:
            covered += stop - end
            end = stop
    return covered
