"""Model configs, parameter counts and per-layer operator lists (npusim.workload.models).

Reference numbers: /work/shared/references/models.md (Qwen3 model cards, paper 000
Table 1, paper 001 Table II) and the public configs of the MoE families in the inline
fixtures below.
"""

import json
from pathlib import Path

import pytest

from npusim.core.errors import ConfigError
from npusim.mapping.taskgraph import Op
from npusim.workload.models import (ROLES, LayerOp, ModelConfig, SequenceChunk, as_batch,
                                    embedding_ops, expert_ffn_ops, layer_ops, list_models,
                                    lm_head_ops, load_model, parse_model, totals)

pytestmark = pytest.mark.unit

SHIPPED = ["qwen3_1_7b", "qwen3_4b", "qwen3_8b", "qwen3_14b", "qwen3_32b", "qwen3_30b_a3b"]

# Public Hugging Face configs (architecture fields only) of the MoE families the parser
# supports beyond Qwen3; their model cards give the totals checked below.
MIXTRAL_8X7B = {"model_type": "mixtral", "hidden_size": 4096, "intermediate_size": 14336,
                "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
                "vocab_size": 32000, "num_local_experts": 8, "num_experts_per_tok": 2,
                "tie_word_embeddings": False}
DEEPSEEK_MOE_16B = {"model_type": "deepseek", "hidden_size": 2048, "intermediate_size": 10944,
                    "moe_intermediate_size": 1408, "num_hidden_layers": 28,
                    "num_attention_heads": 16, "num_key_value_heads": 16, "vocab_size": 102400,
                    "n_routed_experts": 64, "n_shared_experts": 2, "num_experts_per_tok": 6,
                    "first_k_dense_replace": 1, "moe_layer_freq": 1,
                    "tie_word_embeddings": False}
QWEN1_5_MOE_A2_7B = {"model_type": "qwen2_moe", "hidden_size": 2048, "intermediate_size": 5632,
                     "moe_intermediate_size": 1408, "shared_expert_intermediate_size": 5632,
                     "num_hidden_layers": 24, "num_attention_heads": 16,
                     "num_key_value_heads": 16, "vocab_size": 151936, "num_experts": 60,
                     "num_experts_per_tok": 4, "decoder_sparse_step": 1,
                     "tie_word_embeddings": False}


@pytest.fixture(scope="module")
def q4b() -> ModelConfig:
    return load_model("qwen3_4b")


@pytest.fixture(scope="module")
def moe() -> ModelConfig:
    return load_model("qwen3_30b_a3b")


def _write(tmp_path, data, name="config.json"):
    path = tmp_path / name
    path.write_text(json.dumps(data) if not isinstance(data, str) else data)
    return path


def _base() -> dict:
    return json.loads((Path(__file__).parents[2] / "workloads/models/qwen3_4b.json").read_text())


# ----------------------------------------------------------------------- loading
def test_every_shipped_model_loads():
    assert set(SHIPPED) <= set(list_models())
    for name in SHIPPED:
        model = load_model(name)
        assert model.name == name
        assert model.head_dim == 128 and model.vocab_size == 151936


@pytest.mark.parametrize("spelling", ["qwen3_4b", "Qwen3-4B", "QWEN3-4B", "Qwen/Qwen3-4B"])
def test_names_are_case_and_punctuation_insensitive(spelling, q4b):
    assert load_model(spelling) == q4b


def test_dotted_name(q4b):
    assert load_model("Qwen3-1.7B").name == "qwen3_1_7b"


def test_load_by_path_and_directory_ignoring_extra_keys(tmp_path, q4b):
    data = {**_base(), "bos_token_id": 151643, "rope_scaling": None, "use_cache": True,
            "quantization_config": {"quant_method": "fp8"}}
    path = _write(tmp_path, data)
    assert load_model(path).params_total == q4b.params_total
    assert load_model(tmp_path).params_total == q4b.params_total  # directory -> config.json
    assert load_model(str(path)).name == tmp_path.name


def test_unknown_name_suggests_close_match():
    with pytest.raises(ConfigError) as info:
        load_model("qwen3_4")
    assert "did you mean 'qwen3_4b'" in str(info.value)
    assert "qwen3_30b_a3b" in str(info.value)


def test_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="file not found") as info:
        load_model(tmp_path / "absent.json")
    assert info.value.source.endswith("absent.json")


def test_bad_json_names_line_and_column(tmp_path):
    path = _write(tmp_path, '{"hidden_size": 12,\n "x": }')
    with pytest.raises(ConfigError) as info:
        load_model(path)
    assert info.value.source == str(path)
    assert info.value.problems[0][0] == "line 2, column 7"
    assert "JSON syntax error" in info.value.problems[0][1]


def test_top_level_must_be_object(tmp_path):
    with pytest.raises(ConfigError, match="expected a JSON object"):
        load_model(_write(tmp_path, "[1, 2]"))


def test_missing_required_field(tmp_path):
    data = _base()
    del data["vocab_size"]
    with pytest.raises(ConfigError) as info:
        load_model(_write(tmp_path, data))
    ((path, message),) = info.value.problems
    assert path == "vocab_size" and "required field is missing" in message


@pytest.mark.parametrize("field,value,expect", [
    ("hidden_size", -1, "greater than 0 (got -1)"),
    ("num_hidden_layers", 0, "greater than 0 (got 0)"),
    ("hidden_size", "2560", "valid integer (got '2560')"),
    ("num_key_value_heads", 5, "divisor of num_attention_heads 32"),
    ("num_experts_per_tok", 2, "no expert count is set"),
])
def test_bad_values_name_field_value_and_expectation(tmp_path, field, value, expect):
    with pytest.raises(ConfigError) as info:
        load_model(_write(tmp_path, {**_base(), field: value}))
    paths = [path for path, _ in info.value.problems]
    assert field in paths
    assert expect in dict(info.value.problems)[field]
    assert str(tmp_path) in str(info.value)


def test_heads_must_divide_hidden_without_head_dim(tmp_path):
    data = {**_base(), "num_attention_heads": 24}
    del data["head_dim"]
    with pytest.raises(ConfigError) as info:
        load_model(_write(tmp_path, data))
    assert "divisor of hidden_size 2560" in dict(info.value.problems)["num_attention_heads"]
    # with head_dim given, heads * head_dim may differ from hidden (Qwen3-4B: 4096 vs 2560)
    assert load_model("qwen3_4b").q_size == 4096


def test_moe_consistency_problems_are_all_reported():
    with pytest.raises(ConfigError) as info:
        parse_model({**_base(), "num_experts": 8, "num_experts_per_tok": 9,
                     "mlp_only_layers": [99]}, "inline")
    paths = [path for path, _ in info.value.problems]
    assert paths == ["num_experts_per_tok", "mlp_only_layers[0]"]
    with pytest.raises(ConfigError, match="must say how many"):
        parse_model({**_base(), "num_experts": 8}, "inline")


def test_a_field_checked_across_the_config_is_named_without_echoing_the_config():
    with pytest.raises(ConfigError) as info:
        parse_model({**_base(), "num_hidden_layers": True}, "inline")
    assert info.value.problems == [("num_hidden_layers", "expected a number, got the boolean True")]


def test_defaults_follow_hugging_face():
    data = {**_base()}
    del data["head_dim"], data["num_key_value_heads"]
    model = parse_model(data)
    assert model.head_dim == 2560 // 32
    assert model.num_key_value_heads == 32  # HF falls back to MHA


def test_config_is_frozen_and_hashable(q4b):
    with pytest.raises(Exception):
        q4b.hidden_size = 1
    assert hash(q4b) == hash(load_model("qwen3_4b"))


# ------------------------------------------------------------- parameter counts
@pytest.mark.parametrize("name,total,non_embedding", [
    ("qwen3_1_7b", 1.7e9, 1.4e9),     # model card: 1.7B / 1.4B
    ("qwen3_4b", 4.02e9, 3.6e9),      # model card: 4.0B / 3.6B (tied embeddings)
    ("qwen3_8b", 8.19e9, 6.95e9),     # model card: 8.2B / 6.95B
    ("qwen3_14b", 14.8e9, 13.2e9),    # model card: 14.8B / 13.2B
    ("qwen3_32b", 32.8e9, 31.2e9),    # model card: 32.8B / 31.2B
    # model card: 8B; untied embedding and LM head, 2 x 128256 x 4096 = 1.05B of it
    ("llama_3_1_8b", 8.0e9, 8.03e9 - 1.05e9),
])
def test_dense_parameter_counts(name, total, non_embedding):
    model = load_model(name)
    assert model.params_total == pytest.approx(total, rel=0.015)
    assert model.params_non_embedding == pytest.approx(non_embedding, rel=0.015)
    assert model.params_active == model.params_total
    assert not model.is_moe


def test_qwen3_4b_exact_counts(q4b):
    layer = q4b.layer_params(0)
    assert layer.attention == 2560 * 4096 * 2 + 2560 * 1024 * 2 + 2 * 128  # q,o,k,v + qk norms
    assert layer.mlp == 3 * 2560 * 9728
    assert q4b.params_lm_head == 0
    assert q4b.params_total == 4_022_468_096
    assert q4b.weight_bytes(2) == 2 * 4_022_468_096
    assert q4b.weight_bytes(0.5) == 4_022_468_096 // 2  # INT4


def test_qwen3_8b_exact_total():
    assert load_model("qwen3_8b").params_total == 8_190_735_360


def test_kv_bytes_per_token(q4b):
    assert q4b.kv_bytes_per_token(2) == 2 * 36 * 8 * 128 * 2 == 147_456
    assert load_model("qwen3_30b_a3b").kv_bytes_per_token(2) == 2 * 48 * 4 * 128 * 2


def test_qwen3_30b_a3b_counts(moe):
    assert moe.is_moe and moe.layer_kinds == ("moe",) * 48
    assert moe.num_experts == 128 and moe.experts_per_token == 8
    assert moe.params_experts == 48 * 128 * 3 * 2048 * 768 == 28_991_029_248  # paper 001: 29.0B
    assert moe.params_total == pytest.approx(30.5e9, rel=0.01)                # paper 000: 30.5B
    assert moe.params_active == pytest.approx(3.3e9, rel=0.02)                # paper 000: 3.3B


@pytest.mark.parametrize("config,total,active", [
    (MIXTRAL_8X7B, 46.7e9, 12.9e9),
    (DEEPSEEK_MOE_16B, 16.4e9, 2.8e9),
    (QWEN1_5_MOE_A2_7B, 14.3e9, 2.7e9),
])
def test_other_moe_families(config, total, active):
    model = parse_model(config, "inline")
    assert model.params_total == pytest.approx(total, rel=0.01)
    assert model.params_active == pytest.approx(active, rel=0.02)


def test_paper_001_expert_parameter_column():
    # Table II "E Para." counts routed + shared experts
    deepseek = parse_model(DEEPSEEK_MOE_16B)
    routed_and_shared = deepseek.params_experts + sum(
        deepseek.layer_params(i).mlp for i in range(28) if deepseek.layer_kind(i) == "moe")
    assert routed_and_shared == pytest.approx(15.4e9, rel=0.005)
    assert parse_model(MIXTRAL_8X7B).params_experts / 2**30 == pytest.approx(42.0, rel=0.005)


def test_layer_kinds():
    deepseek = parse_model(DEEPSEEK_MOE_16B)
    assert deepseek.layer_kinds == ("dense",) + ("moe",) * 27
    assert deepseek.layer_params(0).mlp == 3 * 2048 * 10944
    sparse = parse_model({**QWEN1_5_MOE_A2_7B, "decoder_sparse_step": 2, "mlp_only_layers": [1]})
    kinds = sparse.layer_kinds
    assert kinds[0] == "dense" and kinds[1] == "dense" and kinds[3] == "moe" and kinds[2] == "dense"


# --------------------------------------------------------------------- layer ops
def test_batch_normalisation():
    class Req:
        new_tokens, context_len = 3, 7

    chunks = as_batch([SequenceChunk.prefill(4), (1, 9), Req(), (5, 0, False)])
    assert chunks == (SequenceChunk(4, 0), SequenceChunk(1, 9), SequenceChunk(3, 7),
                      SequenceChunk(5, 0, False))
    for bad in ([], [(0, 1)], [(1, -1)]):
        with pytest.raises(ValueError):
            as_batch(bad)
    with pytest.raises(TypeError):
        as_batch([object()])


def test_dense_decode_op_order(q4b):
    ops = layer_ops(q4b, [SequenceChunk.decode(100)])
    assert [o.name for o in ops] == [
        "input_norm", "q_proj", "k_proj", "v_proj", "q_norm", "k_norm", "rope",
        "kv_write", "attn_qk", "attn_softmax", "attn_av",
        "o_proj", "attn_residual", "post_attention_norm",
        "gate_proj", "up_proj", "act_mul", "down_proj", "mlp_residual"]
    assert all(isinstance(o, LayerOp) and isinstance(o.op, Op) and o.role in ROLES for o in ops)
    assert all(o.op.kind in ("gemm", "elementwise", "softmax", "reduce") for o in ops)
    assert {o.role for o in ops if o.op.kind == "gemm"} <= {"linear", "attention"}


def test_projection_shapes_are_batched_and_gqa(q4b):
    batch = [SequenceChunk.prefill(300), SequenceChunk.decode(50), SequenceChunk.decode(70)]
    ops = {o.label: o for o in layer_ops(q4b, batch)}
    tokens = 302
    assert (ops["q_proj"].op.m, ops["q_proj"].op.k, ops["q_proj"].op.n) == (tokens, 2560, 4096)
    assert (ops["k_proj"].op.m, ops["k_proj"].op.n) == (tokens, 8 * 128)
    assert (ops["v_proj"].op.m, ops["v_proj"].op.n) == (tokens, 8 * 128)
    assert (ops["o_proj"].op.m, ops["o_proj"].op.k, ops["o_proj"].op.n) == (tokens, 4096, 2560)
    assert (ops["gate_proj"].op.k, ops["gate_proj"].op.n) == (2560, 9728)
    assert (ops["down_proj"].op.k, ops["down_proj"].op.n) == (9728, 2560)
    assert ops["k_proj"].weight_bytes == 2560 * 1024 * 2
    assert ops["q_norm"].op.elements == tokens * 4096 and ops["q_norm"].weight_bytes == 128 * 2
    assert ops["rope"].op.elements == tokens * (4096 + 1024)


def test_attention_shapes_per_sequence(q4b):
    ops = {o.label: o for o in layer_ops(q4b, [SequenceChunk.prefill(256, context_len=512),
                                               SequenceChunk.decode(1000)])}
    qk, av, sm = ops["attn_qk[s0]"].op, ops["attn_av[s0]"].op, ops["attn_softmax[s0]"].op
    assert (qk.batch, qk.m, qk.k, qk.n) == (32, 256, 128, 768)
    assert (av.batch, av.m, av.k, av.n) == (32, 256, 768, 128)
    assert sm.kind == "softmax" and sm.elements == 32 * 256 * 768
    decode = ops["attn_qk[s1]"].op
    assert (decode.batch, decode.m, decode.k, decode.n) == (32, 1, 128, 1001)
    # KV traffic: past tokens read from the cache (K by QK^T, V by AV), new ones written
    per_token = 8 * 128 * 2  # one of K or V, one layer, FP16
    assert ops["attn_qk[s0]"].kv_read_bytes == ops["attn_av[s0]"].kv_read_bytes == 512 * per_token
    assert ops["kv_write[s0]"].kv_write_bytes == 256 * 2 * 8 * 128 * 2
    assert ops["kv_write[s1]"].kv_write_bytes == 2 * per_token
    assert ops["attn_qk[s1]"].kv_read_bytes == 1000 * per_token
    assert ops["kv_write[s0]"].role == "kv_write" and ops["attn_qk[s0]"].role == "attention"


def test_kv_write_total_matches_kv_bytes_per_token(q4b):
    batch = [SequenceChunk.prefill(40), SequenceChunk.decode(9)]
    written = sum(o.kv_write_bytes for o in layer_ops(q4b, batch))
    assert written * q4b.num_hidden_layers == 41 * q4b.kv_bytes_per_token(2)
    fp8 = sum(o.kv_write_bytes for o in layer_ops(q4b, batch, kv_dtype_bytes=1))
    assert fp8 * 2 == written


@pytest.mark.parametrize("name", SHIPPED)
def test_weight_bytes_sum_to_layer_params(name):
    model = load_model(name)
    for dtype in (1, 2):
        ops = layer_ops(model, [SequenceChunk.prefill(17), SequenceChunk.decode(5)], dtype)
        assert sum(o.weight_bytes for o in ops) == model.layer_params(0).total * dtype
    whole = sum(sum(o.weight_bytes for o in layer_ops(model, [(1, 0)], 2, layer=i))
                for i in range(model.num_hidden_layers))
    head = sum(o.weight_bytes for o in lm_head_ops(model, [(1, 0)]))
    assert whole + head + model.params_embedding * 2 * (1 - model.tie_word_embeddings) \
        == model.weight_bytes(2)


def test_weight_bytes_sum_for_other_families():
    for config in (MIXTRAL_8X7B, DEEPSEEK_MOE_16B, QWEN1_5_MOE_A2_7B):
        model = parse_model(config)
        for layer in range(model.num_hidden_layers):
            ops = layer_ops(model, [(3, 4)], layer=layer)
            assert sum(o.weight_bytes for o in ops) == model.layer_params(layer).total * 2


@pytest.mark.parametrize("name", SHIPPED)
def test_decode_flops_are_twice_active_params(name):
    model = load_model(name)
    batch = [SequenceChunk.decode(0)] * 4
    ops = layer_ops(model, batch)
    per_layer = model.layer_params(0)
    weight_gemms = sum(o.flops for o in ops
                       if o.op.kind == "gemm" and o.role in ("linear", "router", "moe_experts"))
    # every matmul parameter is used once per token (norm weights are not matmuls)
    norm_params = per_layer.norms + (2 * model.head_dim if model.qk_norm else 0)
    assert weight_gemms == 2 * 4 * (per_layer.active - norm_params)
    total = totals(ops).flops
    assert total == pytest.approx(2 * 4 * per_layer.active, rel=0.02)


def test_attention_flops_grow_with_context(q4b):
    short = totals(layer_ops(q4b, [SequenceChunk.decode(100)])).flops
    long = totals(layer_ops(q4b, [SequenceChunk.decode(4100)])).flops
    attention = 2 * 2 * 32 * 128 * 4000  # QK^T and AV over 4000 more keys
    softmax = 5 * 32 * 4000
    assert long - short == attention + softmax


def test_prefill_flops_scale_with_tokens(q4b):
    def linear_flops(tokens):
        ops = layer_ops(q4b, [SequenceChunk.prefill(tokens)])
        return sum(o.flops for o in ops if o.role == "linear")

    assert linear_flops(1024) == 2 * linear_flops(512) == 4 * linear_flops(256)
    attention = [sum(o.flops for o in layer_ops(q4b, [SequenceChunk.prefill(t)])
                     if o.role == "attention") for t in (256, 512)]
    assert attention[1] == 4 * attention[0]  # dense new x new score rectangle


def test_activation_bytes(q4b):
    ops = {o.label: o for o in layer_ops(q4b, [SequenceChunk.prefill(10)])}
    assert ops["q_proj"].activation_in_bytes == 10 * 2560 * 2
    assert ops["q_proj"].activation_out_bytes == 10 * 4096 * 2
    assert ops["act_mul"].activation_in_bytes == 2 * 10 * 9728 * 2
    assert ops["attn_residual"].activation_in_bytes == 2 * 10 * 2560 * 2
    assert ops["attn_av[s0]"].activation_out_bytes == 10 * 4096 * 2


def test_moe_layer_ops(moe):
    batch = [SequenceChunk.prefill(20), SequenceChunk.decode(30)]
    ops = layer_ops(moe, batch)
    names = [o.name for o in ops]
    tail = names[names.index("post_attention_norm"):]
    assert tail == ["post_attention_norm", "router", "router_softmax", "router_topk",
                    "moe_experts", "mlp_residual"]
    by_name = {o.name: o for o in ops}
    router = by_name["router"]
    assert router.role == "router" and (router.op.m, router.op.k, router.op.n) == (21, 2048, 128)
    assert by_name["router_topk"].op.kind == "reduce"
    experts = by_name["moe_experts"]
    assert experts.role == "moe_experts"
    info = experts.moe
    assert (info.num_experts, info.top_k, info.moe_intermediate_size, info.tokens) == \
        (128, 8, 768, 21)
    assert info.norm_topk_prob and info.hidden_size == 2048
    assert experts.flops == info.flops == 2 * 21 * 8 * 3 * 2048 * 768
    assert experts.weight_bytes == 128 * info.expert_weight_bytes
    assert 8 <= info.expected_experts_touched() <= 128


def test_expert_expansion_matches_placeholder(moe):
    info = next(o for o in layer_ops(moe, [SequenceChunk.prefill(16)]) if o.moe).moe
    expanded = [op for expert in range(16) for op in expert_ffn_ops(info, expert, 8)]
    gemms = sum(o.flops for o in expanded if o.op.kind == "gemm")
    assert gemms == info.flops
    assert sum(o.weight_bytes for o in expanded) == 16 * info.expert_weight_bytes
    assert {o.expert for o in expanded} == set(range(16))
    assert expanded[0].label == "expert_gate_proj[e0]"
    with pytest.raises(ValueError):
        expert_ffn_ops(info, 128, 1)


def test_shared_experts_and_dense_layers_of_moe_families():
    qwen2 = parse_model(QWEN1_5_MOE_A2_7B)
    names = [o.name for o in layer_ops(qwen2, [(4, 0)])]
    assert names[names.index("moe_experts") + 1:] == [
        "shared_gate_proj", "shared_up_proj", "shared_act_mul", "shared_down_proj",
        "shared_expert_gate", "shared_expert_add", "mlp_residual"]
    deepseek = parse_model(DEEPSEEK_MOE_16B)
    dense0 = [o.name for o in layer_ops(deepseek, [(4, 0)], layer=0)]
    assert "moe_experts" not in dense0 and "gate_proj" in dense0
    assert "moe_experts" in [o.name for o in layer_ops(deepseek, [(4, 0)])]
    shared = {o.name: o for o in layer_ops(deepseek, [(4, 0)], layer=5)}["shared_gate_proj"]
    assert shared.op.n == 2 * 1408
    mixtral = parse_model(MIXTRAL_8X7B)
    experts = {o.name: o for o in layer_ops(mixtral, [(1, 0)])}["moe_experts"].moe
    assert experts.moe_intermediate_size == 14336 and experts.top_k == 2


def test_embedding_and_lm_head(q4b):
    batch = [SequenceChunk.prefill(100), SequenceChunk.prefill(50, sample=False),
             SequenceChunk.decode(10), SequenceChunk.decode(20)]
    (embed,) = embedding_ops(q4b, batch)
    assert embed.role == "embedding" and embed.weight_bytes == 152 * 2560 * 2
    assert embed.activation_out_bytes == 152 * 2560 * 2
    norm, head = lm_head_ops(q4b, batch)
    assert norm.name == "final_norm" and norm.op.elements == 152 * 2560
    assert head.name == "lm_head" and head.role == "linear"
    assert (head.op.m, head.op.k, head.op.n) == (3, 2560, 151936)  # last token of sampling seqs
    assert head.weight_bytes == 151936 * 2560 * 2
    assert [o.name for o in lm_head_ops(q4b, [SequenceChunk.prefill(8, sample=False)])] \
        == ["final_norm"]


def test_deterministic_and_cached(q4b):
    batch = [(7, 3), (1, 99)]
    first, second = layer_ops(q4b, batch), layer_ops(q4b, list(batch))
    assert first == second and first is not second
    first.clear()  # callers own the returned list
    assert len(layer_ops(q4b, batch)) == len(second)


def test_bad_arguments(q4b):
    with pytest.raises(ValueError, match="dtype_bytes"):
        layer_ops(q4b, [(1, 0)], 0)
    with pytest.raises(IndexError):
        layer_ops(q4b, [(1, 0)], layer=36)


def test_a_config_json_with_a_key_twice_non_utf8_or_absurd_layers_is_a_clear_error(tmp_path):
    from npusim.workload.model_config import load_model as load

    shipped = (Path(__file__).resolve().parents[2] / "workloads" / "models" / "qwen3_4b.json").read_text()
    twice = tmp_path / "twice.json"
    twice.write_text(shipped.rstrip().rstrip("}") + ', "hidden_size": 1024}')
    with pytest.raises(ConfigError, match="hidden_size: key appears twice"):
        load(twice)
    latin = tmp_path / "latin.json"
    latin.write_bytes(shipped.encode().replace(b"{", b'{"note": "\xe9",', 1))
    with pytest.raises(ConfigError, match="not a UTF-8 text file .byte 0xe9"):
        load(latin)
    deep = tmp_path / "deep.json"
    deep.write_text(json.dumps({**json.loads(shipped), "num_hidden_layers": 10**9}))
    with pytest.raises(ConfigError, match="num_hidden_layers.*less than or equal to 10000"):
        load(deep)  # at once, not after summing 10^9 layers
