"""Shipped MoE model configs against the papers and model cards.

References: /work/shared/references/models.md (paper 000 Table 1 and §5.1, paper 001
Table II and §II-B), references.csv S001-005 (672 MB of activated expert weights per
Mixtral layer) and S001-006 (0.0078 MB of activations per layer), and the public model
cards (totals).
"""

import pytest

from npusim.workload.models import SequenceChunk, layer_ops, lm_head_ops, load_model, totals

pytestmark = pytest.mark.unit

MIB = 2**20
MOE_MODELS = ["phi_3_5_moe_instruct", "phi_tiny_moe_instruct", "mixtral_8x7b_v0_1",
              "deepseek_moe_16b_base", "qwen1_5_moe_a2_7b", "qwen3_30b_a3b"]


@pytest.mark.parametrize("name,alias", [
    ("phi_3_5_moe_instruct", "microsoft/Phi-3.5-MoE-instruct"),
    ("phi_tiny_moe_instruct", "Phi-tiny-MoE-instruct"),
    ("mixtral_8x7b_v0_1", "mistralai/Mixtral-8x7B-v0.1"),
    ("deepseek_moe_16b_base", "deepseek-ai/deepseek-moe-16b-base"),
    ("qwen1_5_moe_a2_7b", "Qwen/Qwen1.5-MoE-A2.7B"),
])
def test_loads_by_hub_id(name, alias):
    model = load_model(alias)
    assert model.name == name and model.is_moe


@pytest.mark.parametrize("name,total,active,rel_active", [
    ("phi_3_5_moe_instruct", 41.9e9, 6.6e9, 0.02),   # model card 41.9B / 6.6B
    ("mixtral_8x7b_v0_1", 46.7e9, 12.9e9, 0.01),     # model card 46.7B / 12.9B
    ("deepseek_moe_16b_base", 16.4e9, 2.8e9, 0.02),  # model card 16.4B / 2.8B
    ("qwen1_5_moe_a2_7b", 14.3e9, 2.7e9, 0.01),      # model card 14.3B / 2.7B
    ("qwen3_30b_a3b", 30.5e9, 3.3e9, 0.02),          # paper 000 Tab. 1
])
def test_totals_match_model_cards(name, total, active, rel_active):
    model = load_model(name)
    assert model.params_total == pytest.approx(total, rel=0.005)
    assert model.params_active == pytest.approx(active, rel=rel_active)


def test_phi_3_5_moe_sizes_from_paper_000():
    phi = load_model("phi_3_5_moe_instruct")
    # §5.1: 83.75 GB at FP16 (decimal GB of 41.87B params, not of Tab. 1's 42.6B)
    assert phi.weight_bytes(2) / 1e9 == pytest.approx(83.75, abs=0.005)
    assert phi.params_total != pytest.approx(42.6e9, rel=0.01)  # Tab. 1 value: not the config
    # §5.1: "each expert being 150MB" = 3 x 4096 x 6400 x 2 B = 150 MiB
    assert phi.params_per_expert * 2 == 150 * MIB
    # Phi-MoE's LayerNorm biases, attention biases and LM-head bias are counted
    assert phi.layer_params(0).norms == 4 * 4096
    assert phi.params_lm_head == 32064 * 4096 + 32064
    assert phi.topk_weights_normalized is False  # sparsemixer: each weight its own softmax


def test_phi_tiny_moe_matches_paper_000():
    tiny = load_model("phi_tiny_moe_instruct")
    assert tiny.params_total == pytest.approx(3.8e9, rel=0.02)        # Tab. 1: 3.8B
    assert tiny.weight_bytes(2) / 1e9 == pytest.approx(7.51, abs=0.01)  # §5.1: 7.51 GB
    assert (tiny.num_experts, tiny.experts_per_token, len(tiny.moe_layers)) == (16, 2, 32)
    # q_size 16 x 128 = 2048 differs from hidden 4096: head_dim must come from the config
    assert tiny.q_size == 2048 and tiny.kv_size == 512
    # model card says 1.1B active; the config gives 1.29B with embedding + LM head and
    # 1.16B with the LM head only (documented in workloads/models/README.md)
    assert tiny.params_active - tiny.params_embedding == pytest.approx(1.16e9, rel=0.01)


def test_paper_001_table_ii_expert_parameters():
    """Table II "E Para." = routed + shared expert parameters of all MoE layers."""
    e_para = {name: (m.params_experts + m.params_shared_experts_total)
              for name, m in ((n, load_model(n)) for n in
                              ("deepseek_moe_16b_base", "qwen3_30b_a3b",
                               "phi_3_5_moe_instruct", "mixtral_8x7b_v0_1"))}
    assert e_para["deepseek_moe_16b_base"] == pytest.approx(15.4e9, rel=0.005)
    assert e_para["qwen3_30b_a3b"] == pytest.approx(29.0e9, rel=0.005)
    assert e_para["phi_3_5_moe_instruct"] == pytest.approx(40.3e9, rel=0.005)
    # the Mixtral row is in binary "Gi-params": 45.10e9 = 42.0 x 2^30
    assert e_para["mixtral_8x7b_v0_1"] / 2**30 == pytest.approx(42.0, rel=0.005)


def test_paper_001_phi_columns_are_swapped():
    # Table II prints Hidden 6400 / Interm. 4096 for Phi-3.5-MoE; the config is the reverse
    phi = load_model("phi_3_5_moe_instruct")
    assert (phi.hidden_size, phi.expert_intermediate_size) == (4096, 6400)


def test_mixtral_activated_expert_bytes_per_layer_s001_005():
    """S001-005: 672 MB of activated expert weights per layer at batch 1 (FP16, MiB)."""
    mixtral = load_model("mixtral_8x7b_v0_1")
    moe = next(o for o in layer_ops(mixtral, [SequenceChunk.decode(0)], 2) if o.moe).moe
    assert moe.top_k * moe.expert_weight_bytes == 672 * MIB
    assert moe.top_k * moe.expert_weight_bytes == 2 * 3 * 4096 * 14336 * 2
    # S001-006: activations per layer 0.0078 MB = one 4096-wide FP16 token (8 KiB)
    assert moe.hidden_size * moe.dtype_bytes / MIB == pytest.approx(0.0078, abs=1e-4)
    assert mixtral.topk_weights_normalized is True


def test_layer_kinds():
    deepseek = load_model("deepseek_moe_16b_base")
    assert deepseek.layer_kinds == ("dense",) + ("moe",) * 27    # Tab. II "27/28"
    assert deepseek.moe_layers == tuple(range(1, 28))
    assert deepseek.layer_params(0).mlp == 3 * 2048 * 10944
    assert deepseek.layer_params(1).mlp == 3 * 2048 * 2 * 1408   # two fused shared experts
    assert deepseek.topk_weights_normalized is False
    for name in ("phi_3_5_moe_instruct", "mixtral_8x7b_v0_1", "qwen1_5_moe_a2_7b"):
        model = load_model(name)
        assert set(model.layer_kinds) == {"moe"}


def test_qwen1_5_moe_shared_expert_and_qkv_bias():
    qwen = load_model("qwen1_5_moe_a2_7b")
    assert (qwen.num_experts, qwen.experts_per_token) == (60, 4)
    assert qwen.shared_expert_gate and qwen.params_shared_experts == 3 * 2048 * 5632 + 2048
    # Qwen2-family attention: q/k/v biases, no o_proj bias
    assert qwen.qkv_bias and not qwen.o_bias
    assert qwen.params_attention == 4 * 2048 * 2048 + 3 * 2048
    ops = {o.name: o for o in layer_ops(qwen, [(1, 0)])}
    assert ops["q_proj"].weight_bytes == (2048 * 2048 + 2048) * 2
    assert ops["o_proj"].weight_bytes == 2048 * 2048 * 2


@pytest.mark.parametrize("name", MOE_MODELS)
def test_weight_bytes_sum_to_parameters(name):
    model = load_model(name)
    layers = sum(sum(o.weight_bytes for o in layer_ops(model, [(2, 3)], 2, layer=i))
                 for i in range(model.num_hidden_layers))
    head = sum(o.weight_bytes for o in lm_head_ops(model, [(1, 0)]))
    embedding = model.params_embedding * 2 * (1 - model.tie_word_embeddings)
    assert layers + head + embedding == model.weight_bytes(2)


@pytest.mark.parametrize("name", MOE_MODELS)
def test_decode_flops_track_active_parameters(name):
    model = load_model(name)
    layer = model.moe_layers[0]
    ops = layer_ops(model, [SequenceChunk.decode(0)], layer=layer)
    # one token: every matmul weight used once (2 FLOPs per MAC); biases and norms aside
    assert totals(ops).flops == pytest.approx(2 * model.layer_params(layer).active, rel=0.01)
