"""Trace presets (NpuSim §5.5): the Fig. 11/14 ``prompt:output`` tasks, prefill- and
decode-dominated loads, and the files shipped in ``traces/`` that they produce
(``python -m npusim.workload.trace_presets [DIR]`` rewrites them)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from npusim.workload.trace_generators import UniformLength, generate_trace
from npusim.workload.traces import RequestTrace

__all__ = ["PRESET_RATE_PER_S", "ratio", "prefill_dominated", "decode_dominated",
           "PRESET_FILES", "write_presets"]

#: Default arrival rate of the presets (requests/s); use ``rate_scale`` to load harder.
PRESET_RATE_PER_S = 2.0


def ratio(prompt_tokens: int, output_tokens: int, num_requests: int = 32,
          rate_per_s: float | None = PRESET_RATE_PER_S, seed: int = 0) -> RequestTrace:
    """NpuSim Fig. 11/14 style task ``prompt_tokens:output_tokens`` (e.g. 100:100,
    1000:100, 100:1000): fixed lengths, Poisson arrivals at ``rate_per_s``
    (``None``: every request at t = 0, an offline batch)."""
    # (mappings, not spec objects: generate_trace checks them and names a bad value in
    # a TraceError, where a spec object's constructor raises pydantic's own error)
    arrival = ({"kind": "fixed", "interval_s": 0} if rate_per_s is None
               else {"kind": "poisson", "rate_per_s": rate_per_s})
    return generate_trace(num_requests, arrival, {"kind": "fixed", "tokens": prompt_tokens},
                          {"kind": "fixed", "tokens": output_tokens}, seed=seed,
                          source=f"ratio {prompt_tokens}:{output_tokens}")


def prefill_dominated(num_requests: int = 64, rate_per_s: float = PRESET_RATE_PER_S,
                      seed: int = 0) -> RequestTrace:
    """Long prompts, short answers (prompt:output ≈ 9:1, like summarisation or the
    Azure *code* trace): prompt uniform 512-2048, output uniform 32-256 tokens."""
    return generate_trace(num_requests, {"kind": "poisson", "rate_per_s": rate_per_s},
                          UniformLength(low=512, high=2048), UniformLength(low=32, high=256),
                          seed=seed, source="prefill_dominated")


def decode_dominated(num_requests: int = 64, rate_per_s: float = PRESET_RATE_PER_S,
                     seed: int = 0) -> RequestTrace:
    """Short prompts, long answers (prompt:output ≈ 1:9, like open-ended generation):
    prompt uniform 32-256, output uniform 512-2048 tokens."""
    return generate_trace(num_requests, {"kind": "poisson", "rate_per_s": rate_per_s},
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


if __name__ == "__main__":  # python -m npusim.workload.trace_presets [DIR]
    import sys

    for written_path in write_presets(sys.argv[1] if len(sys.argv) > 1 else "traces"):
        print(written_path)
