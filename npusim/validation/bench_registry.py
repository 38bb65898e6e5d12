"""Registry of component micro-benchmarks that reference cases can name.

A reference case says ``bench: dram_stream`` with ``params: {...}``; the harness calls
the registered function with those params and reads ``metric`` from the returned dict.
Benches are pure functions of their parameters (no files written, no global state).
"""

from __future__ import annotations

import importlib
import pkgutil
from functools import cache
from typing import Callable

BenchFn = Callable[..., dict[str, float]]
_BENCHES: dict[str, BenchFn] = {}


def bench(name: str) -> Callable[[BenchFn], BenchFn]:
    """Decorator registering ``fn`` as the bench called ``name``."""

    def decorate(fn: BenchFn) -> BenchFn:
        if name in _BENCHES and _BENCHES[name] is not fn:
            raise TypeError(f"bench {name!r} registered twice")
        _BENCHES[name] = fn
        return fn

    return decorate


@cache
def _discover() -> None:
    import npusim.validation.benches as package

    for info in pkgutil.iter_modules(package.__path__, package.__name__ + "."):
        importlib.import_module(info.name)


def get_bench(name: str) -> BenchFn:
    _discover()
    if name not in _BENCHES:
        raise KeyError(f"unknown bench {name!r}; known: {', '.join(sorted(_BENCHES))}")
    return _BENCHES[name]


def bench_names() -> list[str]:
    _discover()
    return sorted(_BENCHES)
