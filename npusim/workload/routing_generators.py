"""Synthetic MoE routing traces, deterministic per seed.

Three load shapes, each with optional temporal locality (with probability ``locality`` a
token reuses its predecessor's experts, as consecutive tokens of real text often do):

- :func:`balanced_trace`: every expert gets the same number of tokens (``r = 1`` when
  ``E`` divides ``tokens * k``, else within one token);
- :func:`imbalanced_trace`: one hot expert per layer carries ``r`` times the mean load
  (NPUMoE's imbalance ratio, realised exactly up to rounding to whole tokens); the rest
  share the remaining load evenly;
- :func:`zipf_trace`: expert popularity ``p_e ~ 1 / rank^a``; loads are sampled, so they
  follow the Zipf law in expectation only.

Every layer draws from its own child of ``SeedSequence(seed)``, so layer ``l`` of a trace
does not depend on how many layers were generated.  Weights: the ``k`` selected experts
get ``softmax`` of ``k`` sorted standard-normal logits (largest first, so entry 0 is the
top-1 expert); for a model that does not renormalise top-k weights they are scaled by a
top-k probability mass drawn from ``U(k/E, 1)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from npusim.workload.routing import (EXPERT_DTYPE, WEIGHT_DTYPE, RoutingHeader, RoutingTrace,
                                     validate_routing_trace)

__all__ = ["MAX_ZIPF_EXPONENT", "TraceShape", "balanced_trace", "imbalanced_loads",
           "imbalanced_trace", "trace_from_loads", "zipf_log_popularity", "zipf_popularity",
           "zipf_trace"]


@dataclass(frozen=True)
class TraceShape:
    """The MoE layout a trace is generated for (from a model or given directly)."""

    model: str
    num_layers: int
    num_experts: int
    top_k: int
    weights_normalized: bool = True
    moe_layers: tuple[int, ...] = ()

    @classmethod
    def of(cls, model: Any) -> "TraceShape":
        """A :class:`TraceShape` as is, or the MoE layout of a ``ModelConfig``."""
        if isinstance(model, TraceShape):
            return model
        if not model.is_moe:
            raise ValueError(f"{model.name} has no MoE layers; a routing trace needs a MoE model")
        return cls(model.name, len(model.moe_layers), model.num_experts,
                   model.experts_per_token, model.topk_weights_normalized, model.moe_layers)

    def __post_init__(self) -> None:
        for name in ("num_layers", "num_experts", "top_k"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if self.top_k > self.num_experts:
            raise ValueError(f"top_k {self.top_k} exceeds num_experts {self.num_experts}")


# ----------------------------------------------------------------- load shapes
def imbalanced_loads(tokens: int, num_experts: int, top_k: int, ratio: float) -> np.ndarray:
    """Integer loads (summing to ``tokens * top_k``) with ``max / mean = ratio``.

    Expert 0 is the hot one with ``round(ratio * mean)`` tokens; the others share the rest
    as evenly as whole tokens allow.  ``ratio`` must lie in ``[1, E / k]``: an expert can
    take each token at most once, so its load cannot exceed ``tokens``.
    """
    pairs = tokens * top_k
    mean = pairs / num_experts
    limit = num_experts / top_k
    if not 1 <= ratio <= limit:
        raise ValueError(f"imbalance ratio must be in [1, E/k = {limit:g}] for {num_experts} "
                         f"experts and top-{top_k}, got {ratio!r}")
    hot = min(tokens, max(int(round(ratio * mean)), -(-pairs // num_experts)))
    rest, others = pairs - hot, num_experts - 1
    loads = np.full(num_experts, rest // others if others else 0, dtype=np.int64)
    loads[0] = hot
    loads[1:1 + (rest - loads[1:].sum())] += 1  # spread the remainder one token each
    return loads


#: Largest Zipf exponent accepted.  Far beyond any real router (about 1) and beyond the
#: point where every token already picks the top-ranked experts; it only keeps the
#: log-popularities ``-exponent * log(rank)`` well inside float range.
MAX_ZIPF_EXPONENT = 1000.0


def _check_zipf_exponent(exponent: float) -> None:
    if (isinstance(exponent, bool) or not isinstance(exponent, (int, float, np.number))
            or not 0 <= exponent <= MAX_ZIPF_EXPONENT):
        raise ValueError(f"exponent: expected a Zipf exponent in [0, {MAX_ZIPF_EXPONENT:g}] "
                         f"(0 = uniform, about 1 for real routers), got "
                         f"{exponent.item() if isinstance(exponent, np.generic) else exponent!r}")


def zipf_log_popularity(num_experts: int, exponent: float) -> np.ndarray:
    """``log p_e`` of :func:`zipf_popularity`, computed without overflow or underflow
    (every entry finite, so even the least popular expert can be drawn)."""
    _check_zipf_exponent(exponent)
    logs = -float(exponent) * np.log(np.arange(1, num_experts + 1, dtype=np.float64))
    return logs - np.logaddexp.reduce(logs)


def zipf_popularity(num_experts: int, exponent: float) -> np.ndarray:
    """Probabilities ``p_e ~ 1 / (e + 1) ** exponent`` (expert 0 most popular); for a
    large exponent the tail may round to 0."""
    return np.exp(zipf_log_popularity(num_experts, exponent))


# ------------------------------------------------------------------ assignment
def _check_common(tokens: int, locality: float, seed: int = 0) -> None:
    if not isinstance(tokens, int) or tokens < 1:
        raise ValueError(f"tokens must be a positive int, got {tokens!r}")
    if not 0 <= locality <= 1:
        raise ValueError(f"locality must be a probability in [0, 1], got {locality!r}")
    # numpy's SeedSequence would say only "expected non-negative integer"
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed: expected a non-negative integer, got {seed!r}")


def _assign_exact(loads: np.ndarray, tokens: int, top_k: int, locality: float,
                  rng: np.random.Generator) -> np.ndarray:
    """Give each token ``top_k`` distinct experts so expert ``e`` gets exactly
    ``loads[e]`` tokens.

    Tokens are filled in order from the remaining quotas.  An expert whose quota equals
    the tokens left must be taken now (otherwise it could not be used up), and such
    experts are never more than ``top_k``, so the fill never dead-ends.  The others are
    drawn without replacement with probability proportional to their remaining quota;
    with probability ``locality`` the previous token's experts are reused if that keeps
    the fill feasible.
    """
    quota = loads.astype(np.int64).copy()
    chosen = np.empty((tokens, top_k), dtype=np.int64)
    reuse = rng.random(tokens) < locality
    for token in range(tokens):
        left = tokens - token
        forced = np.flatnonzero(quota == left)
        if token and reuse[token]:
            previous = chosen[token - 1]
            if (quota[previous] > 0).all() and np.isin(forced, previous).all():
                chosen[token] = previous
                quota[previous] -= 1
                continue
        free = quota.astype(np.float64)
        free[forced] = 0.0
        need = top_k - len(forced)
        picked = (rng.choice(len(quota), size=need, replace=False, p=free / free.sum())
                  if need else np.empty(0, dtype=np.int64))
        row = np.concatenate([forced, picked])
        chosen[token] = rng.permutation(row)
        quota[row] -= 1
    return chosen


def _sample_popularity(log_popularity: np.ndarray, tokens: int, top_k: int, locality: float,
                       rng: np.random.Generator) -> np.ndarray:
    """``top_k`` distinct experts per token drawn without replacement from the
    probabilities ``exp(log_popularity)`` (Gumbel top-k), then copied from the
    predecessor where it is reused."""
    gumbel = rng.gumbel(size=(tokens, len(log_popularity)))
    keys = log_popularity[None, :] + gumbel
    chosen = np.argsort(-keys, axis=1, kind="stable")[:, :top_k]
    reuse = rng.random(tokens) < locality
    reuse[0] = False
    # each reusing token copies the nearest earlier token that drew fresh experts
    source = np.maximum.accumulate(np.where(reuse, 0, np.arange(tokens)))
    return chosen[source]


def _weights(tokens: int, shape: TraceShape, rng: np.random.Generator) -> np.ndarray:
    logits = -np.sort(-rng.standard_normal((tokens, shape.top_k)), axis=1)
    weights = np.exp(logits - logits[:, :1])
    weights /= weights.sum(axis=1, keepdims=True)
    if not shape.weights_normalized:
        mass = rng.uniform(shape.top_k / shape.num_experts, 1.0, size=(tokens, 1))
        weights *= mass
    return weights


def _build(shape: TraceShape, tokens: int, seed: int, generator: str,
           params: dict[str, Any], notes: str, layer_fn) -> RoutingTrace:
    children = np.random.SeedSequence(seed).spawn(shape.num_layers)
    experts = np.empty((shape.num_layers, tokens, shape.top_k), dtype=EXPERT_DTYPE)
    weights = np.empty((shape.num_layers, tokens, shape.top_k), dtype=WEIGHT_DTYPE)
    for layer, child in enumerate(children):
        rng = np.random.default_rng(child)
        experts[layer] = layer_fn(layer, rng)
        weights[layer] = _weights(tokens, shape, rng)
    header = RoutingHeader(model=shape.model, num_layers=shape.num_layers,
                           num_experts=shape.num_experts, top_k=shape.top_k, tokens=tokens,
                           generator=generator, seed=seed, notes=notes,
                           weights_normalized=shape.weights_normalized,
                           moe_layers=shape.moe_layers, params=params)
    trace = RoutingTrace(header, experts, weights, f"<{generator} seed={seed}>")
    validate_routing_trace(trace)
    return trace


# ----------------------------------------------------------------- generators
def trace_from_loads(model: Any, loads: np.ndarray, *, seed: int = 0, locality: float = 0.0,
                     shuffle_experts: bool = True, generator: str = "from_loads",
                     params: dict[str, Any] | None = None, notes: str = "") -> RoutingTrace:
    """A trace whose layer ``l`` routes exactly ``loads[l, e]`` tokens to expert ``e``.

    ``loads`` is ``[layers, experts]`` (or one row used for every layer); every row must
    sum to ``tokens * top_k`` with each entry at most ``tokens``.  ``shuffle_experts``
    relabels experts randomly per layer so the hot expert is not always id 0.
    """
    shape = TraceShape.of(model)
    loads = np.asarray(loads, dtype=np.int64)
    if loads.ndim == 1:
        loads = np.broadcast_to(loads, (shape.num_layers, loads.size))
    if loads.shape != (shape.num_layers, shape.num_experts):
        raise ValueError(f"loads must be [layers, experts] = "
                         f"[{shape.num_layers}, {shape.num_experts}], got {list(loads.shape)}")
    pairs = int(loads[0].sum())
    if pairs % shape.top_k or (loads.sum(axis=1) != pairs).any() or (loads < 0).any():
        raise ValueError(f"every layer's loads must be non-negative and sum to tokens x top_k "
                         f"(top_k {shape.top_k}); got row sums {loads.sum(axis=1).tolist()}")
    tokens = pairs // shape.top_k
    _check_common(tokens, locality, seed)
    if (loads > tokens).any():
        raise ValueError(f"an expert can take each of the {tokens} tokens once; got a load "
                         f"of {int(loads.max())}")

    def layer_fn(layer: int, rng: np.random.Generator) -> np.ndarray:
        row = loads[layer]
        labels = rng.permutation(shape.num_experts) if shuffle_experts else np.arange(row.size)
        relabelled = np.empty_like(row)
        relabelled[labels] = row
        return _assign_exact(relabelled, tokens, shape.top_k, locality, rng)

    params = {"locality": locality, "shuffle_experts": shuffle_experts, **(params or {})}
    return _build(shape, tokens, seed, generator, params, notes, layer_fn)


def balanced_trace(model: Any, tokens: int, *, seed: int = 0, locality: float = 0.0,
                   notes: str = "") -> RoutingTrace:
    """Every expert gets ``tokens * k / E`` tokens (the extra ones, if it does not divide,
    go to different experts in each layer)."""
    shape = TraceShape.of(model)
    _check_common(tokens, locality, seed)
    loads = imbalanced_loads(tokens, shape.num_experts, shape.top_k, 1.0)
    return trace_from_loads(shape, loads, seed=seed, locality=locality, generator="balanced",
                            notes=notes)


def imbalanced_trace(model: Any, tokens: int, ratio: float | Sequence[float], *, seed: int = 0,
                     locality: float = 0.0, notes: str = "") -> RoutingTrace:
    """Layer ``l`` has imbalance ratio ``ratio[l]`` (or ``ratio`` for all layers): one hot
    expert (a random id per layer) with ``round(r * tokens * k / E)`` tokens, the others
    even.  The realised ``r`` differs from the target only by that rounding."""
    shape = TraceShape.of(model)
    _check_common(tokens, locality, seed)
    ratios = np.broadcast_to(np.asarray(ratio, dtype=np.float64), (shape.num_layers,))
    loads = np.stack([imbalanced_loads(tokens, shape.num_experts, shape.top_k, float(r))
                      for r in ratios])
    target = float(ratios[0]) if np.all(ratios == ratios[0]) else ratios.tolist()
    return trace_from_loads(shape, loads, seed=seed, locality=locality,
                            generator="imbalanced", params={"ratio": target}, notes=notes)


def zipf_trace(model: Any, tokens: int, exponent: float, *, seed: int = 0,
               locality: float = 0.0, shuffle_experts: bool = True,
               notes: str = "") -> RoutingTrace:
    """Experts drawn (without replacement per token) with Zipf popularity
    ``1 / rank ** exponent``; ``shuffle_experts`` assigns ranks to ids randomly per layer
    (else expert 0 is the most popular)."""
    shape = TraceShape.of(model)
    _check_common(tokens, locality, seed)
    popularity = zipf_log_popularity(shape.num_experts, exponent)

    def layer_fn(layer: int, rng: np.random.Generator) -> np.ndarray:
        ranked = rng.permutation(popularity) if shuffle_experts else popularity
        return _sample_popularity(ranked, tokens, shape.top_k, locality, rng)

    return _build(shape, tokens, seed, "zipf",
                  {"exponent": exponent, "locality": locality,
                   "shuffle_experts": shuffle_experts}, notes, layer_fn)
