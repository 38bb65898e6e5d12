"""Synthetic request traces: arrival processes and length distributions.  The ``trace:``
scenario schema built on them is :class:`~npusim.workload.trace_spec.TraceSpec`; the
NpuSim §5.5 workload presets are in :mod:`npusim.workload.trace_presets`.

Every generator is deterministic per seed.  :func:`generate_trace` derives four
independent numpy streams from one seed (arrivals, prompt lengths, output lengths,
priorities) so that changing, say, the arrival process leaves the sampled lengths
unchanged and a sweep over arrival rates compares the same requests.

Random arrival processes are made strictly increasing by nudging a collision forward by
1 ps (a gap that rounds to 0 ps has probability ~0 for sane rates but is possible for
very bursty gamma arrivals); the shift is far below any simulated latency and keeps
every generated trace readable by :func:`~npusim.workload.traces.read_trace` with its
default strict ordering.  Only ``fixed`` arrivals with ``interval_s: 0`` (an offline
batch) produce simultaneous arrivals, on purpose.

Arrival times are int64 picoseconds (:data:`~npusim.workload.traces.MAX_ARRIVAL_PS`, about
106.8 days).  The schema rejects a gap longer than that and, in :class:`TraceSpec`, a
trace whose (mean) span would not fit; random draws that still overflow are caught when
sampled.  Without these checks numpy silently wraps the int64 sums into negative times.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal, Mapping, Union

import numpy as np
from pydantic import (AfterValidator, BaseModel, ConfigDict, Field, TypeAdapter, ValidationError,
                      model_validator)

from npusim.core.errors import TraceError
from npusim.core.registry import NumbersNotBooleans
from npusim.core.units import PS_PER_S
from npusim.workload.traces import (MAX_ARRIVAL_PS, MAX_REQUEST_TOKENS, Request, RequestTrace,
                                     plain_int, read_trace)

__all__ = [
    "PoissonArrival", "GammaArrival", "FixedArrival", "ArrivalSpec",
    "FixedLength", "UniformLength", "ZipfLength", "EmpiricalLength", "NormalLength", "LengthSpec",
    "SharedPrefixSpec", "generate_trace", "priority_problem", "sample_arrivals_ps",
    "sample_lengths",
    "GeneratorSpec", "MAX_REQUESTS", "SPAN_LIMIT_TEXT", "fixed_span_problem", "round_up_text",
]


class GeneratorSpec(NumbersNotBooleans):
    """Base of the generator specs (and of TraceSpec): unknown keys are errors, specs are
    immutable, and booleans are not numbers."""

    model_config = ConfigDict(extra="forbid", frozen=True)


#: Most requests a generated trace may hold (about 1 GB of request records).
MAX_REQUESTS = 10_000_000


# -- arrival processes -------------------------------------------------------------------

#: The longest gap or trace span (seconds) an int64 picosecond arrival time can hold.
MAX_ARRIVAL_S = MAX_ARRIVAL_PS / PS_PER_S
#: The span limit in words, for error messages that suggest a fix.
SPAN_LIMIT_TEXT = (f"{MAX_ARRIVAL_S:.0f} s (about {MAX_ARRIVAL_S / 86400:.1f} days, the "
                   "longest span int64 picosecond arrival times hold)")


def round_up_text(value: float) -> str:
    """``value`` rounded *up* to 4 significant digits, so a suggested minimum works."""
    step = 10.0 ** (math.floor(math.log10(value)) - 3)
    return f"{math.ceil(value / step) * step:.4g}"


def _check_gap_s(seconds: float | None) -> float | None:
    """A gap in seconds that fits an arrival time (``None`` passes through)."""
    # The float product is the one interval_ps rounds, and float-vs-int comparison is
    # exact, so a gap that passes always fits; 1e300 s gives inf here, not an overflow.
    if seconds is not None and seconds * PS_PER_S > MAX_ARRIVAL_PS:
        raise ValueError(f"expected at most {SPAN_LIMIT_TEXT}")
    return seconds


def _check_rate(rate: float | None) -> float | None:
    """A rate whose (mean) gap ``1 / rate`` fits an arrival time."""
    # Same float product as FixedArrival.interval_ps, so a fixed rate that passes fits.
    # (rate <= 0 is left to the field's gt=0, which pydantic may check after this.)
    if rate is not None and rate > 0 and (1.0 / rate) * PS_PER_S > MAX_ARRIVAL_PS:
        raise ValueError(f"expected at least {round_up_text(1 / MAX_ARRIVAL_S)} requests/s: a "
                         f"mean gap of at most {SPAN_LIMIT_TEXT}")
    return rate


#: Gaps and rates that fit an arrival time; the error stays on the field that is wrong.
_GapSeconds = Annotated[float, AfterValidator(_check_gap_s)]
_Rate = Annotated[float, AfterValidator(_check_rate)]


class PoissonArrival(GeneratorSpec):
    """Poisson arrivals: exponential gaps with mean ``1 / rate_per_s``."""

    kind: Literal["poisson"] = Field("poisson", description="Poisson arrival process.")
    rate_per_s: _Rate = Field(gt=0, allow_inf_nan=False,
                              description="Mean arrival rate in requests per second (at "
                                          "least one per ~106.8 days).")


class GammaArrival(GeneratorSpec):
    """Gamma-distributed gaps: same mean as Poisson, burstiness set by ``cv``."""

    kind: Literal["gamma"] = Field("gamma", description="Gamma renewal arrival process.")
    rate_per_s: _Rate = Field(gt=0, allow_inf_nan=False,
                              description="Mean arrival rate in requests per second (at "
                                          "least one per ~106.8 days).")
    cv: float = Field(gt=0, le=100, allow_inf_nan=False,
                      description="Coefficient of variation of the gaps (std / mean): 1 is "
                                  "Poisson, > 1 bursty, < 1 more regular than Poisson.")


class FixedArrival(GeneratorSpec):
    """Evenly spaced arrivals; ``interval_s: 0`` puts every request at t = 0."""

    kind: Literal["fixed"] = Field("fixed", description="Fixed inter-arrival interval.")
    interval_s: _GapSeconds | None = Field(
        None, ge=0, allow_inf_nan=False,
        description="Gap between requests in seconds (0: all requests arrive at once; at "
                    "most ~106.8 days). Give this or rate_per_s.")
    rate_per_s: _Rate | None = Field(
        None, gt=0, allow_inf_nan=False,
        description="Arrival rate in requests per second (interval = 1 / rate; at least "
                    "one per ~106.8 days). Give this or interval_s.")

    @model_validator(mode="after")
    def _one_of(self) -> "FixedArrival":
        if (self.interval_s is None) == (self.rate_per_s is None):
            raise ValueError("give exactly one of interval_s (seconds between requests) "
                             "or rate_per_s (requests per second)")
        seconds = self.interval_s if self.interval_s is not None else 1 / self.rate_per_s
        if 0 < seconds * PS_PER_S < 1:  # it would round to 0 (or 1: a rate off by 2x)
            raise ValueError(f"{self.set_by}: {getattr(self, self.set_by):g} makes the gap "
                             f"between requests {seconds:.3g} s, below the simulator's 1 ps "
                             "time step; expected a gap of at least 1 ps (rate_per_s up to "
                             "1e12), or interval_s: 0 for requests all at once")
        return self

    @property
    def interval_ps(self) -> int:
        """The gap between consecutive requests in picoseconds."""
        seconds = self.interval_s if self.interval_s is not None else 1.0 / self.rate_per_s
        return round(seconds * PS_PER_S)

    @property
    def set_by(self) -> str:
        """The field that sets the interval (for error messages)."""
        return "interval_s" if self.interval_s is not None else "rate_per_s"


ArrivalSpec = Annotated[Union[PoissonArrival, GammaArrival, FixedArrival],
                        Field(discriminator="kind")]


# -- length distributions ----------------------------------------------------------------

class FixedLength(GeneratorSpec):
    """Every request has the same length."""

    kind: Literal["fixed"] = Field("fixed", description="Constant length.")
    tokens: int = Field(ge=1, le=MAX_REQUEST_TOKENS, description="Length in tokens.")


class _Bounded(GeneratorSpec):
    low: int = Field(ge=1, le=MAX_REQUEST_TOKENS, description="Smallest length in tokens (inclusive).")
    high: int = Field(ge=1, le=MAX_REQUEST_TOKENS, description="Largest length in tokens (inclusive).")

    @model_validator(mode="after")
    def _ordered(self):
        if self.high < self.low:
            raise ValueError(f"high ({self.high}) must be >= low ({self.low})")
        return self


class UniformLength(_Bounded):
    """Integer lengths drawn uniformly from ``[low, high]``."""

    kind: Literal["uniform"] = Field("uniform", description="Uniform integer lengths.")


class ZipfLength(_Bounded):
    """Bounded Zipf: ``P(low + r - 1) ∝ r^-a`` for ranks ``r = 1 .. high - low + 1``
    (short lengths common, long ones rare; ``a = 0`` is uniform)."""

    kind: Literal["zipf"] = Field("zipf", description="Bounded Zipf over [low, high].")
    a: float = Field(ge=0, le=10, allow_inf_nan=False,
                     description="Zipf exponent (0 = uniform; larger = more mass on low).")

    @model_validator(mode="after")
    def _size(self):
        if self.high - self.low + 1 > 10_000_000:
            raise ValueError("high - low must be below 10 million tokens")
        return self


class NormalLength(_Bounded):
    """Normal lengths rounded to integers and clipped to ``[low, high]``."""

    kind: Literal["normal"] = Field("normal", description="Clipped normal lengths.")
    mean: float = Field(gt=0, le=MAX_REQUEST_TOKENS, allow_inf_nan=False,
                        description="Mean length in tokens (before clipping).")
    std: float = Field(ge=0, le=MAX_REQUEST_TOKENS, allow_inf_nan=False,
                       description="Standard deviation in tokens.")


class EmpiricalLength(GeneratorSpec):
    """Lengths resampled (with replacement) from given values or from a trace file."""

    kind: Literal["empirical"] = Field("empirical", description="Resample observed lengths.")
    values: list[Annotated[int, Field(ge=1, le=MAX_REQUEST_TOKENS)]] | None = Field(
        None, description="Observed lengths in tokens to resample. Give this or file.")
    file: str | None = Field(None, description="A trace file (any format read_trace "
                                               "reads) whose lengths are resampled. "
                                               "Give this or values.")
    column: Literal["prompt_tokens", "output_tokens"] | None = Field(
        None, description="Which lengths of the file to use (default: the field this "
                          "spec feeds, prompt or output).")

    @model_validator(mode="after")
    def _source(self):
        if (self.values is None) == (self.file is None):
            raise ValueError("give exactly one of values (a list of token counts) or file "
                             "(a trace file to resample)")
        if self.values is not None:
            if not self.values:
                raise ValueError("values is empty; expected at least one length")
            bad = [v for v in self.values if v < 1]
            if bad:
                raise ValueError(f"values must be >= 1 token; got {bad[0]}")
        if self.column is not None and self.file is None:
            raise ValueError("column only applies together with file")
        return self


LengthSpec = Annotated[Union[FixedLength, UniformLength, ZipfLength, NormalLength,
                             EmpiricalLength], Field(discriminator="kind")]

_ARRIVAL = TypeAdapter(ArrivalSpec)
_LENGTH = TypeAdapter(LengthSpec)


class SharedPrefixSpec(GeneratorSpec):
    """Prompts that start alike (a system prompt, a few-shot template): each request
    joins one of ``groups`` prefixes with probability ``share``, and its first
    ``tokens`` prompt tokens (or all of them, if fewer) are that group's.  The
    requests' block hashes say so, for a prefix cache to reuse."""

    groups: int = Field(ge=1, le=1 << 30, description="Distinct shared prefixes; each "
                                                      "sharing request draws one uniformly.")
    tokens: int = Field(ge=1, le=MAX_REQUEST_TOKENS, description="Tokens of each shared "
                                                                "prefix.")
    share: float = Field(1.0, gt=0, le=1, description="Fraction of requests that start "
                                                      "with a shared prefix.")
    block_tokens: int = Field(16, ge=1, le=1 << 20, description="Tokens per hashed block "
                                                                "(only whole blocks are "
                                                                "shared; vLLM's block_size).")

    def block_hashes(self, n: int, prompts: np.ndarray, rng: np.random.Generator
                     ) -> list[tuple[int, ...]]:
        """Per request, the hashes of its shared whole blocks (none if it shares none):
        group ``g``'s block ``j`` is ``g * 2**32 + j``."""
        joins = rng.random(n) < self.share
        groups = rng.integers(0, self.groups, n)
        out = []
        for prompt, joined, group in zip(prompts, joins, groups):
            blocks = min(int(prompt), self.tokens) // self.block_tokens if joined else 0
            out.append(tuple(int(group) * 2**32 + j for j in range(blocks)))
        return out


def _as_spec(value: Any, adapter: TypeAdapter, what: str):
    """Accept a spec object, a mapping (``{"kind": ...}``) or, for lengths, an int."""
    if isinstance(value, BaseModel):
        return value
    value = plain_int(value)  # (a NumPy integer too)
    if adapter is _LENGTH and isinstance(value, int) and not isinstance(value, bool):
        value = {"kind": "fixed", "tokens": value}
    try:
        return adapter.validate_python(value)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        loc = ".".join(str(p) for p in first["loc"])
        got = first["input"] if loc else value  # the bad field's value, not the mapping
        raise TraceError(f"{what}{'.' + loc if loc else ''}: {first['msg']} "
                         f"(got {got!r})") from None


# -- samplers ----------------------------------------------------------------------------

def sample_arrivals_ps(spec: PoissonArrival | GammaArrival | FixedArrival | dict, n: int,
                       rng: np.random.Generator | None = None, *,
                       what: str = "arrival") -> np.ndarray:
    """``n`` arrival times (int64 ps), the first at 0; random kinds strictly increasing.

    ``what`` names the spec in error messages (``workload.trace.arrival`` in a scenario).
    :class:`TraceError` if an arrival time would not fit int64 picoseconds.
    """
    spec = _as_spec(spec, _ARRIVAL, what)
    if n <= 1:
        return np.zeros(max(n, 0), dtype=np.int64)
    if isinstance(spec, FixedArrival):
        span_ps = (n - 1) * spec.interval_ps      # Python int: numpy would wrap silently
        if span_ps > MAX_ARRIVAL_PS:
            raise TraceError(f"{what}.{spec.set_by}: got {getattr(spec, spec.set_by)!r}; "
                             f"{fixed_span_problem(n, spec)}")
        return np.arange(n, dtype=np.int64) * spec.interval_ps
    rng = rng if rng is not None else np.random.default_rng(0)
    mean_gap_ps = PS_PER_S / spec.rate_per_s
    if isinstance(spec, PoissonArrival):
        gaps = rng.exponential(mean_gap_ps, size=n - 1)
    else:
        shape = 1.0 / spec.cv ** 2       # gamma(k, theta): cv = 1/sqrt(k), mean = k*theta
        gaps = rng.gamma(shape, mean_gap_ps / shape, size=n - 1)
    # Round each gap to >= 1 ps, then accumulate in integers: exact and strictly increasing.
    rounded = np.maximum(np.rint(gaps), 1)
    # A long random gap can still overflow: a gap >= 2**63 ps does not cast to int64 and
    # the int64 running sum wraps silently (its first wrapped value is negative).
    if rounded.max() < 2.0 ** 63:
        arrivals = np.concatenate(([0], np.cumsum(rounded.astype(np.int64), dtype=np.int64)))
        if arrivals.min() >= 0:
            return arrivals
    total, index = 0, 0
    for index, gap in enumerate(rounded.tolist(), start=1):    # exact, error path only
        total += int(gap)
        if total > MAX_ARRIVAL_PS:
            break
    raise TraceError(f"{what}.rate_per_s: got {spec.rate_per_s!r}; the sampled gaps put "
                     f"request {index} of {n} at {total / PS_PER_S:.4g} s (the mean span of "
                     f"{n} requests is {(n - 1) / spec.rate_per_s:.4g} s); expected every "
                     f"arrival within {SPAN_LIMIT_TEXT}: raise rate_per_s or generate fewer "
                     "requests")


def fixed_span_problem(n: int, spec: FixedArrival) -> str:
    """Why ``n`` requests ``spec.interval_ps`` apart do not fit, and what would."""
    most = 1 + MAX_ARRIVAL_PS // spec.interval_ps
    return (f"{n} requests {spec.interval_ps / PS_PER_S:.4g} s apart span "
            f"{(n - 1) * spec.interval_ps / PS_PER_S:.4g} s; expected at most {most} "
            f"requests at this interval (or a shorter one): the last arrival must come "
            f"within {SPAN_LIMIT_TEXT}")


def sample_lengths(spec: Any, n: int, rng: np.random.Generator | None = None,
                   column: str = "prompt_tokens", *, where: str = "") -> np.ndarray:
    """``n`` lengths (int64 tokens, all >= 1) from a length spec.

    ``column`` is the field being generated; an empirical spec over a file resamples that
    column unless it names another.  ``where`` is the spec's path in the configuration
    (``workload.trace.prompt``): a file that cannot be found is reported at its ``file``.
    """
    spec = _as_spec(spec, _LENGTH, column.removesuffix("_tokens"))
    rng = rng if rng is not None else np.random.default_rng(0)
    if isinstance(spec, FixedLength):
        return np.full(n, spec.tokens, dtype=np.int64)
    if isinstance(spec, UniformLength):
        return rng.integers(spec.low, spec.high, size=n, endpoint=True, dtype=np.int64)
    if isinstance(spec, ZipfLength):
        ranks = np.arange(1, spec.high - spec.low + 2, dtype=np.float64)
        weights = ranks ** -spec.a
        return spec.low + rng.choice(ranks.size, size=n, p=weights / weights.sum()).astype(np.int64)
    if isinstance(spec, NormalLength):
        values = np.rint(rng.normal(spec.mean, spec.std, size=n))
        return np.clip(values, spec.low, spec.high).astype(np.int64)
    if spec.values is not None:
        pool = np.asarray(spec.values, dtype=np.int64)
    else:
        from npusim.workload.trace_readers import resolve_trace_path

        try:  # as workload.trace.file is found: the working directory, then the checkout
            path = resolve_trace_path(spec.file)
        except TraceError as exc:
            raise TraceError(f"{where}.file: {exc}" if where else str(exc)) from None
        trace = read_trace(path)
        pool = np.array([getattr(r, spec.column or column) for r in trace], dtype=np.int64)
    return rng.choice(pool, size=n, replace=True)


def priority_problem(priorities: Any) -> str | None:
    """What is wrong with ``priorities`` (priority value -> relative weight), or None."""
    if not isinstance(priorities, Mapping):
        return (f"expected a mapping priority: weight such as {{0: 1, 1: 4}}, got "
                f"{type(priorities).__name__}")
    if not priorities:
        return "expected at least one priority: weight pair, e.g. {0: 1, 1: 4}"
    for priority, weight in priorities.items():
        if isinstance(priority, bool) or not isinstance(priority, int):
            return f"priority {priority!r}: expected an integer"
        if not -2**31 <= priority < 2**31:
            return f"priority {priority} is out of range; expected a 32-bit integer"
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) \
                or not math.isfinite(weight) or weight <= 0:
            shown = f"{weight:g}" if isinstance(weight, float) else repr(weight)
            return f"priority {priority}: weight {shown}; expected a finite number > 0"
    return None


def generate_trace(num_requests: int, arrival: Any, prompt: Any, output: Any,
                   seed: int = 0, source: str | None = None, *, where: str = "",
                   priorities: dict[int, float] | None = None,
                   shared_prefix: Any = None) -> RequestTrace:
    """A synthetic trace of ``num_requests`` requests, ids ``req-0 .. req-{n-1}``.

    ``arrival`` is an arrival spec (or a mapping such as ``{"kind": "poisson",
    "rate_per_s": 2.0}``); ``prompt`` and ``output`` are length specs, mappings, or an
    int for a fixed length; ``priorities`` maps priority values to relative weights
    (each request draws one; default: all 0); ``shared_prefix`` (a
    :class:`SharedPrefixSpec` or mapping) gives requests common prompt prefixes.  The
    same arguments and seed always give the same trace, and adding ``priorities`` or
    ``shared_prefix`` leaves arrivals and lengths as they were.
    ``where`` prefixes the field names in error messages (``"workload.trace."``).
    """
    num_requests = plain_int(num_requests)  # (a NumPy integer too)
    if isinstance(num_requests, bool) or not isinstance(num_requests, int) \
            or not 1 <= num_requests <= MAX_REQUESTS:  # 10^9 requests exhausts memory
        raise TraceError(f"{where}num_requests: got {num_requests!r}; expected an integer "
                         f"from 1 to {MAX_REQUESTS:,}")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise TraceError(f"{where}seed: got {seed!r}; expected an integer >= 0")
    arrival = _as_spec(arrival, _ARRIVAL, f"{where}arrival")
    prompt = _as_spec(prompt, _LENGTH, f"{where}prompt")
    output = _as_spec(output, _LENGTH, f"{where}output")
    # Child i of the seed is the same whatever the number spawned: a fourth stream for
    # priorities leaves the first three (and so every trace without priorities) as is.
    streams = [np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(5)]
    arrivals = sample_arrivals_ps(arrival, num_requests, streams[0], what=f"{where}arrival")
    prompts = sample_lengths(prompt, num_requests, streams[1], "prompt_tokens",
                             where=f"{where}prompt")
    outputs = sample_lengths(output, num_requests, streams[2], "output_tokens",
                             where=f"{where}output")
    classes = [0] * num_requests
    if priorities is not None:
        problem = priority_problem(priorities)
        if problem:
            raise TraceError(f"{where}priorities: {problem}")
        values = sorted(priorities)
        weights = np.array([float(priorities[v]) for v in values])
        weights /= weights.max()  # 1e308 + 1e308 would overflow the sum
        classes = [values[i] for i in streams[3].choice(len(values), num_requests,
                                                        p=weights / weights.sum())]
    hashes: list[tuple[int, ...]] = [()] * num_requests
    if shared_prefix is not None:
        shared_prefix = _as_spec(shared_prefix, TypeAdapter(SharedPrefixSpec),
                                 f"{where}shared_prefix")
        hashes = shared_prefix.block_hashes(num_requests, prompts, streams[4])
    label = source or (f"generated({_describe(arrival)}, prompt {_describe(prompt)}, "
                       f"output {_describe(output)}, n={num_requests}, seed={seed}"
                       + (", priorities={" + ", ".join(f"{k}: {float(v):g}" for k, v
                                                       in sorted(priorities.items())) + "}"
                          if priorities else "")
                       + (f", shared_prefix={_describe(shared_prefix)}" if shared_prefix else "")
                       + ")")
    return RequestTrace((Request(f"req-{i}", int(a), int(p), int(o), int(c), h)
                         for i, (a, p, o, c, h) in enumerate(zip(arrivals, prompts, outputs,
                                                                 classes, hashes))),
                        label, shared_prefix.block_tokens if shared_prefix else None)


def _describe(spec: BaseModel) -> str:
    fields = ", ".join(f"{k}={v}" for k, v in spec.model_dump(exclude_none=True).items()
                       if k != "kind" and not isinstance(v, list))
    return f"{getattr(spec, 'kind', '')}({fields})"
