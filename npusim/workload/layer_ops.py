"""The operators of one decoder layer (and of the embedding and LM head) for one batch.

:func:`layer_ops` turns a :class:`~npusim.workload.model_config.ModelConfig` and the
batch of one serving iteration (each sequence's new tokens and the context already in its
KV cache) into an ordered list of :class:`LayerOp`: an exact-shape
:class:`~npusim.mapping.taskgraph.Op` plus the bytes it reads and writes and a ``role``
telling strategies what it is (a weight GEMM to partition, attention, a vector op, a KV
write, the MoE router or the MoE expert block).  Strategies lower these into task graphs;
nothing here knows about hardware.  ``docs/models.md`` documents every shape and
convention.

Byte fields are logical tensor sizes with no fusion assumed: an op's
``activation_out_bytes`` is what it produces even if a fused kernel would keep it on chip.
Token projections are batched over every new token of the batch (``m`` = total new
tokens); attention is per sequence because each sequence has its own context.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Iterable, Literal

from npusim.mapping.taskgraph import Op
from npusim.workload.model_config import GATED_MLP_MATRICES, ModelConfig

#: What a :class:`LayerOp` is, for strategies: ``linear`` = weight GEMM that tensor
#: parallelism partitions; ``attention`` = QK^T / AV of one sequence; ``vector`` = norms,
#: RoPE, softmax, activations, residual adds; ``kv_write`` = storing new K/V in the cache;
#: ``router`` = MoE gate GEMM, its softmax and top-k; ``moe_experts`` = placeholder for the
#: routed-expert FFN (expanded by the MoE strategy); ``embedding`` = token-row gather.
ROLES = ("linear", "attention", "vector", "kv_write", "router", "moe_experts", "embedding")
Role = Literal["linear", "attention", "vector", "kv_write", "router", "moe_experts", "embedding"]

# Vector-op costs in operations per element (they match the defaults the vector unit
# documents in npusim.hw.compute.vector, so the FLOP totals and the unit agree).
#: RMSNorm: square, accumulate, multiply by 1/rms, multiply by gamma.
RMSNORM_FLOPS_PER_ELEMENT = 4
#: RoPE: ``x * cos + rotate_half(x) * sin`` is two multiplies and one add.
ROPE_FLOPS_PER_ELEMENT = 3
#: Softmax: running max, subtract, exp, sum, divide (the 1/sqrt(d) scale is folded into
#: the exp argument, the causal mask into the row range).
SOFTMAX_FLOPS_PER_ELEMENT = 5
#: SiLU(gate) * up: exp, add, divide (sigmoid), multiply (SiLU), multiply by up.
SWIGLU_FLOPS_PER_ELEMENT = 5
#: Residual add.
ADD_FLOPS_PER_ELEMENT = 1
#: Top-k selection: one comparison per router score in a single pass with a k-entry buffer.
TOPK_FLOPS_PER_ELEMENT = 1
#: Pure data movement (KV write, embedding gather).
COPY_FLOPS_PER_ELEMENT = 0
#: Token ids enter the model as int32.
TOKEN_ID_BYTES = 4
#: Whole-layer results kept per (model, layer kind, batch shape, dtypes): the layers of one
#: iteration share one batch, so every layer after the first is a cache hit.
LAYER_CACHE_SIZE = 512


@dataclass(frozen=True, slots=True)
class SequenceChunk:
    """What one sequence contributes to one iteration.

    ``new_tokens`` tokens are processed this step (a prefill chunk, or 1 for decode) on top
    of ``context_len`` tokens already in the KV cache.  ``sample`` says whether the step
    produces a next token (False for a prefill chunk that is not the prompt's last), i.e.
    whether the LM head runs for this sequence.
    """

    new_tokens: int
    context_len: int = 0
    sample: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.new_tokens, int) or self.new_tokens < 1:
            raise ValueError(f"new_tokens must be a positive int, got {self.new_tokens!r}")
        if not isinstance(self.context_len, int) or self.context_len < 0:
            raise ValueError(f"context_len must be a non-negative int, got {self.context_len!r}")

    @classmethod
    def prefill(cls, tokens: int, context_len: int = 0, sample: bool = True) -> "SequenceChunk":
        """A prefill chunk of ``tokens`` prompt tokens after ``context_len`` cached ones."""
        return cls(tokens, context_len, sample)

    @classmethod
    def decode(cls, context_len: int) -> "SequenceChunk":
        """One decode step of a sequence with ``context_len`` tokens cached."""
        return cls(1, context_len, True)

    @property
    def total_len(self) -> int:
        """Keys each new token can attend to at most (``context_len + new_tokens``)."""
        return self.context_len + self.new_tokens


@dataclass(frozen=True, slots=True)
class MoEExperts:
    """The routed-expert block of a MoE layer, left for the MoE strategy to expand.

    ``tokens`` tokens are each routed to ``top_k`` of ``num_experts`` gated-MLP experts of
    width ``moe_intermediate_size``; which experts and how many tokens each gets is the
    routing (a trace or a policy), not part of the model graph.
    """

    num_experts: int
    top_k: int
    hidden_size: int
    moe_intermediate_size: int
    tokens: int
    dtype_bytes: int
    norm_topk_prob: bool = False

    @property
    def routed_tokens(self) -> int:
        """Token-expert pairs (``tokens * top_k``)."""
        return self.tokens * self.top_k

    @property
    def params_per_expert(self) -> int:
        """Parameters of one expert (gate, up, down)."""
        return GATED_MLP_MATRICES * self.hidden_size * self.moe_intermediate_size

    @property
    def expert_weight_bytes(self) -> int:
        """Bytes of one expert's weights."""
        return self.params_per_expert * self.dtype_bytes

    @property
    def flops(self) -> int:
        """GEMM FLOPs of all routed pairs (independent of how they spread over experts)."""
        return 2 * self.routed_tokens * self.params_per_expert

    def expected_experts_touched(self) -> float:
        """Distinct experts hit under uniform, independent routing:
        ``E * (1 - (1 - k/E) ** tokens)`` (an estimate; real routing is skewed)."""
        return self.num_experts * (1 - (1 - self.top_k / self.num_experts) ** self.tokens)


@dataclass(frozen=True, slots=True, kw_only=True)
class LayerOp:
    """One operator of a layer: its exact-shape :class:`Op` and the bytes it moves.

    ``weight_bytes`` are the parameters the op reads; activation bytes are the logical
    input and output tensors; ``kv_read_bytes``/``kv_write_bytes`` are KV-cache traffic.
    ``seq`` is the batch index of a per-sequence op (attention, KV write), ``expert`` the
    expert of an expanded expert op, ``moe`` the routing facts of a ``moe_experts`` op.
    """

    name: str
    op: Op
    weight_bytes: int = 0
    activation_in_bytes: int = 0
    activation_out_bytes: int = 0
    kv_read_bytes: int = 0
    kv_write_bytes: int = 0
    role: Role
    seq: int | None = None
    expert: int | None = None
    moe: MoEExperts | None = None

    @property
    def flops(self) -> int:
        """Floating-point operations of the op (``2 m k n batch`` for a GEMM)."""
        return self.op.flops

    @property
    def label(self) -> str:
        """Name with the sequence or expert index (``attn_qk[s3]``), unique in a layer."""
        if self.seq is not None:
            return f"{self.name}[s{self.seq}]"
        if self.expert is not None:
            return f"{self.name}[e{self.expert}]"
        return self.name


@dataclass(frozen=True, slots=True)
class OpTotals:
    """Sums over a list of :class:`LayerOp`."""

    flops: int
    weight_bytes: int
    activation_in_bytes: int
    activation_out_bytes: int
    kv_read_bytes: int
    kv_write_bytes: int


def totals(ops: Iterable[LayerOp]) -> OpTotals:
    """FLOPs and bytes summed over ``ops``."""
    sums = [0] * 6
    for item in ops:
        for index, value in enumerate((item.flops, item.weight_bytes, item.activation_in_bytes,
                                       item.activation_out_bytes, item.kv_read_bytes,
                                       item.kv_write_bytes)):
            sums[index] += value
    return OpTotals(*sums)


# --------------------------------------------------------------------------- batch
def as_batch(batch: Iterable[Any]) -> tuple[SequenceChunk, ...]:
    """Normalise a batch: :class:`SequenceChunk`, ``(new_tokens, context_len[, sample])``
    tuples, or any object with ``new_tokens`` and ``context_len`` attributes."""
    chunks = []
    for item in batch:
        if isinstance(item, SequenceChunk):
            chunks.append(item)
        elif isinstance(item, (tuple, list)):
            chunks.append(SequenceChunk(*item))
        elif hasattr(item, "new_tokens") and hasattr(item, "context_len"):
            chunks.append(SequenceChunk(item.new_tokens, item.context_len,
                                        bool(getattr(item, "sample", True))))
        else:
            raise TypeError(f"batch entries need new_tokens and context_len, got {item!r}")
    if not chunks:
        raise ValueError("a batch needs at least one sequence")
    return tuple(chunks)


def _check_dtype(name: str, value: int) -> None:
    if not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive int (bytes per element), got {value!r}")


# ------------------------------------------------------------------ op builders
def _linear(name: str, tokens: int, k: int, n: int, dtype: int, bias: bool = False,
            role: Role = "linear") -> LayerOp:
    """``[tokens, k] @ W[k, n]`` (+ bias: read with the weights, added in the epilogue)."""
    weights = (k * n + (n if bias else 0)) * dtype
    return LayerOp(name=name, op=Op("gemm", m=tokens, k=k, n=n, dtype_bytes=dtype, name=name),
                   weight_bytes=weights, activation_in_bytes=tokens * k * dtype,
                   activation_out_bytes=tokens * n * dtype, role=role)


def _vector(name: str, kind: str, elements: int, flops_per_element: int, dtype: int,
            inputs: int = 1, weight_elements: int = 0, role: Role = "vector") -> LayerOp:
    """An element-wise / softmax / reduce op over ``elements`` values read from
    ``inputs`` tensors of that size, writing one."""
    return LayerOp(name=name, op=Op(kind, elements=elements, flops_per_element=flops_per_element,
                                    dtype_bytes=dtype, name=name, inputs=inputs),
                   weight_bytes=weight_elements * dtype,
                   activation_in_bytes=inputs * elements * dtype,
                   activation_out_bytes=elements * dtype, role=role)


def _norm(name: str, elements: int, params: int, dtype: int) -> LayerOp:
    """RMSNorm (or LayerNorm) over ``elements`` values reading ``params`` weights (the
    ``hidden`` gamma, plus ``hidden`` beta for a LayerNorm).  A LayerNorm's extra mean
    subtraction is inside the per-element cost's rounding and not counted separately."""
    return _vector(name, "elementwise", elements, RMSNORM_FLOPS_PER_ELEMENT, dtype,
                   weight_elements=params)


def _gated_mlp(prefix: str, tokens: int, hidden: int, width: int, dtype: int,
               expert: int | None = None) -> list[LayerOp]:
    """gate and up projections, SiLU(gate) * up, down projection."""
    ops = [_linear(f"{prefix}gate_proj", tokens, hidden, width, dtype),
           _linear(f"{prefix}up_proj", tokens, hidden, width, dtype),
           _vector(f"{prefix}act_mul", "elementwise", tokens * width, SWIGLU_FLOPS_PER_ELEMENT,
                   dtype, inputs=2),
           _linear(f"{prefix}down_proj", tokens, width, hidden, dtype)]
    if expert is None:
        return ops
    return [LayerOp(name=o.name, op=o.op, weight_bytes=o.weight_bytes,
                    activation_in_bytes=o.activation_in_bytes,
                    activation_out_bytes=o.activation_out_bytes, role=o.role, expert=expert)
            for o in ops]


def _attention(model: ModelConfig, seq: int, new: int, ctx: int, dtype: int,
               kv_dtype: int) -> list[LayerOp]:
    """KV write, QK^T, softmax and AV of one sequence.

    Scores cover the full ``new x (ctx + new)`` rectangle: the causal mask of a prefill
    chunk is applied inside softmax, not skipped (see docs/models.md).  Past keys and
    values come from the cache (``kv_read_bytes``); the new ones are activations.
    """
    heads, kv_size, q_size, head_dim = (model.num_attention_heads, model.kv_size, model.q_size,
                                        model.head_dim)
    keys = ctx + new
    scores = heads * new * keys
    kv_new = 2 * new * kv_size  # K and V elements of the new tokens
    return [
        LayerOp(name="kv_write", op=Op("elementwise", elements=kv_new,
                                       flops_per_element=COPY_FLOPS_PER_ELEMENT,
                                       dtype_bytes=kv_dtype, name="kv_write"),
                activation_in_bytes=kv_new * dtype, kv_write_bytes=kv_new * kv_dtype,
                role="kv_write", seq=seq),
        LayerOp(name="attn_qk", op=Op("gemm", m=new, k=head_dim, n=keys, batch=heads,
                                      dtype_bytes=dtype, name="attn_qk"),
                activation_in_bytes=new * (q_size + kv_size) * dtype,
                kv_read_bytes=ctx * kv_size * kv_dtype,
                activation_out_bytes=scores * dtype, role="attention", seq=seq),
        LayerOp(name="attn_softmax", op=Op("softmax", elements=scores,
                                           flops_per_element=SOFTMAX_FLOPS_PER_ELEMENT,
                                           dtype_bytes=dtype, name="attn_softmax"),
                activation_in_bytes=scores * dtype, activation_out_bytes=scores * dtype,
                role="vector", seq=seq),
        LayerOp(name="attn_av", op=Op("gemm", m=new, k=keys, n=head_dim, batch=heads,
                                      dtype_bytes=dtype, name="attn_av"),
                activation_in_bytes=(scores + new * kv_size) * dtype,
                kv_read_bytes=ctx * kv_size * kv_dtype,
                activation_out_bytes=new * q_size * dtype, role="attention", seq=seq),
    ]


def _moe_block(model: ModelConfig, tokens: int, dtype: int) -> list[LayerOp]:
    """Router (gate GEMM, softmax, top-k), routed-expert placeholder, shared experts."""
    hidden, experts = model.hidden_size, model.num_experts
    scores = tokens * experts
    moe = MoEExperts(num_experts=experts, top_k=model.experts_per_token, hidden_size=hidden,
                     moe_intermediate_size=model.expert_intermediate_size, tokens=tokens,
                     dtype_bytes=dtype, norm_topk_prob=model.topk_weights_normalized)
    ops = [
        _linear("router", tokens, hidden, experts, dtype, role="router"),
        _vector("router_softmax", "softmax", scores, SOFTMAX_FLOPS_PER_ELEMENT, dtype,
                role="router"),
        _vector("router_topk", "reduce", scores, TOPK_FLOPS_PER_ELEMENT, dtype, role="router"),
        # One GEMM-shaped op standing for all routed pairs: FLOPs are exact whatever the
        # routing; weight_bytes are every expert (the layer's footprint), which the MoE
        # strategy replaces by the experts a routing actually touches.
        LayerOp(name="moe_experts",
                op=Op("gemm", m=moe.routed_tokens, k=hidden,
                      n=GATED_MLP_MATRICES * moe.moe_intermediate_size, dtype_bytes=dtype,
                      name="moe_experts"),
                weight_bytes=experts * moe.expert_weight_bytes,
                activation_in_bytes=tokens * hidden * dtype,
                activation_out_bytes=tokens * hidden * dtype, role="moe_experts", moe=moe),
    ]
    if model.shared_intermediate_size:
        ops += _gated_mlp("shared_", tokens, hidden, model.shared_intermediate_size, dtype)
        if model.shared_expert_gate:
            ops.append(_linear("shared_expert_gate", tokens, hidden, 1, dtype, role="router"))
        # add the shared output to the routed output (scaled by its gate if gated)
        ops.append(_vector("shared_expert_add", "elementwise", tokens * hidden,
                           ADD_FLOPS_PER_ELEMENT + int(model.shared_expert_gate), dtype,
                           inputs=2))
    return ops


@lru_cache(maxsize=LAYER_CACHE_SIZE)
def _layer_ops(model: ModelConfig, kind: str, shapes: tuple[tuple[int, int], ...], dtype: int,
               kv_dtype: int) -> tuple[LayerOp, ...]:
    hidden, q_size, kv_size = model.hidden_size, model.q_size, model.kv_size
    qkv_bias, norm = model.qkv_bias, model.params_norm
    tokens = sum(new for new, _ in shapes)
    ops = [_norm("input_norm", tokens * hidden, norm, dtype),
           _linear("q_proj", tokens, hidden, q_size, dtype, qkv_bias),
           _linear("k_proj", tokens, hidden, kv_size, dtype, qkv_bias),
           _linear("v_proj", tokens, hidden, kv_size, dtype, qkv_bias)]
    if model.qk_norm:
        ops += [_norm("q_norm", tokens * q_size, model.head_dim, dtype),
                _norm("k_norm", tokens * kv_size, model.head_dim, dtype)]
    # RoPE rotates queries and keys; the cos/sin tables are position-indexed constants
    # (not parameters) and their reads are ignored.
    ops.append(_vector("rope", "elementwise", tokens * (q_size + kv_size),
                       ROPE_FLOPS_PER_ELEMENT, dtype))
    for seq, (new, ctx) in enumerate(shapes):
        ops += _attention(model, seq, new, ctx, dtype, kv_dtype)
    ops += [_linear("o_proj", tokens, q_size, hidden, dtype, model.o_bias),
            _vector("attn_residual", "elementwise", tokens * hidden, ADD_FLOPS_PER_ELEMENT,
                    dtype, inputs=2),
            _norm("post_attention_norm", tokens * hidden, norm, dtype)]
    if kind == "moe":
        ops += _moe_block(model, tokens, dtype)
    else:
        ops += _gated_mlp("", tokens, hidden, model.intermediate_size, dtype)
    ops.append(_vector("mlp_residual", "elementwise", tokens * hidden, ADD_FLOPS_PER_ELEMENT,
                       dtype, inputs=2))
    return tuple(ops)


# ------------------------------------------------------------------ public API
def layer_ops(model: ModelConfig, batch: Iterable[Any], dtype_bytes: int = 2, *,
              layer: int | None = None, kv_dtype_bytes: int | None = None) -> list[LayerOp]:
    """Ordered operators of one decoder layer for one iteration's ``batch``.

    ``layer`` selects which decoder layer (it matters for MoE models with dense layers);
    ``None`` means a representative layer: MoE if the model has any MoE layer.
    ``kv_dtype_bytes`` is the KV-cache element width (default ``dtype_bytes``).

    Order: input_norm, q/k/v_proj, q_norm/k_norm (Qwen3), rope, then per sequence
    kv_write, attn_qk, attn_softmax, attn_av; o_proj, attn_residual,
    post_attention_norm; dense: gate_proj, up_proj, act_mul, down_proj; MoE: router,
    router_softmax, router_topk, moe_experts (+ shared_* experts); mlp_residual.
    """
    chunks = as_batch(batch)
    _check_dtype("dtype_bytes", dtype_bytes)
    kv_dtype = dtype_bytes if kv_dtype_bytes is None else kv_dtype_bytes
    _check_dtype("kv_dtype_bytes", kv_dtype)
    if layer is None:
        kind = "moe" if model.is_moe else "dense"
    else:
        kind = model.layer_kind(layer)
    shapes = tuple((c.new_tokens, c.context_len) for c in chunks)
    return list(_layer_ops(model, kind, shapes, dtype_bytes, kv_dtype))


def embedding_ops(model: ModelConfig, batch: Iterable[Any], dtype_bytes: int = 2) -> list[LayerOp]:
    """Token-embedding gather for every new token: reads one ``hidden``-row per token."""
    _check_dtype("dtype_bytes", dtype_bytes)
    tokens = sum(c.new_tokens for c in as_batch(batch))
    elements = tokens * model.hidden_size
    return [LayerOp(name="embed_tokens",
                    op=Op("elementwise", elements=elements, flops_per_element=COPY_FLOPS_PER_ELEMENT,
                          dtype_bytes=dtype_bytes, name="embed_tokens"),
                    weight_bytes=elements * dtype_bytes,
                    activation_in_bytes=tokens * TOKEN_ID_BYTES,
                    activation_out_bytes=elements * dtype_bytes, role="embedding")]


def lm_head_ops(model: ModelConfig, batch: Iterable[Any], dtype_bytes: int = 2) -> list[LayerOp]:
    """Final RMSNorm over every new token, then the LM head for the sequences that sample.

    A sampling sequence needs logits for its last token only (its one new token in
    decode, the prompt's last token in prefill), so the LM head GEMM has one row per
    sampling sequence; it reads the whole ``vocab x hidden`` matrix (the embedding matrix
    if tied).  Sampling itself (argmax / top-p over the logits) is not modelled.
    """
    _check_dtype("dtype_bytes", dtype_bytes)
    chunks = as_batch(batch)
    hidden = model.hidden_size
    tokens = sum(c.new_tokens for c in chunks)
    rows = sum(1 for c in chunks if c.sample)
    ops = [_norm("final_norm", tokens * hidden, model.params_norm, dtype_bytes)]
    if rows:
        ops.append(_linear("lm_head", rows, hidden, model.vocab_size, dtype_bytes,
                           model.lm_head_bias))
    return ops


def expert_ffn_ops(moe: MoEExperts, expert: int, tokens: int) -> list[LayerOp]:
    """Operators of routed expert ``expert`` processing ``tokens`` tokens (gate, up,
    SiLU * up, down), for strategies that expand a ``moe_experts`` op; the routing
    weights' scale-and-sum into the output is left to them."""
    if not 0 <= expert < moe.num_experts:
        raise ValueError(f"expert {expert} outside 0..{moe.num_experts - 1}")
    if tokens < 1:
        raise ValueError(f"an expert op needs at least one token, got {tokens}")
    return _gated_mlp("expert_", tokens, moe.hidden_size, moe.moe_intermediate_size,
                      moe.dtype_bytes, expert=expert)


def layer_ops_cache_clear() -> None:
    """Drop memoised layer results (they are pure; this only frees memory)."""
    _layer_ops.cache_clear()
