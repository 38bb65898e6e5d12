"""Model benches: parameter, weight and KV byte counts and MoE capacity estimates.

These check the workload side against the papers' stated numbers (no simulation).
"""

from __future__ import annotations

from npusim.validation.bench_registry import bench


@bench("model_counts")
def model_counts(model: str, dtype_bytes: int = 2, layer: int | None = None) -> dict[str, float]:
    """Parameter counts (billions) and per-layer byte counts (MiB) of a model.

    ``activated_expert_mib``: the expert weights one token activates in one MoE layer
    (``top_k`` experts); ``activation_token_mib``: one token's hidden vector.
    """
    from npusim.workload.models import load_model

    config = load_model(model)
    index = layer if layer is not None else (config.moe_layers[0] if config.is_moe else 0)
    params = config.layer_params(index)
    return {
        "params_total_b": config.params_total / 1e9,
        "params_experts_b": config.params_experts / 1e9,
        "activated_expert_mib": params.experts_active * dtype_bytes / 2**20,
        "activation_token_mib": config.hidden_size * dtype_bytes / 2**20,
        "weights_gb": config.params_total * dtype_bytes / 1e9,
    }


@bench("moe_capacity")
def moe_capacity(batch_tokens: int, num_experts: int, imbalance_ratio: float,
                 top_k: int = 1) -> dict[str, float]:
    """NPUMoE's capacity estimate ``n_max = r * B * k / E`` (tokens)."""
    from npusim.workload.routing import capacity_tokens

    return {"n_max_tokens": float(capacity_tokens(batch_tokens, num_experts, imbalance_ratio, top_k))}


@bench("routing_imbalance")
def routing_imbalance(model: str, tokens: int, ratio: float, seed: int = 0) -> dict[str, float]:
    """Mean and worst per-layer imbalance of a generated routing trace with target ``ratio``."""
    from npusim.workload.models import load_model
    from npusim.workload.routing import imbalance_ratios
    from npusim.workload.routing_generators import imbalanced_trace

    trace = imbalanced_trace(load_model(model), tokens, ratio, seed=seed)
    ratios = imbalance_ratios(trace)
    return {"imbalance_mean": float(ratios.mean()), "imbalance_max": float(ratios.max()),
            "imbalance_min": float(ratios.min())}
