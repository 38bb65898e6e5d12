"""The energy roll-up: conservation, linearity in work, per-level energies against the
configured parameters, static power x latency, and the ``energy`` block of metrics.json."""

import csv
import json
import math

import pytest

import npusim
from npusim.api import build_device
from npusim.cli import main
from npusim.config.loader import resolve_presets, validate
from npusim.config.presets import REPO_ROOT
from npusim.executor.analytic import run_analytic
from npusim.executor.base import prepare
from npusim.executor.tlm import run_tlm
from npusim.hw.area import npu_area_mm2
from npusim.hw.devices.npu import NpuConfig
from npusim.hw.energy import EnergyConfig
from npusim.mapping.taskgraph import TaskGraph
from npusim.metrics.energy import energy_metrics, generated_tokens, noc_hop_pj_per_bit

SCENARIOS = REPO_ROOT / "workloads" / "scenarios"
QUICKSTART = SCENARIOS / "quickstart.yaml"
LLM_ARGS = [str(SCENARIOS / "qwen3_4b_npu64.yaml"), "--set", "run.mode=analytic",
            "--set", "workload.prompt_len=32", "--set", "workload.output_len=2",
            "--set", "workload.model=qwen3_1_7b"]
SERVING_ARGS = [str(SCENARIOS / "qwen3_4b_npu64_pd_fusion.yaml"),
                "--set", "workload.model=qwen3_1_7b", "--set", "workload.trace.limit=4"]
PJ = 1e-12
REL = 1e-12  # float rounding only


def quickstart(mode="analytic", *overrides):
    return npusim.simulate(QUICKSTART, mode=mode, overrides=list(overrides))


def level(result, name):
    return result.metrics["energy"]["energy_by_level_j"].get(name, 0.0)


def moved_bytes(result, suffix):
    return sum(s["bytes_read"] + s["bytes_written"] for u, s in result.unit_stats.items()
               if u.endswith(suffix))


@pytest.fixture(scope="module")
def large_core_64():
    hw = validate(NpuConfig, resolve_presets({"preset": "npu/large_core_64"}, "test"), "test")
    return build_device(hw)


# -- parameters ---------------------------------------------------------------------------
@pytest.mark.unit
def test_every_parameter_is_documented_and_the_config_is_strict():
    for name, field in EnergyConfig.model_fields.items():
        assert field.description and len(field.description) > 20, name
    with pytest.raises(ValueError, match="extra"):
        EnergyConfig(mac_fp16=1.0)
    with pytest.raises(ValueError):
        EnergyConfig(dram_pj_per_bit={"HBM2": -1.0})
    with pytest.raises(ValueError):
        EnergyConfig().mac_fp16_pj = 2.0  # frozen


@pytest.mark.unit
@pytest.mark.parametrize("standard, family", [
    ("HBM2 2.0 Gb/s, 128-bit legacy channel", "HBM2"),
    ("HBM2E 3.2 Gb/s, 64-bit pseudo-channel", "HBM2E"),
    ("HBM3 6.4 Gb/s, 32-bit pseudo-channel", "HBM3"),
    ("LPDDR5-6400, x16 channel, BG mode", "LPDDR5"),
    ("LPDDR5X-8533, x16 channel, BG mode", "LPDDR5X"),
    ("DDR4-3200AA x8 (8 Gb devices)", "DDR4"),
    ("GDDR7 32 Gb/s, 8-bit channel", "GDDR7"),
    ("", None),
    ("MRAM-9000", None),
])
def test_dram_standard_selects_its_energy_per_bit(standard, family):
    config = EnergyConfig(dram_pj_per_bit={"HBM2": 1, "HBM2E": 2, "HBM3": 3, "LPDDR5": 4,
                                           "LPDDR5X": 5, "DDR4": 6, "GDDR7": 7},
                          dram_default_pj_per_bit=99)
    value, matched = config.dram_pj_per_bit_for(standard)
    assert matched == family
    assert value == (config.dram_pj_per_bit[family] if family else 99)


@pytest.mark.unit
def test_noc_hop_energy_is_router_plus_wire_over_the_core_pitch(large_core_64):
    pitch_mm = math.sqrt(npu_area_mm2(large_core_64.config)["total"] / 64)
    hop, length = noc_hop_pj_per_bit(EnergyConfig(), large_core_64)
    assert length == pytest.approx(pitch_mm) and 5 < pitch_mm < 15
    assert hop == pytest.approx(0.1 + 0.04 * pitch_mm)
    assert noc_hop_pj_per_bit(EnergyConfig(noc_link_length_mm=2.0), large_core_64)[0] \
        == pytest.approx(0.1 + 0.08)
    assert noc_hop_pj_per_bit(EnergyConfig(noc_pj_per_bit_per_hop=1.5), large_core_64)[0] == 1.5


@pytest.mark.unit
def test_hand_built_counters_give_the_configured_energies(large_core_64):
    """Synthetic counters on one core: every term is the counter x its parameter."""
    config = EnergyConfig(static_scope="active")
    stats = {
        "core0.sa": {"flops": 2_000_000, "busy_ps": 1_000_000},
        "core0.vec": {"flops": 1_000, "busy_ps": 1_000},
        "core0.sram": {"bytes_read": 100, "bytes_written": 50, "busy_ps": 10},
        "core0.hbm": {"bytes_read": 4096, "bytes_written": 0, "activates": 3, "busy_ps": 10},
    }
    out = energy_metrics(stats, large_core_64, 2_000_000, config)
    lv = out["energy_by_level_j"]
    assert lv["sa"] == pytest.approx(1_000_000 * config.mac_fp16_pj * PJ, rel=REL)
    assert lv["vec"] == pytest.approx(1_000 * config.vector_op_pj * PJ, rel=REL)
    # 64 MiB per core: half the side of a 28.8 mm² macro is 2.68 mm of wire
    read = 20 / 64 / 2 + 0.04 * math.sqrt(64 * 0.45) / 2
    write = 1.4 * read
    assert lv["sram"] == pytest.approx((800 * read + 400 * write) * PJ, rel=REL)
    assert out["basis"]["sram"] == [{"capacity_bytes": 64 << 20, "read_pj_per_bit":
                                     pytest.approx(read), "write_pj_per_bit": pytest.approx(write)}]
    row_kib = large_core_64.config.hbm.row_bytes / 1024
    assert lv["hbm"] == pytest.approx(
        (4096 * 8 * 3.6 + 3 * config.dram_activate_pj_per_row_kib * row_kib) * PJ, rel=REL)
    # Only core 0's four parts leak ('active' scope), for 2 us.
    core_w = (128 * 128 * config.sa_static_w_per_mac + 128 * 64 * config.vec_static_w_per_alu
              + 64 * config.sram_static_w_per_mib + 4 * config.dram_static_w_per_channel)
    assert out["static_power_w"] == pytest.approx(core_w, rel=REL)
    assert lv["static"] == pytest.approx(core_w * 2e-6, rel=REL)
    assert out["energy_per_token_j"] is None and out["tokens"] is None
    assert out["energy_per_flop_pj"] == pytest.approx(out["energy_j"] / PJ / 2_001_000, rel=REL)


@pytest.mark.unit
def test_int8_arrays_use_the_int8_mac_energy():
    hw = validate(NpuConfig, resolve_presets(
        {"preset": "npu/large_core_64", "core": {"systolic": {"dtype_bytes": 1}}}, "t"), "t")
    out = energy_metrics({"core0.sa": {"flops": 2000}}, build_device(hw), 1, EnergyConfig())
    assert out["energy_by_level_j"]["sa"] == pytest.approx(1000 * EnergyConfig().mac_int8_pj * PJ)


@pytest.mark.unit
def test_generated_tokens_prefers_the_request_table():
    assert generated_tokens({"output_tokens": 7}) == 7
    assert generated_tokens({"output_tokens": 7}, {"requests": [{"generated": 3},
                                                                {"generated": 4}]}) == 7
    assert generated_tokens({}, {}) is None


# -- whole runs ---------------------------------------------------------------------------
@pytest.mark.component
@pytest.mark.parametrize("mode", ["tlm", "analytic"])
@pytest.mark.parametrize("scope", ["device", "active"])
def test_energy_is_conserved(mode, scope):
    energy = quickstart(mode, f"run.energy.static_scope={scope}").metrics["energy"]
    total = energy["energy_j"]
    assert total > 0
    assert math.fsum(energy["energy_by_unit_j"].values()) == pytest.approx(total, rel=REL)
    assert math.fsum(energy["energy_by_level_j"].values()) == pytest.approx(total, rel=REL)
    assert energy["dynamic_energy_j"] + energy["static_energy_j"] == pytest.approx(total, rel=REL)
    assert set(energy["energy_by_level_j"]) >= {"sa", "vec", "sram", "hbm", "noc", "static"}
    assert all(value > 0 for value in energy["energy_by_unit_j"].values())
    # 'device' charges leakage to all 64 cores, 'active' to the 4 the quickstart uses.
    cores = {unit.split(".")[0] for unit in energy["energy_by_unit_j"] if unit.startswith("core")}
    assert len(cores) == (64 if scope == "device" else 4)


@pytest.mark.component
@pytest.mark.parametrize("mode", ["tlm", "analytic"])
def test_dynamic_energy_is_linear_in_work(mode):
    once, twice = quickstart(mode), quickstart(mode, "workload.repeat=2")
    assert twice.metrics["segments"] == 2 * once.metrics["segments"]
    e1, e2 = once.metrics["energy"], twice.metrics["energy"]
    assert e2["dynamic_energy_j"] == pytest.approx(2 * e1["dynamic_energy_j"], rel=1e-9)
    for name, joules in e1["energy_by_level_j"].items():
        assert e2["energy_by_level_j"][name] == pytest.approx(2 * joules, rel=1e-9), name


@pytest.mark.component
def test_hbm_energy_per_byte_matches_the_configured_pj_per_bit():
    no_act = "run.energy.dram_activate_pj_per_row_kib=0"
    result = quickstart("analytic", no_act)
    hbm_bytes = moved_bytes(result, ".hbm")
    assert hbm_bytes > 0
    assert level(result, "hbm") == pytest.approx(hbm_bytes * 8 * 3.6 * PJ, rel=REL)
    doubled = quickstart("analytic", no_act, "run.energy.dram_pj_per_bit.HBM2E=7.2")
    assert level(doubled, "hbm") == pytest.approx(2 * level(result, "hbm"), rel=REL)
    # tlm counts activations; each costs 525 pJ per KiB of (1 KiB HBM2E) row.
    tlm = quickstart("tlm")
    acts = sum(s.get("activates", 0) for u, s in tlm.unit_stats.items() if u.endswith(".hbm"))
    assert acts > 0
    assert level(tlm, "hbm") == pytest.approx((hbm_bytes * 8 * 3.6 + acts * 525.0) * PJ, rel=REL)
    # A sequential stream activates one row per row streamed: the analytic estimate agrees.
    assert level(quickstart("analytic"), "hbm") == pytest.approx(level(tlm, "hbm"), rel=REL)


@pytest.mark.component
def test_noc_energy_is_bytes_times_hops_times_hop_energy():
    tlm = quickstart("tlm")
    link_bytes = sum(s["bytes"] for u, s in tlm.unit_stats.items() if u.startswith("noc.link("))
    hop = tlm.metrics["energy"]["basis"]["noc"]["pj_per_bit_per_hop"]
    assert link_bytes > 0 and tlm.metrics["energy"]["basis"]["noc"]["hops_basis"] == "link_stats"
    assert level(tlm, "noc") == pytest.approx(link_bytes * 8 * hop * PJ, rel=REL)
    # The quickstart's ring moves every byte one hop; the analytic level counts the hops
    # of each transfer's route, the same bytes x hops.
    analytic = quickstart("analytic")
    assert analytic.metrics["energy"]["basis"]["noc"]["hops_basis"] == "route_hops"
    assert analytic.unit_stats["noc"]["hop_bytes"] == moved_bytes(analytic, "noc") == link_bytes
    assert level(analytic, "noc") == pytest.approx(level(tlm, "noc"), rel=REL)


def one_transfer(mode, src, dst, size_bytes):
    """``(unit stats, energy metrics)`` of one transfer on a fresh 64-core chip."""
    device = build_device(validate(NpuConfig, resolve_presets(
        {"preset": "npu/large_core_64"}, "test"), "test"))
    graph = TaskGraph()
    graph.transfer(src, dst, size_bytes)
    run = (run_tlm if mode == "tlm" else run_analytic)(prepare(graph, device), device)
    return run.unit_stats, energy_metrics(run.unit_stats, device, run.makespan_ps)


@pytest.mark.component
def test_analytic_noc_energy_charges_every_hop_of_the_route():
    """Corner to corner of the 8x8 mesh is 14 hops (XY routing): both fidelities charge
    14 x bytes (the analytic level once charged one hop per byte, 14x too little)."""
    size = 1 << 20
    analytic, a_energy = one_transfer("analytic", "core0.sram", "core63.sram", size)
    tlm, t_energy = one_transfer("tlm", "core0.sram", "core63.sram", size)
    hop = a_energy["basis"]["noc"]["pj_per_bit_per_hop"]
    assert analytic["noc"]["bytes_read"] == tlm["noc"]["bytes_read"] == size
    assert analytic["noc"]["hop_bytes"] == tlm["noc"]["hop_bytes"] == 14 * size
    assert tlm["noc"]["hop_bytes"] == sum(s["bytes"] for u, s in tlm.items()
                                          if u.startswith("noc.link("))
    # Only the routed network counts hops (memory stages have none).
    assert [u for u, s in analytic.items() if "hop_bytes" in s] == ["noc"]
    assert a_energy["basis"]["noc"]["hops_basis"] == "route_hops"
    assert t_energy["basis"]["noc"]["hops_basis"] == "link_stats"
    assert a_energy["energy_by_level_j"]["noc"] == pytest.approx(14 * size * 8 * hop * PJ, rel=REL)
    assert a_energy["energy_by_level_j"]["noc"] == pytest.approx(
        t_energy["energy_by_level_j"]["noc"], rel=1e-9)


@pytest.mark.component
def test_analytic_and_tlm_noc_energy_agree_on_a_multi_hop_ring():
    """The quickstart's all-gather ring on the mesh's corners: every ring step is 7 hops."""
    corners = "workload.cores=[0,7,63,56]"
    analytic, tlm = quickstart("analytic", corners), quickstart("tlm", corners)
    noc_bytes = moved_bytes(analytic, "noc")
    assert noc_bytes == moved_bytes(tlm, "noc") > 0
    assert analytic.unit_stats["noc"]["hop_bytes"] == tlm.unit_stats["noc"]["hop_bytes"] \
        == 7 * noc_bytes
    hop = analytic.metrics["energy"]["basis"]["noc"]["pj_per_bit_per_hop"]
    assert level(analytic, "noc") == pytest.approx(7 * noc_bytes * 8 * hop * PJ, rel=REL)
    assert level(analytic, "noc") == pytest.approx(level(tlm, "noc"), rel=1e-9)


@pytest.mark.component
def test_static_energy_is_static_power_times_latency():
    result = quickstart("analytic")
    energy = result.metrics["energy"]
    # 64 cores x (128x128 MACs, 128x64 ALUs, 64 MiB SRAM, 4 HBM channels) + 64 routers.
    per_core = 128 * 128 * 2.5e-5 + 128 * 64 * 2.5e-5 + 64 * 0.01 + 4 * 0.1
    assert energy["static_power_w"] == pytest.approx(64 * per_core + 64 * 0.01, rel=REL)
    assert energy["static_energy_j"] == pytest.approx(
        energy["static_power_w"] * result.metrics["latency_s"], rel=REL)
    zero = quickstart("analytic", "run.energy.sram_static_w_per_mib=0")
    assert zero.metrics["energy"]["static_power_w"] == pytest.approx(
        energy["static_power_w"] - 64 * 64 * 0.01, rel=REL)


@pytest.mark.component
def test_power_estimates_are_ordered_and_the_roll_up_is_deterministic():
    first, second = quickstart("tlm"), quickstart("tlm")
    assert first.metrics["energy"] == second.metrics["energy"]
    energy = first.metrics["energy"]
    assert energy["average_power_w"] == pytest.approx(
        energy["energy_j"] / first.metrics["latency_s"], rel=REL)
    assert energy["static_power_w"] < energy["average_power_w"] <= energy["peak_power_w"]


# -- metrics.json from the CLI --------------------------------------------------------------
def run_cli(args, capsys):
    with pytest.raises(SystemExit) as info:
        main(args)
    captured = capsys.readouterr()
    return info.value.code, captured.err


@pytest.mark.component
@pytest.mark.parametrize("args, tokens_key", [
    ([str(QUICKSTART), "--mode", "analytic"], None),
    (LLM_ARGS, "output_tokens"),
    (SERVING_ARGS, "requests"),
])
def test_metrics_json_carries_energy(args, tokens_key, tmp_path, capsys):
    code, err = run_cli(["run", *args, "--out", str(tmp_path)], capsys)
    assert code in (0, None), err
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    energy = metrics["energy"]
    assert energy["energy_j"] > 0 and energy["dynamic_energy_j"] > 0
    assert math.fsum(energy["energy_by_unit_j"].values()) == pytest.approx(energy["energy_j"],
                                                                             rel=REL)
    assert energy["energy_per_flop_pj"] == pytest.approx(
        energy["energy_j"] / PJ / metrics["flops"], rel=REL)
    if tokens_key is None:
        assert energy["energy_per_token_j"] is None
        return
    if tokens_key == "output_tokens":
        tokens = metrics["output_tokens"]
    else:
        with open(tmp_path / "requests.csv", newline="") as handle:
            tokens = sum(int(row["generated"]) for row in csv.DictReader(handle))
    assert tokens > 0 and energy["tokens"] == tokens
    assert energy["energy_per_token_j"] == pytest.approx(energy["energy_j"] / tokens, rel=REL)


@pytest.mark.component
def test_bad_energy_override_is_a_clear_config_error(tmp_path, capsys):
    code, err = run_cli(["run", str(QUICKSTART), "--set", "run.energy.sram_read_pj_per_bit=-1",
                         "--out", str(tmp_path)], capsys)
    assert code != 0 and "Traceback" not in err
    assert "run.energy.sram_read_pj_per_bit" in err and "greater than or equal to 0" in err


@pytest.mark.unit
def test_one_dram_family_set_keeps_the_other_defaults():
    # --set run.energy.dram_pj_per_bit.HBM2E=4.0 used to replace the whole mapping, so an
    # LPDDR4 DRAM fell back to dram_default_pj_per_bit (3.6 instead of 13.5).
    config = EnergyConfig(dram_pj_per_bit={"HBM2E": 4.0})
    assert config.dram_pj_per_bit_for("HBM2E 3.2 Gb/s") == (4.0, "HBM2E")
    assert config.dram_pj_per_bit_for("LPDDR4-4266 x16") == (13.5, "LPDDR4")
    assert config.added_dram_families() == []
    assert EnergyConfig(dram_pj_per_bit={"GDDR6": 7.5, "HBM2": 1}).added_dram_families() == [
        "GDDR6"]


@pytest.mark.component
def test_a_misspelt_dram_family_is_an_error_naming_the_key(tmp_path, capsys):
    out = tmp_path / "out"
    code, err = run_cli(["run", str(QUICKSTART), "--set", "run.energy.dram_pj_per_bit.HMB2E=4",
                         "--out", str(out)], capsys)
    assert code == 2 and "Traceback" not in err
    assert str(QUICKSTART) in err and "run.energy.dram_pj_per_bit.HMB2E" in err
    assert "HBM2E 3.2 Gb/s" in err  # the device's DRAM standard, to compare with
    assert not out.exists()  # refused before the run
    # A new family the device does use is accepted (and charged).
    result = quickstart("analytic", "run.energy.dram_pj_per_bit.HBM2E 3=9.0")
    dram = result.metrics["energy"]["basis"]["dram"]
    assert [(entry["standard"], entry["pj_per_bit"]) for entry in dram] == [
        ("HBM2E 3.2 Gb/s, 64-bit pseudo-channel", 9.0)]


@pytest.mark.unit
def test_sram_energy_follows_the_macro_size_unless_set():
    from npusim.metrics.energy import sram_pj_per_bit

    # A fixed 2.7 mm of wire (the 64 MiB macro's) overstated small scratchpads' reads.
    big, small = sram_pj_per_bit(EnergyConfig(), 64 << 20), sram_pj_per_bit(EnergyConfig(), 16 << 20)
    assert big[0] == pytest.approx(0.2636, abs=1e-4) and small[0] == pytest.approx(0.2099, abs=1e-4)
    assert big[1] == pytest.approx(1.4 * big[0])
    assert sram_pj_per_bit(EnergyConfig(sram_read_pj_per_bit=0.3), 1 << 20) == pytest.approx((0.3, 0.42))
    assert sram_pj_per_bit(EnergyConfig(sram_write_pj_per_bit=0.5), 64 << 20)[1] == 0.5
