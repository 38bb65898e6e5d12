"""DRAM address mapping: physical address -> (channel, rank, bank group, bank, row, column).

The mapping is a string naming bit fields from the most significant to the least
significant end of the address, above the byte offset inside one burst:

* ``ch`` channel, ``ra`` rank (or pseudo-channel), ``bg`` bank group, ``ba`` bank within
  its group, ``ro`` row, ``co`` column (counted in bursts, not bytes).

Three spellings are accepted and mean the same thing:

* dash-separated, as in these presets: ``"ro-ba-ra-co-ch-bg"``;
* DRAMsim3 style, two letters per field: ``"rochrababgco"``;
* Ramulator style, capitalised: ``"RoBaRaCoCh"``.

A field may be split by repeating it with an explicit width, ``name:bits``; the lower
occurrence holds the field's low bits and at most one occurrence may omit its width (it
takes the remaining bits).  ``"ro-ba-ra-co-ch-co:2-bg"`` puts four bank groups and four
columns (16 bursts, 1 KiB with 64 B bursts) in each channel before moving to the next.
A field whose size is 1 needs no bits and may be left out; a field with more than one
value must appear.  Sizes must be powers of two.  Addresses beyond the capacity wrap.

Example: DDR4 with 64 B bursts and ``"ro-ra-ba-co-ch-bg"`` sends consecutive 64 B
bursts to consecutive bank groups (so a stream is paced by tCCD_S, not tCCD_L), then
walks the columns of one row in every bank group, then the banks, ranks and rows.

:meth:`AddressMapping.segments` splits a byte range into per-(channel, bank, row)
segments without visiting every burst: the range is cut into aligned power-of-two
blocks, and inside a block only the combinations of non-column bits are enumerated, so
the cost is O(distinct banks and rows touched), not O(bursts).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Mapping

#: Field codes and the config quantity each one indexes.
FIELDS: dict[str, str] = {"ch": "channels", "ra": "ranks", "bg": "bank_groups",
                          "ba": "banks_per_group", "ro": "rows", "co": "columns"}
_ORDER = tuple(FIELDS)  # index of each field in decoded tuples
_CH, _RA, _BG, _BA, _RO, _CO = range(6)


@dataclass(frozen=True, slots=True)
class DramCoord:
    """Where one burst lives."""

    channel: int
    rank: int
    bank_group: int
    bank: int
    row: int
    column: int


@dataclass(frozen=True, slots=True)
class Segment:
    """The bursts of one request that fall in one row of one bank.

    ``first`` is the index (in address order, counted in bursts from the request's
    first burst) of the segment's lowest burst; the controller uses it to order the
    segments of a burst group on the data bus.
    """

    channel: int
    rank: int
    bank_group: int
    bank: int
    row: int
    bursts: int
    first: int


def is_power_of_two(value: int) -> bool:
    return value > 0 and value & (value - 1) == 0


def parse_mapping_tokens(spec: str) -> list[tuple[str, int | None]]:
    """Split a mapping string into ``(field, width or None)`` tokens, MSB first.

    Raises ``ValueError`` with the accepted syntax on anything it cannot read.
    """
    text = spec.strip()
    if not text:
        raise ValueError("address_mapping is empty; expected e.g. 'ro-ba-ra-co-ch-bg'")
    if re.search(r"[-_\s,]", text):
        raw = [tok for tok in re.split(r"[-_\s,]+", text) if tok]
    elif re.fullmatch(r"(?:[A-Z][a-z](?::\d+)?)+", text):  # Ramulator: RoBaRaCoCh
        raw = re.findall(r"[A-Z][a-z](?::\d+)?", text)
    elif re.fullmatch(r"(?:[a-z]{2})+", text):  # DRAMsim3: rochrababgco
        raw = [text[i:i + 2] for i in range(0, len(text), 2)]
    else:
        raise ValueError(f"cannot read address_mapping {spec!r}; write fields MSB first as "
                         "'ro-ba-ra-co-ch-bg', 'rochrababgco' or 'RoBaRaCoCh' "
                         f"(fields: {', '.join(FIELDS)}; optional ':bits' to split a field)")
    tokens: list[tuple[str, int | None]] = []
    for tok in raw:
        match = re.fullmatch(r"([A-Za-z]{2})(?::(\d+))?", tok)
        if not match or match[1].lower() not in FIELDS:
            raise ValueError(f"address_mapping {spec!r}: unknown field {tok!r}; "
                             f"known fields are {', '.join(FIELDS)} "
                             "(channel, rank, bank group, bank, row, column)")
        tokens.append((match[1].lower(), int(match[2]) if match[2] is not None else None))
    return tokens


def _field_widths(spec: str, tokens: list[tuple[str, int | None]],
                  bits: dict[str, int]) -> list[tuple[str, int]]:
    """Give every token its width; check each field's widths add up to its size."""
    out: list[tuple[str, int]] = []
    for field in FIELDS:
        occurrences = [w for f, w in tokens if f == field]
        if not occurrences:
            if bits[field]:
                raise ValueError(f"address_mapping {spec!r} has no {field!r} field, but "
                                 f"{FIELDS[field]} = {1 << bits[field]} needs {bits[field]} bits")
            continue
        unsized = sum(1 for w in occurrences if w is None)
        fixed = sum(w for w in occurrences if w is not None)
        if unsized > 1:
            raise ValueError(f"address_mapping {spec!r}: field {field!r} appears {len(occurrences)} "
                             "times; give all but one occurrence a width, e.g. 'co:2'")
        if fixed > bits[field] or (unsized == 0 and fixed != bits[field]):
            raise ValueError(f"address_mapping {spec!r}: widths of {field!r} add up to {fixed} bits, "
                             f"but {FIELDS[field]} = {1 << bits[field]} has {bits[field]} bits")
    remaining = {field: bits[field] - sum(w for f, w in tokens if f == field and w is not None)
                 for field in FIELDS}
    for field, width in tokens:
        out.append((field, remaining[field] if width is None else width))
    return out


class AddressMapping:
    """A parsed mapping for one organisation (see the module docstring).

    ``sizes`` gives the number of channels, ranks, bank_groups, banks_per_group, rows
    and columns (bursts per row); all must be powers of two.
    """

    def __init__(self, spec: str, sizes: Mapping[str, int], burst_bytes: int):
        for field, key in FIELDS.items():
            if not is_power_of_two(sizes[key]):
                raise ValueError(f"{key} = {sizes[key]} must be a power of two "
                                 "(the address mapping assigns whole bits to it)")
        if not is_power_of_two(burst_bytes):
            raise ValueError(f"burst size {burst_bytes} B must be a power of two")
        self.spec = spec
        self.sizes = {key: sizes[key] for key in FIELDS.values()}
        self.burst_bytes = burst_bytes
        self.offset_bits = burst_bytes.bit_length() - 1
        bits = {field: sizes[key].bit_length() - 1 for field, key in FIELDS.items()}
        widths = _field_widths(spec, parse_mapping_tokens(spec), bits)
        # Assign bit positions from the LSB end (the spec lists MSB first).
        parts: list[tuple[int, int, int, int]] = []  # (field index, lsb, width, shift in field)
        position, filled = 0, dict.fromkeys(FIELDS, 0)
        for field, width in reversed(widths):
            if width:
                parts.append((_ORDER.index(field), position, width, filled[field]))
            position += width
            filled[field] += width
        self._parts = tuple(parts)
        self.total_bits = position
        self._mask = (1 << position) - 1
        self._noncol = tuple(pos + i for f, pos, w, _ in parts if f != _CO for i in range(w))

    # -- queries ---------------------------------------------------------------------
    @property
    def capacity_bytes(self) -> int:
        """Bytes addressable before addresses wrap."""
        return self.burst_bytes << self.total_bits

    @property
    def channel_interleave_bytes(self) -> int:
        """Contiguous bytes that stay in one channel before the next channel starts
        (the whole capacity when there is a single channel)."""
        lows = [pos for f, pos, _, _ in self._parts if f == _CH]
        return self.burst_bytes << min(lows) if lows else self.capacity_bytes

    def _decode_burst(self, burst: int) -> list[int]:
        values = [0, 0, 0, 0, 0, 0]
        burst &= self._mask
        for field, pos, width, shift in self._parts:
            values[field] |= ((burst >> pos) & ((1 << width) - 1)) << shift
        return values

    def decode(self, addr: int) -> DramCoord:
        """The coordinates of the burst holding byte ``addr``."""
        return DramCoord(*self._decode_burst(addr >> self.offset_bits))

    def encode(self, channel: int = 0, rank: int = 0, bank_group: int = 0, bank: int = 0,
               row: int = 0, column: int = 0) -> int:
        """The byte address of a burst (inverse of :meth:`decode`); ``column`` counts bursts."""
        values = (channel, rank, bank_group, bank, row, column)
        for field, value in zip(FIELDS.values(), values):
            if not 0 <= value < self.sizes[field]:
                raise ValueError(f"{field} index {value} out of range 0..{self.sizes[field] - 1}")
        burst = 0
        for field, pos, width, shift in self._parts:
            burst |= ((values[field] >> shift) & ((1 << width) - 1)) << pos
        return burst << self.offset_bits

    def segments(self, addr: int, size_bytes: int) -> list[Segment]:
        """Split ``[addr, addr + size_bytes)`` into per-(channel, bank, row) segments.

        A partly covered burst counts as a whole burst (the bus moves whole bursts).
        Segments are returned in address order of their first burst.
        """
        if size_bytes <= 0:
            return []
        first = addr >> self.offset_bits
        end = ((addr + size_bytes - 1) >> self.offset_bits) + 1
        if end - first == 1:  # one burst (a 64 B line): no block walk needed
            v = self._decode_burst(first)
            return [Segment(v[_CH], v[_RA], v[_BG], v[_BA], v[_RO], 1, 0)]
        found: dict[tuple[int, ...], list[int]] = {}
        start = first
        while start < end:
            span = (start & -start).bit_length() - 1 if start else end.bit_length()
            while (1 << span) > end - start:
                span -= 1
            self._block(start, span, first, found)
            start += 1 << span
        out = [Segment(k[0], k[1], k[2], k[3], k[4], v[0], v[1]) for k, v in found.items()]
        out.sort(key=lambda seg: seg.first)
        return out

    def _block(self, start: int, span: int, first: int,
               found: dict[tuple[int, ...], list[int]]) -> None:
        """Add the aligned block of 2**span bursts at ``start`` to ``found``."""
        free = [pos for pos in self._noncol if pos < span]
        per_combo = 1 << (span - len(free))  # the free column bits vary inside a combo
        for combo in range(1 << len(free)):
            burst = start
            for i, pos in enumerate(free):
                burst |= ((combo >> i) & 1) << pos
            v = self._decode_burst(burst)
            key = (v[_CH], v[_RA], v[_BG], v[_BA], v[_RO])
            entry = found.get(key)
            if entry is None:
                found[key] = [per_combo, burst - first]
            else:
                entry[0] += per_combo
                entry[1] = min(entry[1], burst - first)


@dataclass(frozen=True, slots=True)
class BatchRun:
    """One channel's share of an aligned power-of-two block, as a run of row batches.

    A *batch* is the set of segments whose bursts interleave on the data bus (they
    differ only in non-column bits below the block's highest column bit, e.g. the
    bank-group bits of a bank-group-lowest mapping); batches follow each other in
    address order (they differ in non-column bits above every column bit, e.g. bank and
    row bits).  ``segments`` is batch 0 in address order; batch ``b`` has the same
    segments with ``deltas[b]`` = (rank, bank group, bank, row) added to their fields
    (the mapping is linear in the address bits, and the block is aligned, so the bits
    are disjoint and OR is addition).  ``period`` is how many batches pass before the
    bank pattern repeats with the next rows (0 when it does not repeat regularly).
    """

    channel: int
    segments: tuple[Segment, ...]
    deltas: tuple[tuple[int, int, int, int], ...]
    period: int

    @property
    def count(self) -> int:
        return len(self.deltas)


_ZERO_DELTA = ((0, 0, 0, 0),)


def _spread(value: int, positions: list[int]) -> int:
    out = 0
    for i, pos in enumerate(positions):
        out |= ((value >> i) & 1) << pos
    return out


def runs(mapping: AddressMapping, addr: int, size_bytes: int) -> dict[int, list[BatchRun]]:
    """Split ``[addr, addr + size_bytes)`` into per-channel :class:`BatchRun` s.

    Cost: one decode per segment of the first batch plus one per further batch, i.e.
    O(bank-parallel row batches), never O(bursts).
    """
    if size_bytes <= 0:
        return {}
    first = addr >> mapping.offset_bits
    end = ((addr + size_bytes - 1) >> mapping.offset_bits) + 1
    decode = mapping._decode_burst
    if end - first == 1:
        v = decode(first)
        return {v[_CH]: [BatchRun(v[_CH], (Segment(v[_CH], v[_RA], v[_BG], v[_BA], v[_RO], 1, 0),),
                                  _ZERO_DELTA, 0)]}
    layout = getattr(mapping, "_layout", None)
    if layout is None:
        fields = {}
        for field, pos, width, _ in mapping._parts:
            for i in range(width):
                fields[pos + i] = field
        cols = tuple(p for p, f in sorted(fields.items()) if f == _CO)
        chans = tuple(p for p, f in sorted(fields.items()) if f == _CH)
        others = tuple(p for p, f in sorted(fields.items()) if f not in (_CO, _CH))
        layout = mapping._layout = (fields, cols, chans, others)
    fields, all_cols, all_chans, all_others = layout
    out: dict[int, list[BatchRun]] = {}
    start = first
    while start < end:
        span = (start & -start).bit_length() - 1 if start else end.bit_length()
        while (1 << span) > end - start:
            span -= 1
        cols = [p for p in all_cols if p < span]
        top = cols[-1] if cols else -1
        chans = [p for p in all_chans if p < span]
        inter = [p for p in all_others if p < top]
        seq = [p for p in all_others if top < p < span]
        bursts = 1 << len(cols)
        bank_bits = [p for p in seq if fields[p] != _RO]
        row_bits = [p for p in seq if fields[p] == _RO]
        period = 1 << len(bank_bits) if row_bits and (not bank_bits or bank_bits[-1] < row_bits[0]) else 0
        deltas = []
        for b in range(1 << len(seq)):
            v = decode(_spread(b, seq)) if b else (0,) * 6
            deltas.append((v[_RA], v[_BG], v[_BA], v[_RO]))
        deltas_t = tuple(deltas)
        for cc in range(1 << len(chans)):
            base = start | _spread(cc, chans)
            segs = []
            for i in range(1 << len(inter)):
                burst = base | _spread(i, inter)
                v = decode(burst)
                segs.append(Segment(v[_CH], v[_RA], v[_BG], v[_BA], v[_RO], bursts, burst - first))
            ch = segs[0].channel
            out.setdefault(ch, []).append(BatchRun(ch, tuple(segs), deltas_t, period))
        start += 1 << span
    return out
