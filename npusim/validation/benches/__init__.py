"""Component micro-benchmarks used by reference cases.

A bench is a function ``bench(**params) -> dict[str, float]`` registered by name with
:func:`npusim.validation.bench_registry.bench`; one file per part family.
"""
