"""The ``trace:`` section of a serving scenario (:class:`TraceSpec`): a trace file, or a
generator of arrivals, prompt and output lengths (:mod:`npusim.workload.trace_generators`)
and, optionally, priority classes."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path
from typing import Any, Literal, Mapping

from pydantic import Field, ValidationInfo, field_validator, model_validator

from npusim.core.errors import TraceError
from npusim.core.units import PS_PER_S
from npusim.workload.trace_generators import (MAX_REQUESTS, SPAN_LIMIT_TEXT, ArrivalSpec,
                                              FixedArrival, GeneratorSpec, LengthSpec,
                                              SharedPrefixSpec,
                                              fixed_span_problem, generate_trace,
                                              priority_problem, round_up_text)
from npusim.workload.traces import MAX_ARRIVAL_PS, RequestTrace, read_trace, resolve_trace_path

__all__ = ["TraceSpec"]


#: The fields that describe a generated trace (a file trace sets none of them).
GENERATOR_KEYS = ("arrival", "prompt", "output", "num_requests", "seed", "priorities",
                  "shared_prefix")


def _both_sources(given: list[str]) -> str:
    return (f"give either file or a generator, not both (file is set and so is "
            f"{', '.join(given)}); to generate requests instead, replace the whole section, "
            "e.g. --set 'workload.trace={num_requests: 100, arrival: {kind: poisson, "
            "rate_per_s: 2}, prompt: {kind: fixed, tokens: 512}, output: {kind: fixed, "
            "tokens: 128}}'")


class TraceSpec(GeneratorSpec):
    """Where a serving scenario's requests come from: a trace file, or a generator.

    File: ``{file: traces/foo.csv, limit: 300, rate_scale: 1.0}``.  Generator:
    ``{arrival: {kind: poisson, rate_per_s: 2.0}, prompt: {kind: uniform, low: 100,
    high: 1000}, output: {kind: fixed, tokens: 128}, num_requests: 300, seed: 0}``.
    """

    file: str | None = Field(None, description="Trace file (CSV, JSONL, Azure CSV or "
                                               "Mooncake JSONL), "
                                               "relative to the scenario file, the working "
                                               "directory or the npusim checkout.")
    format: Literal["auto", "csv", "jsonl", "azure", "mooncake"] = Field(
        "auto", description="Trace file format; 'auto' decides from the extension and header.")
    hash_block_tokens: int | None = Field(
        None, ge=1, le=1 << 20,
        description="Prompt tokens each entry of a file's hash_ids covers (default 512, "
                    "the Mooncake traces' block); only for files with hash_ids.")
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
    num_requests: int | None = Field(None, ge=1, le=MAX_REQUESTS,
                                     description="Number of requests to generate.")
    seed: int | None = Field(None, ge=0, description="Generator seed; default: the run seed.")
    priorities: dict[int, float] | None = Field(
        None, description="Generator: priority classes and their relative weights, e.g. "
                          "{0: 1, 1: 4} for one request in five with priority 0 (drawn per "
                          "request with the seed; default every request 0). Schedulers "
                          "with order: priority serve lower values first.")

    shared_prefix: SharedPrefixSpec | None = Field(
        None, description="Generator: common prompt prefixes, e.g. {groups: 4, tokens: "
                          "1024} (a system prompt per group; see prefix_caching).")

    @field_validator("priorities", mode="before")
    @classmethod
    def _no_booleans(cls, value: Any) -> Any:
        # {0: true} would be a weight of 1 and {true: 1} a class 1: a typo, not a choice.
        if isinstance(value, Mapping):
            for priority, weight in value.items():
                if isinstance(priority, bool) or isinstance(weight, bool):
                    raise ValueError(f"priority {priority!r}: weight {weight!r}; expected an "
                                     "integer priority and a number weight, not a boolean")
        return value

    @field_validator("priorities")
    @classmethod
    def _weights(cls, value: dict[int, float] | None) -> dict[int, float] | None:
        problem = None if value is None else priority_problem(value)
        if problem:
            raise ValueError(problem)
        return value

    @field_validator("prompt", "output", mode="before")
    @classmethod
    def _int_is_fixed(cls, value: Any) -> Any:
        # Shorthand `prompt: 128` for `{kind: fixed, tokens: 128}` (the Fig. 11 tasks).
        if isinstance(value, int) and not isinstance(value, bool):
            return {"kind": "fixed", "tokens": value}
        if isinstance(value, (float, str)):  # 1.5, "128": neither form
            raise ValueError(f"got {value!r}; expected a whole number of tokens (a fixed "
                             "length) or a length distribution such as {kind: uniform, "
                             "low: 100, high: 1000}")
        return value

    @field_validator("num_requests")
    @classmethod
    def _span_fits(cls, value: int | None, info: ValidationInfo) -> int | None:
        # Every generated arrival must fit int64 picoseconds, and so must the first `limit`
        # of them once rate_scale < 1 stretches them (rescale_rate's exact rounding).
        # Random kinds are checked on their mean span; a draw that still overflows is
        # reported by sample_arrivals_ps.  limit, rate_scale and arrival come before
        # num_requests, so they are in info.data unless they were invalid themselves.
        arrival = info.data.get("arrival")
        if value is None or arrival is None:
            return value
        if isinstance(arrival, FixedArrival):
            gap_ps: float = arrival.interval_ps
            if (value - 1) * gap_ps > MAX_ARRIVAL_PS:
                raise ValueError(fixed_span_problem(value, arrival))
        else:
            gap_ps = (1.0 / arrival.rate_per_s) * PS_PER_S
            if (value - 1) * gap_ps > MAX_ARRIVAL_PS:
                raise ValueError(
                    f"{value} requests at arrival.rate_per_s {arrival.rate_per_s!r} span "
                    f"{(value - 1) * gap_ps / PS_PER_S:.4g} s on average; expected at most "
                    f"{1 + int(MAX_ARRIVAL_PS // gap_ps)} requests at this rate (or a higher "
                    f"rate): the last arrival must come within {SPAN_LIMIT_TEXT}")
        scale = info.data.get("rate_scale")
        kept = min(value, info.data.get("limit") or value)
        last_ps = (kept - 1) * gap_ps
        if scale is not None and round(Fraction(last_ps) / Fraction(scale)) > MAX_ARRIVAL_PS:
            raise ValueError(
                f"the {kept} requests kept span {last_ps / PS_PER_S:.4g} s"
                f"{'' if isinstance(arrival, FixedArrival) else ' on average'}, "
                f"{last_ps / PS_PER_S / scale:.4g} s after rate_scale {scale!r}; expected "
                f"rate_scale >= {round_up_text(last_ps / MAX_ARRIVAL_PS)} (or fewer requests): "
                f"the last arrival must come within {SPAN_LIMIT_TEXT}")
        return value

    @model_validator(mode="before")
    @classmethod
    def _file_or_generator_first(cls, data: Any) -> Any:
        # Said before the generator's own fields are checked: adding one generator field
        # to a file trace (--set workload.trace.arrival.rate_per_s=...) otherwise reads
        # "arrival: missing 'kind:' key", which hides the real mistake.
        if isinstance(data, Mapping) and data.get("file") is not None:
            given = [key for key in GENERATOR_KEYS if data.get(key) is not None]
            if given:
                raise ValueError(_both_sources(given))
        return data

    @model_validator(mode="after")
    def _one_source(self) -> "TraceSpec":
        generator = {"arrival": self.arrival, "prompt": self.prompt, "output": self.output,
                     "num_requests": self.num_requests, "seed": self.seed,
                     "priorities": self.priorities, "shared_prefix": self.shared_prefix}
        if self.file is not None:
            given = [k for k, v in generator.items() if v is not None]
            if given:
                raise ValueError(_both_sources(given))
            return self
        if self.format != "auto" or self.allow_simultaneous or self.hash_block_tokens is not None:
            raise ValueError("format, allow_simultaneous and hash_block_tokens only apply to "
                             "a trace file (a generator's shared_prefix sets its own block)")
        missing = [k for k in ("arrival", "prompt", "output", "num_requests")
                   if generator[k] is None]
        if missing:
            raise ValueError(f"expected either file: PATH or a generator with arrival, "
                             f"prompt, output and num_requests; missing {', '.join(missing)}")
        return self

    def build(self, base_dir: str | Path | None = None, default_seed: int = 0,
              where: str = "workload.trace") -> RequestTrace:
        """The trace this spec describes (files resolved as documented on ``file``).

        ``where`` is this spec's path in the configuration, for error messages.
        """
        if self.file is not None:
            try:
                path = resolve_trace_path(self.file, base_dir)
            except TraceError as exc:
                raise TraceError(f"{where}.file: {exc}") from None
            return read_trace(path, self.format,
                              limit=self.limit, rate_scale=self.rate_scale,
                              allow_simultaneous=self.allow_simultaneous,
                              hash_block_tokens=self.hash_block_tokens, settings=f"{where}.")
        trace = generate_trace(self.num_requests, self.arrival, self.prompt, self.output,
                               seed=self.seed if self.seed is not None else default_seed,
                               where=f"{where}.", priorities=self.priorities,
                               shared_prefix=self.shared_prefix)
        if self.limit is not None:
            trace = trace.head(self.limit)
        # The schema checked the mean span; random gaps may still stretch past the limit.
        last_ps = trace[len(trace) - 1].arrival_ps
        if round(Fraction(last_ps) / Fraction(self.rate_scale)) > MAX_ARRIVAL_PS:
            raise TraceError(
                f"{where}.rate_scale: got {self.rate_scale!r}; the generated requests span "
                f"{last_ps / PS_PER_S:.4g} s, {last_ps / PS_PER_S / self.rate_scale:.4g} s "
                f"after scaling; expected rate_scale >= "
                f"{round_up_text(last_ps / MAX_ARRIVAL_PS)}: the last arrival must come within "
                f"{SPAN_LIMIT_TEXT}")
        return trace.rescale_rate(self.rate_scale)
