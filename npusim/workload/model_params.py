"""Parameter counts of a :class:`~npusim.workload.model_config.ModelConfig`.

Split out of ``model_config.py`` (which parses and validates) so each file stays small:
:class:`ParamCounts` is a mixin whose properties only read the resolved shape of the
config (``hidden_size``, ``q_size``, ``layer_kind(i)``, ...).  Counts follow the Hugging
Face module layout of the supported families; ``docs/models.md`` lists the conventions
and tests/workload compare them with the model cards and the seed papers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

#: A SwiGLU/GeGLU MLP has three weight matrices: gate, up (hidden -> intermediate) and
#: down (intermediate -> hidden).
GATED_MLP_MATRICES = 3


@dataclass(frozen=True, slots=True)
class LayerParams:
    """Parameter counts of one decoder layer, by module.

    ``attention`` holds q/k/v/o projections (with their biases) and the q/k head norms;
    ``norms`` the input and post-attention norm weights (and biases for LayerNorm);
    ``mlp`` the dense MLP of a dense layer or the shared experts (and their gate) of a MoE
    layer; ``router`` the MoE gate; ``experts`` every routed expert and
    ``experts_active`` the ``top_k`` of them one token uses.
    """

    attention: int
    norms: int
    mlp: int
    router: int = 0
    experts: int = 0
    experts_active: int = 0

    @property
    def total(self) -> int:
        """Every parameter stored for this layer."""
        return self.attention + self.norms + self.mlp + self.router + self.experts

    @property
    def active(self) -> int:
        """Parameters one token touches (routed experts counted ``top_k`` times)."""
        return self.attention + self.norms + self.mlp + self.router + self.experts_active


def check_positive(name: str, value: float) -> None:
    """Raise ``ValueError`` unless ``value`` is a positive number."""
    if not value > 0:
        raise ValueError(f"{name} must be positive, got {value!r}")


class ParamCounts:
    """Parameter-count properties mixed into ``ModelConfig`` (reads its resolved shape)."""

    # ------------------------------------------------------------- per layer
    @property
    def params_attention(self) -> int:
        """Attention parameters of one layer: q/k/v/o, their biases (``qkv_bias`` for
        q/k/v, ``attention_bias`` for o) and the q/k head norms."""
        hidden, q, kv = self.hidden_size, self.q_size, self.kv_size
        weights = hidden * q + 2 * hidden * kv + q * hidden
        biases = (q + 2 * kv if self.qkv_bias else 0) + (hidden if self.o_bias else 0)
        head_norms = 2 * self.head_dim if self.qk_norm else 0
        return weights + biases + head_norms

    @property
    def params_norm(self) -> int:
        """One hidden-size norm: RMSNorm weight, or LayerNorm weight + bias."""
        return self.hidden_size * (2 if self.norm_bias else 1)

    @property
    def params_layer_norms(self) -> int:
        """Input and post-attention norms of one layer."""
        return 2 * self.params_norm

    @property
    def params_dense_mlp(self) -> int:
        """Gated MLP of a dense layer."""
        return GATED_MLP_MATRICES * self.hidden_size * self.intermediate_size

    @property
    def params_per_expert(self) -> int:
        """One routed expert (a gated MLP of ``expert_intermediate_size``)."""
        return GATED_MLP_MATRICES * self.hidden_size * self.expert_intermediate_size

    @property
    def params_shared_experts(self) -> int:
        """Shared experts (and the Qwen-MoE shared-expert gate) of one MoE layer."""
        mlp = GATED_MLP_MATRICES * self.hidden_size * self.shared_intermediate_size
        return mlp + (self.hidden_size if self.shared_expert_gate else 0)

    @property
    def params_router(self) -> int:
        """Router (gate) of one MoE layer: ``hidden x num_experts``, no bias."""
        return self.hidden_size * self.num_experts

    def layer_params(self, layer: int) -> LayerParams:
        """Parameter counts of decoder layer ``layer`` by module."""
        attention, norms = self.params_attention, self.params_layer_norms
        if self.layer_kind(layer) == "dense":
            return LayerParams(attention, norms, self.params_dense_mlp)
        return LayerParams(attention, norms, self.params_shared_experts,
                           router=self.params_router,
                           experts=self.num_experts * self.params_per_expert,
                           experts_active=self.experts_per_token * self.params_per_expert)

    # ----------------------------------------------------------- whole model
    @property
    def params_embedding(self) -> int:
        """Token embedding matrix (``vocab x hidden``)."""
        return self.vocab_size * self.hidden_size

    @property
    def params_lm_head(self) -> int:
        """LM head stored separately (0 when tied to the embedding), plus its bias if
        ``lm_head_bias`` (Phi-MoE; a bias exists even when the matrix is tied)."""
        matrix = 0 if self.tie_word_embeddings else self.vocab_size * self.hidden_size
        return matrix + (self.vocab_size if self.lm_head_bias else 0)

    @property
    def params_final_norm(self) -> int:
        """Final norm before the LM head."""
        return self.params_norm

    @property
    def params_layers(self) -> int:
        """Parameters of all decoder layers."""
        return sum(self.layer_params(i).total for i in range(self.num_hidden_layers))

    @property
    def params_experts(self) -> int:
        """Routed-expert parameters of all layers (paper 001's "E Para." minus shared)."""
        return sum(self.layer_params(i).experts for i in range(self.num_hidden_layers))

    @property
    def params_shared_experts_total(self) -> int:
        """Shared-expert parameters of all MoE layers (0 for Mixtral, Phi-MoE, Qwen3)."""
        return sum(self.layer_params(i).mlp for i in range(self.num_hidden_layers)
                   if self.layer_kind(i) == "moe")

    @property
    def params_total(self) -> int:
        """Every stored parameter (a tied LM head counted once)."""
        return (self.params_embedding + self.params_layers + self.params_final_norm
                + self.params_lm_head)

    @property
    def params_non_embedding(self) -> int:
        """Parameters outside the embedding and LM-head matrices (model-card convention)."""
        return self.params_layers + self.params_final_norm

    @property
    def params_active(self) -> int:
        """Parameters one token touches, embedding and LM head included (the
        "activated parameters" convention of MoE model cards)."""
        layers = sum(self.layer_params(i).active for i in range(self.num_hidden_layers))
        return self.params_embedding + layers + self.params_final_norm + self.params_lm_head

    def weight_bytes(self, dtype_bytes: float) -> int:
        """Bytes of all weights at ``dtype_bytes`` per parameter (0.5 for INT4)."""
        check_positive("dtype_bytes", dtype_bytes)
        return math.ceil(self.params_total * dtype_bytes)

    def kv_bytes_per_token(self, dtype_bytes: float) -> int:
        """KV-cache bytes one token adds: ``2 * layers * kv_heads * head_dim * dtype``."""
        check_positive("dtype_bytes", dtype_bytes)
        return math.ceil(2 * self.num_hidden_layers * self.kv_size * dtype_bytes)
