"""npusim: transaction-level simulation of LLM inference on NPUs and other accelerators.

The public API is small and imported lazily so that ``import npusim`` stays fast:

* :func:`simulate` – run one scenario, return a :class:`~npusim.metrics.result.Result`;
* :func:`load_scenario` – read and validate a scenario YAML with overrides;
* :class:`Result` – what a run produced (``Result.read(dir)`` loads a written run).
"""

from __future__ import annotations

__version__ = "0.1.0"
__all__ = ["simulate", "load_scenario", "Result", "__version__"]


def __getattr__(name: str):
    if name == "simulate":
        from npusim.api import simulate

        return simulate
    if name == "load_scenario":
        from npusim.config.loader import load_scenario

        return load_scenario
    if name == "Result":
        from npusim.metrics.result import Result

        return Result
    raise AttributeError(f"module 'npusim' has no attribute {name!r}")
