"""LLM workload graphs from Hugging Face-style configs: the public entry point.

Parsing and parameter counts live in :mod:`npusim.workload.model_config`, the operator
lists in :mod:`npusim.workload.layer_ops`; this module re-exports both so callers write::

    from npusim.workload.models import load_model, layer_ops, SequenceChunk

    model = load_model("Qwen3-4B")
    ops = layer_ops(model, [SequenceChunk.prefill(512), SequenceChunk.decode(1000)])

See ``docs/models.md`` for shapes, FLOP/byte conventions and assumptions.
"""

from __future__ import annotations

from npusim.workload.layer_ops import (ROLES, LayerOp, MoEExperts, OpTotals, SequenceChunk,
                                       as_batch, embedding_ops, expert_ffn_ops, layer_ops,
                                       layer_ops_cache_clear, lm_head_ops, totals)
from npusim.workload.model_config import (LayerParams, ModelConfig, list_models, load_model,
                                          models_dir, parse_model)

__all__ = [
    "ROLES", "LayerOp", "LayerParams", "MoEExperts", "ModelConfig", "OpTotals",
    "SequenceChunk", "as_batch", "embedding_ops", "expert_ffn_ops", "layer_ops",
    "layer_ops_cache_clear", "list_models", "lm_head_ops", "load_model", "models_dir",
    "parse_model", "totals",
]
