"""MoE routing traces: which experts each token selects in each MoE layer.

A :class:`RoutingTrace` holds, for every MoE layer of a model and every token, the
``top_k`` selected expert ids and their routing weights:

- ``experts``: ``int16 [layers, tokens, top_k]``, ordered by descending weight (the
  order ``torch.topk`` returns them);
- ``weights``: ``float32`` of the same shape;
- a :class:`RoutingHeader` (model, ``num_layers``, ``num_experts``, ``top_k``,
  ``tokens``, generator + seed, notes, ...).

On disk a trace is one ``.npz`` file (:func:`write_routing_trace`) with the arrays
``experts``, ``weights`` and ``header`` (the header as UTF-8 JSON bytes in a ``uint8``
array, so the file loads with ``allow_pickle=False``).  :func:`read_routing_trace` and
:func:`validate_routing_trace` reject malformed traces with a
:class:`~npusim.core.errors.TraceError` naming the file, the layer/token index, the bad
value and what was expected.  Layer indices of a trace count MoE layers only
(``header.moe_layers[i]`` is the decoder layer of trace layer ``i``).

Statistics follow NPUMoE (paper 000): the per-layer load histogram, the imbalance ratio
``r = max expert load / mean expert load`` (§4.1), the capacity estimate
``n_max = r * B * k / E`` (:func:`capacity_tokens`), and Overlap@K.  Synthetic traces
come from :mod:`npusim.workload.routing_generators`; ``docs/moe.md`` shows how to record
a real one from a Hugging Face model.
"""

from __future__ import annotations

import json
import math
import zipfile
import zlib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from npusim.core.errors import TraceError
from npusim.core.json_keys import DuplicateKeyError, unique_keys

__all__ = [
    "FORMAT_NAME", "FORMAT_VERSION", "WEIGHT_SUM_TOLERANCE", "RoutingHeader", "RoutingTrace",
    "capacity_tokens", "consecutive_overlap", "expert_loads", "expert_token_counts",
    "hot_expert_overlap", "imbalance_ratio", "imbalance_ratios", "overlap_at_k",
    "read_routing_trace", "validate_routing_trace", "write_routing_trace",
]

#: Written into every header so a stray ``.npz`` is recognised as a routing trace.
FORMAT_NAME = "npusim-routing-trace"
FORMAT_VERSION = 1
#: A normalising model's top-k weights must sum to 1 within this (float32 + bf16 router).
WEIGHT_SUM_TOLERANCE = 1e-3
#: Expert ids are stored as int16: no supported model has more than 32767 experts.
EXPERT_DTYPE = np.int16
WEIGHT_DTYPE = np.float32
#: How many bad entries a validation message lists before summarising.
MAX_LISTED = 3


@dataclass(frozen=True)
class RoutingHeader:
    """What a routing trace describes.

    ``num_layers`` counts MoE layers (dense layers route nothing); ``moe_layers`` are
    their decoder-layer indices if known.  ``weights_normalized`` says whether each
    token's weights sum to 1 (the model's ``topk_weights_normalized``); validation
    against a model uses the model's value.  ``generator`` names how the trace was made
    (``"recorded"`` for a real model, else the generator function), ``seed`` its seed,
    ``params`` its parameters.
    """

    model: str
    num_layers: int
    num_experts: int
    top_k: int
    tokens: int
    generator: str = "recorded"
    seed: int | None = None
    notes: str = ""
    weights_normalized: bool = False
    moe_layers: tuple[int, ...] = ()
    params: dict[str, Any] = field(default_factory=dict)
    format: str = FORMAT_NAME
    version: int = FORMAT_VERSION

    def to_json(self) -> str:
        """The header as a JSON object (what :func:`write_routing_trace` stores)."""
        data = asdict(self)
        data["moe_layers"] = list(self.moe_layers)
        return json.dumps(data, sort_keys=True)

    @classmethod
    def from_mapping(cls, data: Any, source: str) -> "RoutingHeader":
        """Build a header from parsed JSON, naming the bad field on error.

        Every field is type-checked here (JSON ``true`` is not an integer, ``"false"`` is
        not a boolean) so a hand-edited header fails with its field, never later with a
        Python error.  Unknown keys are ignored (newer writers may add some).
        """
        if not isinstance(data, dict):
            raise TraceError(f"{source}: header: expected a JSON object, got "
                             f"{_json_type(data)}")
        if data.get("format", FORMAT_NAME) != FORMAT_NAME:
            raise TraceError(f"{source}: header.format: expected {FORMAT_NAME!r}, got "
                             f"{_short(data.get('format'))}")
        version = data.get("version", FORMAT_VERSION)
        if not _is_int(version):
            raise TraceError(f"{source}: header.version: expected the integer "
                             f"{FORMAT_VERSION}, got {_short(version)}")
        if version != FORMAT_VERSION:
            raise TraceError(f"{source}: header.version: expected {FORMAT_VERSION}, got "
                             f"{version} (written by another npusim version)")
        ints = {"num_layers": 1, "num_experts": 1, "top_k": 1, "tokens": 1}
        for key, minimum in ints.items():
            value = data.get(key)
            if value is None:
                raise TraceError(f"{source}: header.{key}: required field is missing")
            if not _is_int(value) or value < minimum:
                raise TraceError(f"{source}: header.{key}: expected an integer >= {minimum}, "
                                 f"got {_short(value)}")
        if not isinstance(data.get("model"), str) or not data["model"]:
            raise TraceError(f"{source}: header.model: expected the model name (a "
                             f"non-empty string), got {_short(data.get('model'))}")
        if data["top_k"] > data["num_experts"]:
            raise TraceError(f"{source}: header.top_k: expected at most num_experts "
                             f"{data['num_experts']}, got {data['top_k']}")
        layers = data.get("moe_layers", [])
        if not isinstance(layers, list) or not all(_is_int(i) and i >= 0 for i in layers):
            raise TraceError(f"{source}: header.moe_layers: expected a list of decoder-layer "
                             f"indices (integers >= 0), got {_short(layers)}")
        # Optional fields: absent means the default; present must have the right type.
        for key, check, expected in (
                ("generator", lambda v: isinstance(v, str), "a string"),
                ("notes", lambda v: isinstance(v, str), "a string"),
                ("seed", lambda v: v is None or _is_int(v), "an integer or null"),
                ("weights_normalized", lambda v: isinstance(v, bool), "true or false"),
                ("params", lambda v: isinstance(v, dict), "a JSON object")):
            if key in data and not check(data[key]):
                raise TraceError(f"{source}: header.{key}: expected {expected}, got "
                                 f"{_short(data[key])}")
        known = {f for f in cls.__dataclass_fields__}
        kwargs = {k: v for k, v in data.items() if k in known}
        kwargs["moe_layers"] = tuple(layers)
        return cls(**kwargs)


def _is_int(value: Any) -> bool:
    """A JSON integer (``bool`` is a Python int subclass, but ``true`` is not a count)."""
    return isinstance(value, int) and not isinstance(value, bool)


def _json_type(value: Any) -> str:
    """The JSON name of a parsed value's type, for messages."""
    names = {dict: "object", list: "array", str: "string", bool: "boolean", int: "number",
             float: "number", type(None): "null"}
    return f"a JSON {names.get(type(value), type(value).__name__)} ({_short(value)})"


def _short(value: Any) -> str:
    """``value`` as JSON, shortened to one line a message can hold."""
    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


@dataclass(frozen=True, eq=False)
class RoutingTrace:
    """Per MoE layer, per token: the ``top_k`` selected experts and their weights."""

    header: RoutingHeader
    experts: np.ndarray
    weights: np.ndarray
    source: str = "<memory>"

    @property
    def num_layers(self) -> int:
        """MoE layers in the trace."""
        return self.header.num_layers

    @property
    def num_experts(self) -> int:
        """Routed experts per layer."""
        return self.header.num_experts

    @property
    def top_k(self) -> int:
        """Experts selected per token."""
        return self.header.top_k

    @property
    def tokens(self) -> int:
        """Tokens routed (the second axis)."""
        return self.header.tokens

    def layer_of(self, decoder_layer: int) -> int:
        """Trace layer index of decoder layer ``decoder_layer`` (needs ``moe_layers``)."""
        try:
            return self.header.moe_layers.index(decoder_layer)
        except ValueError:
            raise TraceError(f"{self.source}: decoder layer {decoder_layer} is not a MoE "
                             f"layer of this trace (moe_layers "
                             f"{list(self.header.moe_layers) or 'not recorded'})") from None


# ------------------------------------------------------------------ validation
def _where(source: str, layer: int, token: int, header: RoutingHeader) -> str:
    decoder = (f" (decoder layer {header.moe_layers[layer]})"
               if len(header.moe_layers) == header.num_layers else "")
    return f"{source}: layer {layer}{decoder}, token {token}"


def validate_routing_trace(trace: RoutingTrace, model: Any = None) -> None:
    """Raise :class:`TraceError` if ``trace`` is malformed (or does not fit ``model``).

    Checks: array shapes ``[num_layers, tokens, top_k]`` and dtypes; against ``model``
    (a :class:`~npusim.workload.model_config.ModelConfig`): expert count, ``top_k`` and
    the number of MoE layers; every expert id in ``0..num_experts-1``; no expert twice
    in one token's top-k; weights finite and in ``[0, 1]``; and, if the model (or,
    without a model, the header) normalises top-k weights, each token's weights sum to 1
    within :data:`WEIGHT_SUM_TOLERANCE`.
    """
    header, src = trace.header, trace.source
    normalized = header.weights_normalized
    if model is not None:
        expected = {"num_experts": model.num_experts, "top_k": model.experts_per_token,
                    "num_layers": len(model.moe_layers)}
        for key, value in expected.items():
            if getattr(header, key) != value:
                what = "MoE layers" if key == "num_layers" else key
                raise TraceError(f"{src}: header.{key}: model {model.name} has {value} "
                                 f"{what}, the trace has {getattr(header, key)}")
        if header.moe_layers and tuple(header.moe_layers) != model.moe_layers:
            raise TraceError(f"{src}: header.moe_layers: expected the MoE layers of "
                             f"{model.name} {list(model.moe_layers)}, got "
                             f"{list(header.moe_layers)}")
        normalized = model.topk_weights_normalized
    if header.moe_layers and len(header.moe_layers) != header.num_layers:
        raise TraceError(f"{src}: header.moe_layers: expected {header.num_layers} indices "
                         f"(num_layers), got {len(header.moe_layers)}")
    shape = (header.num_layers, header.tokens, header.top_k)
    for name, array in (("experts", trace.experts), ("weights", trace.weights)):
        if not isinstance(array, np.ndarray) or array.shape != shape:
            got = (list(array.shape) if isinstance(array, np.ndarray)
                   else type(array).__name__)
            raise TraceError(f"{src}: {name}: expected shape [layers, tokens, top_k] = "
                             f"{list(shape)} from the header, got {got}")
    if not np.issubdtype(trace.experts.dtype, np.integer):
        raise TraceError(f"{src}: experts: expected integer expert ids, got dtype "
                         f"{trace.experts.dtype}")
    if not np.issubdtype(trace.weights.dtype, np.floating):
        raise TraceError(f"{src}: weights: expected floating-point weights, got dtype "
                         f"{trace.weights.dtype}")
    experts, weights, count = trace.experts, trace.weights, header.num_experts
    bad = np.argwhere((experts < 0) | (experts >= count))
    if len(bad):
        layer, token, slot = (int(i) for i in bad[0])
        raise TraceError(f"{_where(src, layer, token, header)}: expert id "
                         f"{int(experts[layer, token, slot])} does not exist; expected "
                         f"0..{count - 1} ({header.model} has {count} experts)"
                         f"{_more(len(bad))}")
    ordered = np.sort(experts, axis=-1)
    bad = np.argwhere(np.any(ordered[..., 1:] == ordered[..., :-1], axis=-1))
    if len(bad):
        layer, token = (int(i) for i in bad[0])
        raise TraceError(f"{_where(src, layer, token, header)}: duplicate expert in top-k "
                         f"{experts[layer, token].tolist()}; expected {header.top_k} "
                         f"distinct experts{_more(len(bad))}")
    bad = np.argwhere(~np.isfinite(weights) | (weights < 0)
                      | (weights > 1 + WEIGHT_SUM_TOLERANCE))
    if len(bad):
        layer, token, slot = (int(i) for i in bad[0])
        raise TraceError(f"{_where(src, layer, token, header)}: weight "
                         f"{float(weights[layer, token, slot])!r} of expert "
                         f"{int(experts[layer, token, slot])}; expected a gate value in "
                         f"[0, 1]{_more(len(bad))}")
    if normalized:
        sums = weights.sum(axis=-1, dtype=np.float64)
        bad = np.argwhere(np.abs(sums - 1.0) > WEIGHT_SUM_TOLERANCE)
        if len(bad):
            layer, token = (int(i) for i in bad[0])
            raise TraceError(f"{_where(src, layer, token, header)}: top-k weights sum to "
                             f"{sums[layer, token]:.6f}; expected 1 within "
                             f"{WEIGHT_SUM_TOLERANCE} because {header.model} renormalises "
                             f"its top-k weights{_more(len(bad))}")


def _more(count: int) -> str:
    return f" (and {count - 1} more)" if count > 1 else ""


# ------------------------------------------------------------------------ I/O
def write_routing_trace(path: str | Path, trace: RoutingTrace) -> Path:
    """Validate ``trace`` and write it as one ``.npz`` (arrays + JSON header)."""
    validate_routing_trace(trace)
    path = Path(path)
    header = np.frombuffer(trace.header.to_json().encode("utf-8"), dtype=np.uint8)
    with path.open("wb") as handle:  # an open handle stops numpy appending ".npz"
        np.savez_compressed(handle, experts=trace.experts.astype(EXPERT_DTYPE),
                            weights=trace.weights.astype(WEIGHT_DTYPE), header=header)
    return path


#: How an ``.npz`` (a zip archive, possibly empty) starts.  Checked before numpy sees
#: the file: for anything else ``np.load`` falls back to unpickling and, refused by
#: ``allow_pickle=False``, suggests loading the file unsafely.
_ZIP_MAGIC = (b"PK\x03\x04", b"PK\x05\x06")
_NOT_A_TRACE = "not a routing trace (an .npz written by npusim's write_routing_trace)"


def read_routing_trace(path: str | Path, model: Any = None) -> RoutingTrace:
    """Read and validate a trace written by :func:`write_routing_trace`.

    ``model`` (optional) also checks the trace against that model's MoE layout.  Never
    unpickles: a file that is not such an ``.npz`` is a :class:`TraceError`.
    """
    source = str(path)
    try:
        with open(path, "rb") as handle:
            magic = handle.read(4)
    except FileNotFoundError:
        raise TraceError(f"{source}: file not found") from None
    except IsADirectoryError:
        raise TraceError(f"{source}: is a directory; expected a routing trace file "
                         f"(.npz)") from None
    except OSError as exc:
        raise TraceError(f"{source}: cannot read the file ({exc.strerror or exc})") from None
    if magic not in _ZIP_MAGIC:
        what = ("the file is empty" if not magic else
                "a single .npy array, not an .npz archive" if magic.startswith(b"\x93NUM")
                else "the file is not a zip archive")
        raise TraceError(f"{source}: {_NOT_A_TRACE}: {what}")
    arrays = {}
    try:
        with np.load(path, allow_pickle=False) as data:
            missing = [k for k in ("experts", "weights", "header") if k not in data.files]
            if missing:
                raise TraceError(f"{source}: missing array(s) {', '.join(missing)}; expected "
                                 "experts, weights and header (a file written by "
                                 "write_routing_trace)")
            for name in ("experts", "weights", "header"):
                try:
                    arrays[name] = data[name]
                except ValueError as exc:
                    if "pickle" not in str(exc):
                        raise
                    raise TraceError(f"{source}: {name}: holds Python objects; expected a "
                                     f"numeric array (npusim never unpickles a trace)") from None
    except (zipfile.BadZipFile, OSError, ValueError, EOFError, zlib.error) as exc:
        raise TraceError(f"{source}: {_NOT_A_TRACE}: damaged archive ({exc})") from None
    experts, weights, raw = arrays["experts"], arrays["weights"], arrays["header"]
    if raw.dtype != np.uint8 or raw.ndim != 1:
        raise TraceError(f"{source}: header: expected a 1-D uint8 array of UTF-8 JSON, got "
                         f"dtype {raw.dtype} with shape {list(raw.shape)}")
    try:
        header_data = json.loads(raw.tobytes().decode("utf-8"), object_pairs_hook=unique_keys)
    except DuplicateKeyError as exc:
        raise TraceError(f"{source}: header: key {exc.key!r} appears twice in one object; "
                         "expected each key once") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise TraceError(f"{source}: header: not valid JSON ({exc})") from None
    except ValueError:  # only an integer past Python's 4300-digit conversion limit
        raise TraceError(f"{source}: header: an integer of more than 4300 digits; expected "
                         "header fields of at most a few dozen digits") from None
    except RecursionError:
        raise TraceError(f"{source}: header: JSON nested too deeply; expected a flat "
                         f"object of header fields") from None
    header = RoutingHeader.from_mapping(header_data, source)
    trace = RoutingTrace(header, experts, weights, source)
    validate_routing_trace(trace, model)
    return trace


# ------------------------------------------------------------------ statistics
def expert_token_counts(trace: RoutingTrace, layer: int,
                        token_slice: slice = slice(None)) -> np.ndarray:
    """Tokens routed to each expert of trace layer ``layer`` for the tokens in
    ``token_slice`` (one batch): ``int64 [num_experts]``, summing to tokens x top_k.
    This is what a MoE strategy consumes for one iteration."""
    if not 0 <= layer < trace.num_layers:
        raise IndexError(f"{trace.source}: layer {layer} outside 0..{trace.num_layers - 1}")
    selected = trace.experts[layer, token_slice].ravel()
    return np.bincount(selected.astype(np.int64), minlength=trace.num_experts)


def expert_loads(trace: RoutingTrace, token_slice: slice = slice(None)) -> np.ndarray:
    """Per-layer load histogram: ``int64 [num_layers, num_experts]`` token counts."""
    return np.stack([expert_token_counts(trace, layer, token_slice)
                     for layer in range(trace.num_layers)])


def imbalance_ratio(loads: np.ndarray) -> float:
    """NPUMoE's ``r = max_e n_e / mean_e n_e`` of one layer's loads (1 = balanced)."""
    loads = np.asarray(loads, dtype=np.float64)
    mean = loads.mean()
    if mean <= 0:
        raise ValueError("imbalance ratio of a layer with no routed tokens is undefined")
    return float(loads.max() / mean)


def imbalance_ratios(trace: RoutingTrace, token_slice: slice = slice(None)) -> np.ndarray:
    """``r`` of every layer for the tokens in ``token_slice``: ``float64 [num_layers]``."""
    return np.array([imbalance_ratio(row) for row in expert_loads(trace, token_slice)])


def capacity_tokens(batch_tokens: int, num_experts: int, imbalance_ratio: float,
                    top_k: int = 1) -> int:
    """NPUMoE's busiest-expert estimate ``n_max = r * B * k / E`` (§4.1), rounded up.

    ``B * k / E`` is the mean load (``C_base``; NPUMoE writes ``B/E`` for ``k = 1``).
    The result is capped at ``batch_tokens``: an expert appears at most once per token.
    Example from the paper: ``B = 256, E = 8, r = 2`` gives 64 tokens.
    """
    for name, value in (("batch_tokens", batch_tokens), ("num_experts", num_experts),
                        ("top_k", top_k)):
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    if top_k > num_experts:
        raise ValueError(f"top_k {top_k} exceeds num_experts {num_experts}")
    if not imbalance_ratio >= 1:
        raise ValueError(f"imbalance_ratio must be >= 1 (max load / mean load), "
                         f"got {imbalance_ratio!r}")
    # round before ceil so 2 * 256 / 8 computed in floats stays 64, not 65
    estimate = math.ceil(round(imbalance_ratio * batch_tokens * top_k / num_experts, 9))
    return min(estimate, batch_tokens)


def _top(experts: np.ndarray, k: int | None, top_k: int) -> np.ndarray:
    k = top_k if k is None else k
    if not 1 <= k <= top_k:
        raise ValueError(f"K must be in 1..top_k {top_k}, got {k}")
    return experts[..., :k]


def _set_overlap(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``|a ∩ b|`` per row for rows of distinct ids (``[..., K]`` each)."""
    return (a[..., :, None] == b[..., None, :]).any(axis=-1).sum(axis=-1)


def overlap_at_k(trace_a: RoutingTrace, trace_b: RoutingTrace, k: int | None = None,
                 layer: int | None = None) -> float:
    """Mean over tokens (and layers) of ``|topK_a ∩ topK_b| / K``.

    ``topK`` of a token is its ``K`` highest-weight experts (the first ``K`` entries);
    ``K`` defaults to ``top_k``.  Both traces must route the same tokens through the same
    layers (e.g. a recorded trace and a predicted one).  ``layer`` restricts to one layer.
    """
    if trace_a.experts.shape != trace_b.experts.shape:
        raise ValueError(f"traces differ in shape: {trace_a.experts.shape} vs "
                         f"{trace_b.experts.shape}")
    a, b = trace_a.experts, trace_b.experts
    if layer is not None:
        a, b = a[layer], b[layer]
    a, b = _top(a, k, trace_a.top_k), _top(b, k, trace_b.top_k)
    return float(_set_overlap(a, b).mean() / a.shape[-1])


def consecutive_overlap(trace: RoutingTrace, k: int | None = None,
                        layer: int | None = None) -> float:
    """Overlap@K between each token and the one before it (temporal locality): 1 if
    every token reuses its predecessor's experts, about ``K / E`` for random routing."""
    experts = trace.experts if layer is None else trace.experts[layer:layer + 1]
    experts = _top(experts, k, trace.top_k)
    if experts.shape[1] < 2:
        raise ValueError("consecutive overlap needs at least two tokens")
    return float(_set_overlap(experts[:, 1:], experts[:, :-1]).mean() / experts.shape[-1])


def hot_expert_overlap(loads_a: np.ndarray, loads_b: np.ndarray, k: int) -> np.ndarray:
    """Per-layer Overlap@K of the ``K`` most-loaded experts of two load histograms
    (``[layers, experts]``), as NPUMoE compares calibration and runtime (§5.8, Fig. 18).
    Ties are broken by expert id so the result is deterministic."""
    loads_a, loads_b = np.atleast_2d(loads_a), np.atleast_2d(loads_b)
    if loads_a.shape != loads_b.shape:
        raise ValueError(f"load histograms differ in shape: {loads_a.shape} vs {loads_b.shape}")
    if not 1 <= k <= loads_a.shape[-1]:
        raise ValueError(f"K must be in 1..{loads_a.shape[-1]}, got {k}")
    top_a = np.argsort(-loads_a, axis=-1, kind="stable")[:, :k]
    top_b = np.argsort(-loads_b, axis=-1, kind="stable")[:, :k]
    return _set_overlap(top_a, top_b) / k
