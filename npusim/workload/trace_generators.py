"""Synthetic request traces: arrival processes, length distributions, the ``trace:``
scenario schema (:class:`TraceSpec`) and the NpuSim §5.5 workload presets.

Every generator is deterministic per seed.  :func:`generate_trace` derives three
independent numpy streams from one seed (arrivals, prompt lengths, output lengths) so
that changing, say, the arrival process leaves the sampled lengths unchanged and a sweep
over arrival rates compares the same requests.

Random arrival processes are made strictly increasing by nudging a collision forward by
1 ps (a gap that rounds to 0 ps has probability ~0 for sane rates but is possible for
very bursty gamma arrivals); the shift is far below any simulated latency and keeps
every generated trace readable by :func:`~npusim.workload.traces.read_trace` with its
default strict ordering.  Only ``fixed`` arrivals with ``interval_s: 0`` (an offline
batch) produce simultaneous arrivals, on purpose.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal, Union

import numpy as np
from pydantic import (BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, field_validator,
                      model_validator)

from npusim.core.errors import TraceError
from npusim.core.units import PS_PER_S
from npusim.workload.traces import Request, RequestTrace, read_trace

__all__ = [
    "PoissonArrival", "GammaArrival", "FixedArrival", "ArrivalSpec",
    "FixedLength", "UniformLength", "ZipfLength", "EmpiricalLength", "NormalLength", "LengthSpec",
    "TraceSpec", "generate_trace", "sample_arrivals_ps", "sample_lengths",
    "ratio", "prefill_dominated", "decode_dominated", "PRESET_FILES", "write_presets",
]


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# -- arrival processes -------------------------------------------------------------------

class PoissonArrival(_Spec):
    """Poisson arrivals: exponential gaps with mean ``1 / rate_per_s``."""

    kind: Literal["poisson"] = Field("poisson", description="Poisson arrival process.")
    rate_per_s: float = Field(gt=0, allow_inf_nan=False,
                              description="Mean arrival rate in requests per second.")


class GammaArrival(_Spec):
    """Gamma-distributed gaps: same mean as Poisson, burstiness set by ``cv``."""

    kind: Literal["gamma"] = Field("gamma", description="Gamma renewal arrival process.")
    rate_per_s: float = Field(gt=0, allow_inf_nan=False,
                              description="Mean arrival rate in requests per second.")
    cv: float = Field(gt=0, le=100, allow_inf_nan=False,
                      description="Coefficient of variation of the gaps (std / mean): 1 is "
                                  "Poisson, > 1 bursty, < 1 more regular than Poisson.")


class FixedArrival(_Spec):
    """Evenly spaced arrivals; ``interval_s: 0`` puts every request at t = 0."""

    kind: Literal["fixed"] = Field("fixed", description="Fixed inter-arrival interval.")
    interval_s: float | None = Field(None, ge=0, allow_inf_nan=False,
                                     description="Gap between requests in seconds (0: all "
                                                 "requests arrive at once). Give this or "
                                                 "rate_per_s.")
    rate_per_s: float | None = Field(None, gt=0, allow_inf_nan=False,
                                     description="Arrival rate in requests per second "
                                                 "(interval = 1 / rate). Give this or "
                                                 "interval_s.")

    @model_validator(mode="after")
    def _one_of(self) -> "FixedArrival":
        if (self.interval_s is None) == (self.rate_per_s is None):
            raise ValueError("give exactly one of interval_s (seconds between requests) "
                             "or rate_per_s (requests per second)")
        return self

    @property
    def interval_ps(self) -> int:
        """The gap between consecutive requests in picoseconds."""
        seconds = self.interval_s if self.interval_s is not None else 1.0 / self.rate_per_s
        return round(seconds * PS_PER_S)


ArrivalSpec = Annotated[Union[PoissonArrival, GammaArrival, FixedArrival],
                        Field(discriminator="kind")]


# -- length distributions ----------------------------------------------------------------

class FixedLength(_Spec):
    """Every request has the same length."""

    kind: Literal["fixed"] = Field("fixed", description="Constant length.")
    tokens: int = Field(ge=1, description="Length in tokens.")


class _Bounded(_Spec):
    low: int = Field(ge=1, description="Smallest length in tokens (inclusive).")
    high: int = Field(ge=1, description="Largest length in tokens (inclusive).")

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
    mean: float = Field(gt=0, allow_inf_nan=False, description="Mean length in tokens (before clipping).")
    std: float = Field(ge=0, allow_inf_nan=False, description="Standard deviation in tokens.")


class EmpiricalLength(_Spec):
    """Lengths resampled (with replacement) from given values or from a trace file."""

    kind: Literal["empirical"] = Field("empirical", description="Resample observed lengths.")
    values: list[int] | None = Field(None, description="Observed lengths in tokens to "
                                                       "resample. Give this or file.")
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


def _as_spec(value: Any, adapter: TypeAdapter, what: str):
    """Accept a spec object, a mapping (``{"kind": ...}``) or, for lengths, an int."""
    if isinstance(value, BaseModel):
        return value
    if adapter is _LENGTH and isinstance(value, int) and not isinstance(value, bool):
        value = {"kind": "fixed", "tokens": value}
    try:
        return adapter.validate_python(value)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        loc = ".".join(str(p) for p in first["loc"])
        raise TraceError(f"{what}{'.' + loc if loc else ''}: {first['msg']} "
                         f"(got {value!r})") from None


# -- samplers ----------------------------------------------------------------------------

def sample_arrivals_ps(spec: PoissonArrival | GammaArrival | FixedArrival | dict, n: int,
                       rng: np.random.Generator | None = None) -> np.ndarray:
    """``n`` arrival times (int64 ps), the first at 0; random kinds strictly increasing."""
    spec = _as_spec(spec, _ARRIVAL, "arrival")
    if n <= 0:
        return np.zeros(0, dtype=np.int64)
    if isinstance(spec, FixedArrival):
        return np.arange(n, dtype=np.int64) * spec.interval_ps
    rng = rng if rng is not None else np.random.default_rng(0)
    mean_gap_ps = PS_PER_S / spec.rate_per_s
    if isinstance(spec, PoissonArrival):
        gaps = rng.exponential(mean_gap_ps, size=n - 1)
    else:
        shape = 1.0 / spec.cv ** 2       # gamma(k, theta): cv = 1/sqrt(k), mean = k*theta
        gaps = rng.gamma(shape, mean_gap_ps / shape, size=n - 1)
    # Round each gap to >= 1 ps, then accumulate in integers: exact and strictly increasing.
    gaps_ps = np.maximum(np.rint(gaps), 1).astype(np.int64)
    return np.concatenate(([0], np.cumsum(gaps_ps, dtype=np.int64)))


def sample_lengths(spec: Any, n: int, rng: np.random.Generator | None = None,
                   column: str = "prompt_tokens") -> np.ndarray:
    """``n`` lengths (int64 tokens, all >= 1) from a length spec.

    ``column`` is the field being generated; an empirical spec over a file resamples that
    column unless it names another.
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
        trace = read_trace(spec.file)
        pool = np.array([getattr(r, spec.column or column) for r in trace], dtype=np.int64)
    return rng.choice(pool, size=n, replace=True)


def generate_trace(num_requests: int, arrival: Any, prompt: Any, output: Any,
                   seed: int = 0, source: str | None = None) -> RequestTrace:
    """A synthetic trace of ``num_requests`` requests, ids ``req-0 .. req-{n-1}``.

    ``arrival`` is an arrival spec (or a mapping such as ``{"kind": "poisson",
    "rate_per_s": 2.0}``); ``prompt`` and ``output`` are length specs, mappings, or an
    int for a fixed length.  The same arguments and seed always give the same trace.
    """
    if isinstance(num_requests, bool) or not isinstance(num_requests, int) or num_requests < 1:
        raise TraceError(f"num_requests: got {num_requests!r}; expected an integer >= 1")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise TraceError(f"seed: got {seed!r}; expected an integer >= 0")
    arrival = _as_spec(arrival, _ARRIVAL, "arrival")
    prompt = _as_spec(prompt, _LENGTH, "prompt")
    output = _as_spec(output, _LENGTH, "output")
    streams = [np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(3)]
    arrivals = sample_arrivals_ps(arrival, num_requests, streams[0])
    prompts = sample_lengths(prompt, num_requests, streams[1], "prompt_tokens")
    outputs = sample_lengths(output, num_requests, streams[2], "output_tokens")
    label = source or (f"generated({_describe(arrival)}, prompt {_describe(prompt)}, "
                       f"output {_describe(output)}, n={num_requests}, seed={seed})")
    return RequestTrace((Request(f"req-{i}", int(a), int(p), int(o))
                         for i, (a, p, o) in enumerate(zip(arrivals, prompts, outputs))), label)


def _describe(spec: BaseModel) -> str:
    fields = ", ".join(f"{k}={v}" for k, v in spec.model_dump(exclude_none=True).items()
                       if k != "kind" and not isinstance(v, list))
    return f"{spec.kind}({fields})"


# -- the scenario schema -----------------------------------------------------------------

class TraceSpec(_Spec):
    """Where a serving scenario's requests come from: a trace file, or a generator.

    File: ``{file: traces/foo.csv, limit: 300, rate_scale: 1.0}``.  Generator:
    ``{arrival: {kind: poisson, rate_per_s: 2.0}, prompt: {kind: uniform, low: 100,
    high: 1000}, output: {kind: fixed, tokens: 128}, num_requests: 300, seed: 0}``.
    """

    file: str | None = Field(None, description="Trace file (CSV, JSONL or Azure CSV), "
                                               "relative to the scenario file, the working "
                                               "directory or the npusim checkout.")
    format: Literal["auto", "csv", "jsonl", "azure"] = Field(
        "auto", description="Trace file format; 'auto' decides from the extension and header.")
    limit: int | None = Field(None, ge=1, description="Keep only the first N requests of "
                                                      "the file or generator.")
    allow_simultaneous: bool = Field(False, description="Accept requests with equal "
                                                        "arrival times in the file.")
    rate_scale: float = Field(1.0, gt=0, allow_inf_nan=False,
                              description="Multiply the arrival rate (divide arrival "
                                          "times) by this factor; 2.0 doubles the load.")
    arrival: ArrivalSpec | None = Field(None, description="Arrival process (kind: poisson, "
                                                          "gamma or fixed).")
    prompt: LengthSpec | None = Field(None, description="Prompt length distribution in tokens "
                                                        "(kind: fixed, uniform, zipf, normal, "
                                                        "empirical; a bare integer means fixed).")
    output: LengthSpec | None = Field(None, description="Output length distribution in tokens "
                                                        "(same kinds as prompt).")
    num_requests: int | None = Field(None, ge=1, le=10_000_000,
                                     description="Number of requests to generate.")
    seed: int | None = Field(None, ge=0, description="Generator seed; default: the run seed.")

    @field_validator("prompt", "output", mode="before")
    @classmethod
    def _int_is_fixed(cls, value: Any) -> Any:
        # Shorthand `prompt: 128` for `{kind: fixed, tokens: 128}` (the Fig. 11 tasks).
        if isinstance(value, int) and not isinstance(value, bool):
            return {"kind": "fixed", "tokens": value}
        return value

    @model_validator(mode="after")
    def _one_source(self) -> "TraceSpec":
        generator = {"arrival": self.arrival, "prompt": self.prompt, "output": self.output,
                     "num_requests": self.num_requests, "seed": self.seed}
        if self.file is not None:
            given = [k for k, v in generator.items() if v is not None]
            if given:
                raise ValueError(f"give either file or a generator, not both (file is set "
                                 f"and so is {', '.join(given)})")
            return self
        if self.format != "auto" or self.allow_simultaneous:
            raise ValueError("format and allow_simultaneous only apply to a trace file")
        missing = [k for k in ("arrival", "prompt", "output", "num_requests")
                   if generator[k] is None]
        if missing:
            raise ValueError(f"expected either file: PATH or a generator with arrival, "
                             f"prompt, output and num_requests; missing {', '.join(missing)}")
        return self

    def build(self, base_dir: str | Path | None = None, default_seed: int = 0) -> RequestTrace:
        """The trace this spec describes (files resolved as documented on ``file``)."""
        if self.file is not None:
            return read_trace(resolve_trace_path(self.file, base_dir), self.format,
                              limit=self.limit, rate_scale=self.rate_scale,
                              allow_simultaneous=self.allow_simultaneous)
        trace = generate_trace(self.num_requests, self.arrival, self.prompt, self.output,
                               seed=self.seed if self.seed is not None else default_seed)
        if self.limit is not None:
            trace = trace.head(self.limit)
        return trace.rescale_rate(self.rate_scale)


def resolve_trace_path(file: str | Path, base_dir: str | Path | None = None) -> Path:
    """``file`` as given if absolute, else the first existing of base_dir/file,
    ./file and <npusim checkout>/file; TraceError listing the places tried."""
    from npusim.config.presets import REPO_ROOT

    path = Path(file)
    if path.is_absolute():
        candidates = [path]
    else:
        candidates = ([Path(base_dir) / path] if base_dir is not None else []) + \
            [Path.cwd() / path, REPO_ROOT / path]
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    raise TraceError(f"{file}: trace file not found (looked in "
                     f"{', '.join(str(c) for c in dict.fromkeys(candidates))})")


# -- presets (NpuSim §5.5) ---------------------------------------------------------------

#: Default arrival rate of the presets (requests/s); use ``rate_scale`` to load harder.
PRESET_RATE_PER_S = 2.0


def ratio(prompt_tokens: int, output_tokens: int, num_requests: int = 32,
          rate_per_s: float | None = PRESET_RATE_PER_S, seed: int = 0) -> RequestTrace:
    """NpuSim Fig. 11/14 style task ``prompt_tokens:output_tokens`` (e.g. 100:100,
    1000:100, 100:1000): fixed lengths, Poisson arrivals at ``rate_per_s``
    (``None``: every request at t = 0, an offline batch)."""
    arrival = (FixedArrival(interval_s=0) if rate_per_s is None
               else PoissonArrival(rate_per_s=rate_per_s))
    return generate_trace(num_requests, arrival, FixedLength(tokens=prompt_tokens),
                          FixedLength(tokens=output_tokens), seed=seed,
                          source=f"ratio {prompt_tokens}:{output_tokens}")


def prefill_dominated(num_requests: int = 64, rate_per_s: float = PRESET_RATE_PER_S,
                      seed: int = 0) -> RequestTrace:
    """Long prompts, short answers (prompt:output ≈ 9:1, like summarisation or the
    Azure *code* trace): prompt uniform 512-2048, output uniform 32-256 tokens."""
    return generate_trace(num_requests, PoissonArrival(rate_per_s=rate_per_s),
                          UniformLength(low=512, high=2048), UniformLength(low=32, high=256),
                          seed=seed, source="prefill_dominated")


def decode_dominated(num_requests: int = 64, rate_per_s: float = PRESET_RATE_PER_S,
                     seed: int = 0) -> RequestTrace:
    """Short prompts, long answers (prompt:output ≈ 1:9, like open-ended generation):
    prompt uniform 32-256, output uniform 512-2048 tokens."""
    return generate_trace(num_requests, PoissonArrival(rate_per_s=rate_per_s),
                          UniformLength(low=32, high=256), UniformLength(low=512, high=2048),
                          seed=seed, source="decode_dominated")


#: The files shipped in ``traces/`` and the preset call that produces each.
PRESET_FILES: dict[str, Any] = {
    "prefill_dominated_64.csv": lambda: prefill_dominated(64),
    "decode_dominated_64.csv": lambda: decode_dominated(64),
    "ratio_1_1_32.csv": lambda: ratio(100, 100, 32),
    "ratio_10_1_32.csv": lambda: ratio(1000, 100, 32),
    "ratio_1_10_32.csv": lambda: ratio(100, 1000, 32),
    "ratio_1_1_32.jsonl": lambda: ratio(100, 100, 32),
    # Saturating loads for NpuSim Fig. 14 (the validation cases replay them 500x faster):
    # 512 requests keep all 16 stages of a PD fusion pipeline busy with decodes.
    "ratio_1_10_512.csv": lambda: ratio(100, 1000, 512),
    "ratio_1_1_512.csv": lambda: ratio(100, 100, 512),
    "ratio_10_1_512.csv": lambda: ratio(1000, 100, 512),
}


def write_presets(directory: str | Path) -> list[Path]:
    """(Re)write every file of :data:`PRESET_FILES` into ``directory``."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name, make in PRESET_FILES.items():
        trace = make()
        path = directory / name
        written.append(trace.write_jsonl(path) if name.endswith(".jsonl") else trace.write_csv(path))
    return written


if __name__ == "__main__":  # python -m npusim.workload.trace_generators [DIR]
    import sys

    for written_path in write_presets(sys.argv[1] if len(sys.argv) > 1 else "traces"):
        print(written_path)
