"""LLM architectures from Hugging Face ``config.json`` files.

A :class:`ModelConfig` is the validated, frozen view of the fields of a Hugging Face
``config.json`` that shape the compute graph (sizes, head counts, MoE layout); every other
key of a real config is accepted and ignored.  Field names are the Hugging Face ones, so
a config downloaded from the Hub loads unchanged.  :func:`load_model` takes the name of a
shipped model (``qwen3_4b``, ``Qwen3-4B``) or a path to any ``config.json``; every mistake
becomes a :class:`~npusim.core.errors.ConfigError` naming file, field, bad value and what
was expected.

Supported families: dense decoder-only transformers with (grouped-query) attention and a
gated MLP (Llama, Mistral, Qwen2/3), and MoE models whose expert layout is described by
the Qwen-MoE (``num_experts``, ``decoder_sparse_step``, ``mlp_only_layers``,
``shared_expert_intermediate_size``), Mixtral/Phi-MoE (``num_local_experts``) or
DeepSeek-MoE (``n_routed_experts``, ``n_shared_experts``, ``first_k_dense_replace``,
``moe_layer_freq``) fields.  Parameter counts (in :mod:`npusim.workload.model_params`,
mixed into :class:`ModelConfig`) follow the Hugging Face module layout of those families,
including Qwen2's q/k/v biases and Phi-MoE's LayerNorm and LM-head biases;
``docs/models.md`` lists what is ignored.
"""

from __future__ import annotations

import difflib
import json
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (AliasChoices, ConfigDict, Field, PrivateAttr,
                      ValidationError, model_validator)

from npusim.core.errors import ConfigError
from npusim.core.json_keys import DuplicateKeyError, unique_keys
from npusim.core.registry import NumbersNotBooleans
from npusim.core.text import UNENCODABLE, unencodable_path, utf16_hint
from npusim.workload.model_params import GATED_MLP_MATRICES, LayerParams, ParamCounts

__all__ = ["GATED_MLP_MATRICES", "LayerParams", "ModelConfig", "list_models", "load_model",
           "models_dir", "parse_model"]

#: Strict positive integer: a size given as ``"2560"`` or ``2560.5`` is a typo, not a size.
PositiveInt = Annotated[int, Field(gt=0, strict=True)]
#: Most decoder layers a model config may declare.
MAX_LAYERS = 10_000
NonNegativeInt = Annotated[int, Field(ge=0, strict=True)]

#: ``model_type`` values whose attention normalises each query and key head with an
#: RMSNorm over ``head_dim`` (``q_norm``/``k_norm``); the flag is implied by the
#: architecture, Hugging Face configs carry no field for it.
QK_NORM_MODEL_TYPES = frozenset({"qwen3", "qwen3_moe"})

#: ``model_type`` values whose q/k/v projections always carry a bias (o_proj none):
#: Qwen2 / Qwen1.5-MoE hard-code ``bias=True`` and their configs have no field for it.
QKV_BIAS_MODEL_TYPES = frozenset({"qwen2", "qwen2_moe"})

#: ``model_type`` values that use ``nn.LayerNorm`` (weight and bias) instead of RMSNorm
#: (Phi-MoE; its config still calls the epsilon ``rms_norm_eps``).
LAYERNORM_MODEL_TYPES = frozenset({"phimoe"})

#: ``model_type`` values that always renormalise the top-k routing weights to sum to 1
#: although their config has no ``norm_topk_prob`` (Mixtral: softmax over the top-k).
TOPK_NORMALISED_MODEL_TYPES = frozenset({"mixtral"})

#: Bytes per element of the ``torch_dtype`` strings Hugging Face configs use.
TORCH_DTYPE_BYTES = {"float32": 4, "float": 4, "float16": 2, "half": 2, "bfloat16": 2,
                     "float8_e4m3fn": 1, "float8_e5m2": 1, "int8": 1}

#: Shipped configs live in ``<workloads root>/models``.
MODELS_SUBDIR = "models"

LayerKind = Literal["dense", "moe"]


class ModelConfig(ParamCounts, NumbersNotBooleans):
    """A decoder-only LLM described by Hugging Face ``config.json`` fields.

    Fields whose resolved value depends on other fields are stored under a ``*_config``
    attribute (aliased to the Hugging Face key) and exposed resolved by a property of the
    Hugging Face name: ``head_dim`` (config value, else ``hidden_size //
    num_attention_heads``), ``num_key_value_heads`` (else ``num_attention_heads``, the
    Hugging Face default) and ``num_experts`` (any of the three spellings, else 0).
    """

    model_config = ConfigDict(frozen=True, extra="ignore", populate_by_name=True)

    hidden_size: PositiveInt
    intermediate_size: PositiveInt = Field(
        description="Dense MLP width (also the expert width of Mixtral-style MoE configs "
                    "that have no moe_intermediate_size).")
    # Bounded: parameter counts are summed layer by layer, so a typo like 10**9 layers
    # would run for minutes before the capacity check could say it does not fit.
    num_hidden_layers: PositiveInt = Field(le=MAX_LAYERS, description=(
        f"Decoder layers (at most {MAX_LAYERS}; published models have a few hundred)."))
    num_attention_heads: PositiveInt
    num_key_value_heads_config: PositiveInt | None = Field(None, alias="num_key_value_heads")
    head_dim_config: PositiveInt | None = Field(None, alias="head_dim")
    vocab_size: PositiveInt
    tie_word_embeddings: bool = Field(
        False, description="LM head shares the embedding matrix (default False, as in the "
                           "Llama/Qwen/Mixtral config classes).")
    torch_dtype: str | None = Field(None, validation_alias=AliasChoices("torch_dtype", "dtype"))
    rms_norm_eps: float | None = None
    max_position_embeddings: PositiveInt | None = None
    rope_theta: float | None = None
    hidden_act: str = "silu"
    attention_bias: bool = False
    lm_head_bias: bool = Field(False, description="LM head has a bias (Phi-MoE).")
    architectures: tuple[str, ...] = ()
    model_type: str = ""

    # MoE fields, in every spelling the supported families use.
    num_experts_config: NonNegativeInt | None = Field(None, alias="num_experts")
    num_local_experts: NonNegativeInt | None = None
    n_routed_experts: NonNegativeInt | None = None
    num_experts_per_tok: PositiveInt | None = None
    moe_intermediate_size: PositiveInt | None = None
    shared_expert_intermediate_size: NonNegativeInt | None = None
    n_shared_experts: NonNegativeInt | None = None
    first_k_dense_replace: NonNegativeInt | None = None
    decoder_sparse_step: PositiveInt | None = None
    moe_layer_freq: PositiveInt | None = None
    mlp_only_layers: tuple[NonNegativeInt, ...] = ()
    norm_topk_prob: bool | None = None

    _name: str = PrivateAttr("")

    # ----------------------------------------------------------------- validation
    @model_validator(mode="after")
    def _check_consistency(self) -> "ModelConfig":
        problems = self.consistency_problems()
        if problems:
            raise _Problems(problems)
        return self

    def consistency_problems(self) -> list[tuple[str, str]]:
        """Cross-field problems as ``(field, message)`` pairs (empty when consistent)."""
        problems: list[tuple[str, str]] = []
        heads, hidden = self.num_attention_heads, self.hidden_size
        if self.head_dim_config is None and hidden % heads:
            problems.append(("num_attention_heads",
                             f"expected a divisor of hidden_size {hidden} (head_dim is not "
                             f"set, so it would be hidden_size / heads), got {heads}"))
        kv = self.num_key_value_heads_config
        if kv is not None and (kv > heads or heads % kv):
            problems.append(("num_key_value_heads",
                             f"expected a divisor of num_attention_heads {heads} (each KV "
                             f"head serves a whole group of query heads), got {kv}"))
        spelled = {key: value for key, value in (("num_experts", self.num_experts_config),
                                                 ("num_local_experts", self.num_local_experts),
                                                 ("n_routed_experts", self.n_routed_experts))
                   if value}
        if len(set(spelled.values())) > 1:
            listing = ", ".join(f"{k}={v}" for k, v in spelled.items())
            problems.append((next(iter(spelled)), f"conflicting expert counts ({listing}); "
                                                  "expected one value"))
        experts = max(spelled.values(), default=0)
        top_k = self.num_experts_per_tok
        if experts and top_k is None:
            problems.append(("num_experts_per_tok",
                             f"required field is missing: a MoE config with {experts} "
                             "experts must say how many each token uses"))
        elif experts and top_k > experts:
            problems.append(("num_experts_per_tok",
                             f"expected at most the {experts} experts, got {top_k}"))
        elif not experts and top_k is not None:
            problems.append(("num_experts_per_tok",
                             f"got {top_k} but no expert count is set; expected num_experts, "
                             "num_local_experts or n_routed_experts (a misspelt key?)"))
        if self.shared_expert_intermediate_size and self.n_shared_experts:
            problems.append(("shared_expert_intermediate_size",
                             "both shared_expert_intermediate_size (Qwen-MoE) and "
                             "n_shared_experts (DeepSeek) are set; expected one"))
        layers = self.num_hidden_layers
        if self.first_k_dense_replace is not None and self.first_k_dense_replace > layers:
            problems.append(("first_k_dense_replace",
                             f"expected at most num_hidden_layers {layers}, "
                             f"got {self.first_k_dense_replace}"))
        for index, layer in enumerate(self.mlp_only_layers):
            if layer >= layers:
                problems.append((f"mlp_only_layers[{index}]",
                                 f"expected a layer index below {layers}, got {layer}"))
        return problems

    # ------------------------------------------------------------- resolved shape
    @property
    def name(self) -> str:
        """Shipped name (``qwen3_4b``) or file stem the config was loaded from."""
        return self._name or self.model_type or "model"

    @property
    def head_dim(self) -> int:
        """Per-head width: the config's ``head_dim``, else ``hidden_size // heads``."""
        return self.head_dim_config or self.hidden_size // self.num_attention_heads

    @property
    def num_key_value_heads(self) -> int:
        """KV heads (GQA); Hugging Face falls back to ``num_attention_heads`` (MHA)."""
        return self.num_key_value_heads_config or self.num_attention_heads

    @property
    def q_size(self) -> int:
        """Width of the query projection output (``heads * head_dim``; may differ from
        ``hidden_size``, e.g. Qwen3-4B: 32 x 128 = 4096 vs 2560)."""
        return self.num_attention_heads * self.head_dim

    @property
    def kv_size(self) -> int:
        """Width of the key (and of the value) projection output."""
        return self.num_key_value_heads * self.head_dim

    @property
    def qk_norm(self) -> bool:
        """Whether attention has per-head RMSNorms on queries and keys (Qwen3)."""
        return self.model_type in QK_NORM_MODEL_TYPES

    @property
    def qkv_bias(self) -> bool:
        """Whether q/k/v projections have biases (``attention_bias``, or Qwen2-family)."""
        return self.attention_bias or self.model_type in QKV_BIAS_MODEL_TYPES

    @property
    def o_bias(self) -> bool:
        """Whether the output projection has a bias (``attention_bias``)."""
        return self.attention_bias

    @property
    def norm_bias(self) -> bool:
        """Whether the layer norms are LayerNorms with a bias (Phi-MoE) not RMSNorms."""
        return self.model_type in LAYERNORM_MODEL_TYPES

    @property
    def topk_weights_normalized(self) -> bool:
        """Whether a token's top-k routing weights are renormalised to sum to 1.

        ``norm_topk_prob`` when the config sets it (Qwen3-MoE true, Qwen1.5-MoE and
        DeepSeek-MoE false); otherwise true for Mixtral (softmax over the top-k logits)
        and false for everything else: plain softmax-then-top-k weights sum to less than
        1, and Phi-MoE's sparsemixer gives each selected expert its own masked-softmax
        weight (each at most 1, the sum up to ``top_k``).
        """
        if self.norm_topk_prob is not None:
            return self.norm_topk_prob
        return self.model_type in TOPK_NORMALISED_MODEL_TYPES

    @property
    def num_experts(self) -> int:
        """Routed experts per MoE layer (0 for a dense model)."""
        return self.num_experts_config or self.num_local_experts or self.n_routed_experts or 0

    @property
    def is_moe(self) -> bool:
        """Whether any layer routes tokens to experts."""
        return self.num_experts > 0 and "moe" in self.layer_kinds

    @property
    def experts_per_token(self) -> int:
        """Experts each token is routed to (``num_experts_per_tok``; 0 if dense)."""
        return (self.num_experts_per_tok or 0) if self.num_experts else 0

    @property
    def expert_intermediate_size(self) -> int:
        """Width of one routed expert (``moe_intermediate_size``, else the Mixtral-style
        ``intermediate_size``)."""
        return self.moe_intermediate_size or self.intermediate_size

    @property
    def shared_intermediate_size(self) -> int:
        """Total width of the always-active shared experts of a MoE layer (0 if none).

        Qwen-MoE has one shared expert of ``shared_expert_intermediate_size``; DeepSeek
        fuses ``n_shared_experts`` experts of ``moe_intermediate_size`` into one MLP.
        """
        if self.shared_expert_intermediate_size:
            return self.shared_expert_intermediate_size
        if self.n_shared_experts:
            return self.n_shared_experts * self.expert_intermediate_size
        return 0

    @property
    def shared_expert_gate(self) -> bool:
        """Qwen-MoE scales its shared expert by ``sigmoid(Linear(hidden, 1))``."""
        return bool(self.shared_expert_intermediate_size)

    def layer_kind(self, layer: int) -> LayerKind:
        """``"moe"`` if decoder layer ``layer`` (0-based) routes to experts, else ``"dense"``.

        A layer is dense if the model has no experts, if it is listed in
        ``mlp_only_layers``, if it is one of the first ``first_k_dense_replace`` layers,
        or if ``moe_layer_freq`` (DeepSeek: ``layer % freq == 0`` is MoE) or
        ``decoder_sparse_step`` (Qwen-MoE: ``(layer + 1) % step == 0`` is MoE) skip it.
        """
        if not 0 <= layer < self.num_hidden_layers:
            raise IndexError(f"{self.name}: layer {layer} outside 0..{self.num_hidden_layers - 1}")
        if not self.num_experts or layer in self.mlp_only_layers:
            return "dense"
        if self.first_k_dense_replace is not None and layer < self.first_k_dense_replace:
            return "dense"
        if self.moe_layer_freq is not None and layer % self.moe_layer_freq:
            return "dense"
        if self.decoder_sparse_step is not None and (layer + 1) % self.decoder_sparse_step:
            return "dense"
        return "moe"

    @property
    def layer_kinds(self) -> tuple[LayerKind, ...]:
        """Kind of every decoder layer, in order."""
        return tuple(self.layer_kind(i) for i in range(self.num_hidden_layers))

    @property
    def moe_layers(self) -> tuple[int, ...]:
        """Indices of the decoder layers that route to experts (what a routing trace
        covers, in order)."""
        return tuple(i for i, kind in enumerate(self.layer_kinds) if kind == "moe")

    @property
    def torch_dtype_bytes(self) -> int | None:
        """Bytes per weight of the checkpoint's ``torch_dtype`` (None if unknown)."""
        return TORCH_DTYPE_BYTES.get(self.torch_dtype or "")


class _Problems(ValueError):
    """Cross-field problems raised inside validation, unpacked by :func:`parse_model`."""

    def __init__(self, problems: list[tuple[str, str]]):
        self.problems = problems
        super().__init__("; ".join(f"{path}: {message}" for path, message in problems))


def _describe(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _problems_of(exc: ValidationError) -> list[tuple[str, str]]:
    """Turn a pydantic error into ``(field path, message)`` pairs naming the bad value."""
    problems: list[tuple[str, str]] = []
    for error in exc.errors(include_url=False):
        cause = (error.get("ctx") or {}).get("error")
        if isinstance(cause, _Problems):
            problems.extend(cause.problems)
            continue
        path = ""
        for part in error["loc"]:
            path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
        given = error.get("input")
        if error["type"] == "missing":
            message = "required field is missing (every Hugging Face config.json of a " \
                      "decoder-only LLM has it)"
        elif isinstance(given, dict):
            # a check across the whole config names its field and value itself; echoing
            # the config would bury it.  "KEY: ..." is reported at that key.
            message = error["msg"].removeprefix("Value error, ")
            key, _, rest = message.partition(": ")
            if rest and key in given:
                path, message = (f"{path}.{key}" if path else key), rest
        else:
            message = f"{error['msg'].removeprefix('Value error, ')} (got {_describe(given)})"
        problems.append((path, message))
    return problems


def parse_model(data: Any, source: str = "<config>", name: str = "") -> ModelConfig:
    """Validate a parsed ``config.json`` mapping; raise :class:`ConfigError` on problems."""
    if not isinstance(data, dict):
        raise ConfigError(source, [("", "expected a JSON object (a Hugging Face "
                                        f"config.json) at the top level, got {type(data).__name__}")])
    try:
        model = ModelConfig.model_validate(data)
    except ValidationError as exc:
        problems = _problems_of(exc)
        inner = data.get("text_config")
        missing = [path for path, message in problems if message.startswith("required field")]
        if missing and isinstance(inner, dict) and set(missing) & set(inner):
            # a multimodal config (Gemma 3, Llama 4, Qwen2.5-VL) keeps its decoder there
            raise ConfigError(source, [("text_config", (
                f"the language model's fields ({', '.join(sorted(set(missing) & set(inner)))}) "
                "are inside text_config (a multimodal model's config.json); expected them at "
                "the top level: save text_config's contents as a config.json of their own "
                "and name that file"))]) from None
        raise ConfigError(source, problems) from None
    model._name = name
    return model


def models_dir() -> Path:
    """Directory of the shipped configs (``$NPUSIM_WORKLOADS/models`` if set)."""
    from npusim.config.presets import workloads_root  # lazy: pulls in YAML

    return workloads_root() / MODELS_SUBDIR


def _normalise(name: str) -> str:
    return name.strip().lower().replace("-", "_").replace(".", "_")


def list_models() -> list[str]:
    """Names of the shipped model configs (``qwen3_4b``, ...)."""
    root = models_dir()
    return sorted(p.stem for p in root.glob("*.json")) if root.is_dir() else []


def load_model(name_or_path: str | Path) -> ModelConfig:
    """Load a shipped model by name or any Hugging Face ``config.json`` by path.

    Names are matched case-insensitively with ``-`` and ``.`` read as ``_``, so
    ``Qwen3-4B``, ``qwen3_4b`` and ``Qwen/Qwen3-4B`` (a Hub id) all find
    ``workloads/models/qwen3_4b.json``.  A directory is read as ``<dir>/config.json``.
    """
    path = Path(name_or_path)
    if path.is_dir():
        path = path / "config.json"
    elif not path.exists() and path.suffix != ".json":
        shipped = models_dir() / f"{_normalise(path.name)}.json"
        if not shipped.is_file():
            known = list_models()
            close = difflib.get_close_matches(_normalise(path.name), known, n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise ConfigError(str(name_or_path), [("", f"no such file and no shipped model of "
                                                       f"that name; {hint}shipped models: "
                                                       f"{', '.join(known) or 'none'}")])
        path = shipped
    source = str(path)
    if not str(name_or_path).strip():
        raise ConfigError("model", [("", "empty name; expected a shipped model name "
                                         "(e.g. qwen3_4b) or a path to a config.json")])
    try:
        # utf-8-sig: editors on Windows write a byte-order mark, as trace files may have
        text = path.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise ConfigError(source, [("", "file not found")]) from None
    except UnicodeDecodeError as exc:
        raise ConfigError(source, [("", f"not a UTF-8 text file (byte 0x{exc.object[exc.start]:02x} "
                                        f"at offset {exc.start}); expected a JSON config.json"
                                        f"{utf16_hint(exc.object)}")]) from None
    except OSError as exc:
        raise ConfigError(source, [("", f"cannot read file: {exc.strerror}")]) from None
    try:
        data = json.loads(text, object_pairs_hook=unique_keys)
    except DuplicateKeyError as exc:
        raise ConfigError(source, [(exc.key, "key appears twice in one object; expected each "
                                             "key once (JSON readers keep only the last)")]) from None
    except json.JSONDecodeError as exc:
        raise ConfigError(source, [(f"line {exc.lineno}, column {exc.colno}",
                                    f"JSON syntax error: {exc.msg}")]) from None
    except RecursionError:
        raise ConfigError(source, [("", "objects or arrays nested too deeply; expected a "
                                        "flat config.json")]) from None
    except ValueError:  # only an integer past Python's 4300-digit conversion limit
        raise ConfigError(source, [("", "an integer of more than 4300 digits; expected "
                                        "model dimensions of at most a few dozen digits")]) from None
    bad = unencodable_path(data)
    if bad is not None:
        raise ConfigError(source, [(bad, UNENCODABLE)])
    stem = path.parent.name if path.name == "config.json" else path.stem
    return parse_model(data, source, name=stem)
