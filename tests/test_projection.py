"""Projection on paper: the modelled roofline of hand-built and real per-GPU costs on larger
systems, the hierarchical network term, evaluability at each world size, and argument checks. CPU only."""
import math
from dataclasses import replace
from types import SimpleNamespace

import pandas as pd
import pytest

from pkit import hardware
from pkit.experiments.roofline_gap import projection
from pkit.experiments.roofline_gap.projection import (BOUNDS, SYSTEMS, TRAFFIC, System, list_systems, project, project_cost, split,
                                         summary)
from pkit.harness.problems import discover
from pkit.roofline import Ceilings, floor

COMPUTE_HEAVY = {"flops": 1e13, "hbm_bytes": 1e6, "link_bytes": 1e6}  # ~10 ms of bf16 FLOPs, a MB on the links
LINK_HEAVY = {"flops": 1e9, "hbm_bytes": 1e6, "link_bytes": 1e9}  # ~1 ms of FLOPs at most, a GB on the links
ONE_DOMAIN = [name for name, s in SYSTEMS.items() if s.nic is None]
SEVERAL_DOMAINS = [name for name, s in SYSTEMS.items() if s.nic is not None]


@pytest.fixture(scope="module")
def frame() -> pd.DataFrame:
    return project()


# ---- arithmetic on hand-built costs -----------------------------------------------------------------------------

@pytest.mark.parametrize("name", list(SYSTEMS))
def test_compute_heavy_cost_is_compute_bound_everywhere(name):
    assert project_cost(COMPUTE_HEAVY, SYSTEMS[name])["bound"] == "compute"


@pytest.mark.parametrize("traffic", list(TRAFFIC))
def test_link_heavy_cost_is_link_bound_in_a_domain_and_network_bound_across(traffic):
    bounds = {name: project_cost(LINK_HEAVY, SYSTEMS[name], traffic)["bound"] for name in SYSTEMS}
    assert {bounds[n] for n in ONE_DOMAIN} == {"link"} and {bounds[n] for n in SEVERAL_DOMAINS} == {"network"}


def test_compute_outgrowing_links_flips_the_bound():
    """2300 FLOPs per link byte: above H100's 2199 FLOP/B (compute-bound), below B200's 2500 (link-bound)."""
    cost = {"flops": 2.3e12, "hbm_bytes": 0, "link_bytes": 1e9}
    assert project_cost(cost, SYSTEMS["dgx_h100"])["bound"] == "compute"
    assert project_cost(cost, SYSTEMS["dgx_b200"])["bound"] == "link"


@pytest.mark.parametrize("name", ONE_DOMAIN)
def test_one_domain_is_the_roofline_floor(name):
    system, cost = SYSTEMS[name], {"flops": 3e12, "hbm_bytes": 2e9, "link_bytes": 5e8, "sync_steps": 2}
    f = floor(cost, system.ceilings(), "bfloat16")
    row = project_cost(cost, system, "uniform", "bfloat16")
    assert (row["compute_us"], row["hbm_us"], row["link_us"], row["nvlink_us"], row["sync_us"], row["time_us"]) == \
        pytest.approx((f.compute_s * 1e6, f.hbm_s * 1e6, f.link_s * 1e6, f.link_s * 1e6, f.sync_s * 1e6,
                       f.time_s * 1e6))
    assert row["network_us"] == 0 and row["network_bytes"] == 0 and row["bound"] == f.bound


@pytest.mark.parametrize("gpu", list(hardware.GPUS))
def test_system_ceilings_match_the_datasheet_ceilings(gpu):
    system = System("test", hardware.GPUS[gpu], 8, 8, None, 0.0, "none")
    assert replace(system.ceilings(), origin="") == replace(Ceilings.datasheet(gpu), origin="")


def test_576_gpu_network_term_is_bytes_leaving_the_node_over_the_nic():
    """Hierarchical all-reduce of S bytes on N nodes of G GPUs: each GPU's NIC carries the inter-node all-reduce
    of its 1/G slice, 2 (N − 1)/N · S/G bytes; the flat cost declares 2 (W − 1)/W · S."""
    system = SYSTEMS["dgx_b200_576"]
    w, g, s = system.gpus, system.domain_gpus, 2**30
    nodes = w // g
    row = project_cost({"flops": 0, "hbm_bytes": 0, "link_bytes": 2 * (w - 1) / w * s}, system, "aggregated")
    leaving = 2 * (nodes - 1) / nodes * s / g
    assert row["network_bytes"] == pytest.approx(leaving)
    assert row["network_us"] == pytest.approx(leaving / 50e9 * 1e6)  # ConnectX-7: 400 Gb/s = 50 GB/s one way
    assert row["nvlink_bytes"] == pytest.approx(2 * (g - 1) / g * s)  # the reduce-scatter and all-gather in a node
    assert row["link_us"] == max(row["nvlink_us"], row["network_us"]) and row["bound"] == "network"


def test_576_gpu_all_to_all_sends_every_remote_byte_over_the_nic():
    system = SYSTEMS["dgx_h100_576"]
    w, g, s = system.gpus, system.domain_gpus, 2**30
    row = project_cost({"flops": 0, "hbm_bytes": 0, "link_bytes": (w - 1) / w * s}, system, "uniform")
    assert row["network_bytes"] == pytest.approx((w - g) / w * s)  # the blocks for GPUs of other nodes
    assert row["nvlink_bytes"] == pytest.approx((g - 1) / w * s)
    assert row["network_us"] == pytest.approx((w - g) / w * s / 50e9 * 1e6)


def test_neighbour_edge_gpu_sends_one_halo_over_its_nic():
    assert split(1e6, "neighbour", gpus=16, domain_gpus=8) == (1e6, 5e5)
    assert split(1e6, "neighbour", gpus=8, domain_gpus=8) == (1e6, 0.0)


@pytest.mark.parametrize("traffic", ["aggregated", "uniform"])
@pytest.mark.parametrize("gpus, domain_gpus", [(16, 8), (512, 8), (576, 8), (72, 72), (64, 1)])
def test_hierarchical_split_keeps_every_byte(traffic, gpus, domain_gpus):
    nvlink, network = split(1e6, traffic, gpus, domain_gpus)
    assert nvlink + network == pytest.approx(1e6)
    assert (network > 0) == (gpus > domain_gpus)


@pytest.mark.parametrize("traffic", [*TRAFFIC, None])
def test_one_domain_sends_nothing_over_a_nic(traffic):
    assert split(1e6, traffic, gpus=72, domain_gpus=72) == (1e6, 0.0)


def test_sync_steps_cost_the_systems_alpha():
    row = project_cost({"flops": 0, "hbm_bytes": 0, "link_bytes": 0, "sync_steps": 3}, SYSTEMS["dgx_b200_576"])
    assert row["sync_us"] == pytest.approx(3 * SYSTEMS["dgx_b200_576"].alpha_us) and row["bound"] == "sync"


def test_faster_nic_halves_the_network_term():
    cx7, cx8 = (project_cost(LINK_HEAVY, SYSTEMS[n], "uniform") for n in ("dgx_b200_512", "dgx_b200_512_cx8"))
    assert cx8["network_us"] == pytest.approx(cx7["network_us"] / 2) and cx8["nvlink_us"] == cx7["nvlink_us"]


# ---- evaluating each problem's cost at a world size -------------------------------------------------------------

def fake_problem(cost, traffic=None) -> SimpleNamespace:
    meta = {} if traffic is None else {"traffic": traffic}
    return SimpleNamespace(META=meta, SIZES={"large": {"rows": 10, "width": 3}}, cost=cost)


def test_a_size_parameter_that_the_world_size_does_not_divide_is_not_evaluable():
    module = fake_problem(lambda w, size, dtype: {"flops": 0, "hbm_bytes": 0, "link_bytes": 8 * (
        module.SIZES[size]["rows"] // w) * module.SIZES[size]["width"]})
    cost, reason = projection._cost_at(module, 5, "large", "bfloat16")
    assert reason == "" and cost["link_bytes"] == 8 * 2 * 3
    cost, reason = projection._cost_at(module, 4, "large", "bfloat16")
    assert cost is None and reason.startswith("rows=10 not divisible by 4 GPUs")
    assert module.SIZES == {"large": {"rows": 10, "width": 3}} and type(module.SIZES["large"]["rows"]) is int


def test_a_cost_that_fails_after_flooring_a_shard_names_the_size_parameter():
    def cost(w, size, dtype):
        rows = fake.SIZES[size]["rows"] // w
        raise ValueError(f"{rows} rows per GPU")
    fake = fake_problem(cost)
    assert projection._cost_at(fake, 4, "large", "bfloat16")[1].startswith("rows=10 not divisible by 4 GPUs")
    assert projection._cost_at(fake, 5, "large", "bfloat16")[1] == "cost raised ValueError at 5 GPUs: 2 rows per GPU"


def test_a_cost_that_fails_at_a_world_size_says_so():
    def cost(w, size, dtype):
        raise ValueError("needs at most 8 GPUs")
    assert projection._cost_at(fake_problem(cost), 72, "large", "bfloat16") == (
        None, "cost raised ValueError at 72 GPUs: needs at most 8 GPUs")
    assert projection._cost_at(fake_problem(cost), 72, "huge", "bfloat16")[1] == "no size 'huge' (sizes ['large'])"


@pytest.mark.parametrize("system, dtype, flops, reason", [
    ("dgx_b200", "int64", 1, "dtype 'int64' has no FLOP rate"),
    ("dgx_b200_512", "bfloat16", 0, "no traffic pattern in the problem's META"),
])
def test_a_row_the_model_cannot_bound_says_why(system, dtype, flops, reason):
    module = fake_problem(lambda w, size, d: {"flops": flops, "hbm_bytes": 0, "link_bytes": 0})
    problem = SimpleNamespace(name="99_without_traffic", category="applications")
    row = projection._row(problem, module, system, SYSTEMS[system], "large", dtype)
    assert row["evaluable"] is False and row["not_evaluable"].startswith(reason) and row["modelled"] is True
    assert projection._row(problem, module, "dgx_b200", SYSTEMS["dgx_b200"], "large", "bfloat16")["evaluable"]


def test_a_problem_names_its_own_traffic():
    """The pattern comes from the problem's META, so a new problem is projected across domains from its folder."""
    module = fake_problem(lambda w, size, d: {"flops": 0, "hbm_bytes": 0, "link_bytes": 8e9}, traffic="uniform")
    problem = SimpleNamespace(name="99_new", category="moe")
    row = projection._row(problem, module, "dgx_b200_512", SYSTEMS["dgx_b200_512"], "large", "bfloat16")
    assert row["evaluable"] and row["traffic"] == "uniform"
    assert row["network_bytes"] == pytest.approx(split(8e9, "uniform", 512, 8)[1])


def test_every_problem_gets_a_row_per_system_or_a_reason(frame):
    problems = [p.name for p in discover()]
    assert len(frame) == len(problems) * len(SYSTEMS)
    assert sorted(frame.groupby(["problem", "system"]).size().unique()) == [1]
    assert set(frame["problem"]) == set(problems) and set(frame["system"]) == set(SYSTEMS)
    done, skipped = frame[frame["evaluable"]], frame[~frame["evaluable"]]
    assert done["time_us"].map(math.isfinite).all() and set(done["bound"]) <= set(BOUNDS)
    assert (done["not_evaluable"] == "").all()
    assert skipped["not_evaluable"].str.len().gt(0).all() and skipped["time_us"].isna().all()


def test_every_row_is_modelled(frame):
    assert frame["modelled"].dtype == bool and frame["modelled"].all()
    assert frame["assumptions"].str.contains("datasheet rates").all()
    assert summary(frame)["modelled"].all()


def test_a_declared_world_size_is_always_evaluable(frame):
    for p in discover():
        rows = frame[(frame["problem"] == p.name) & frame["gpus"].isin(p.world_sizes)]
        assert rows["evaluable"].all(), rows[["system", "not_evaluable"]]


def test_projected_costs_are_the_problems_own(frame):
    """Watching the size parameters changes no number: evaluable rows carry exactly what `cost` returns."""
    problems = {p.name: p for p in discover()}
    for row in frame[frame["evaluable"]].itertuples():
        cost = problems[row.problem].cost(row.gpus, "large", row.dtype)
        assert (row.flops, row.hbm_bytes, row.link_bytes) == (cost["flops"], cost["hbm_bytes"], cost["link_bytes"])


def test_every_problem_has_a_traffic_pattern(frame):
    assert set(frame["traffic"]) <= set(TRAFFIC) and frame["traffic"].notna().all()


def test_dtype_falls_back_to_the_problems_first():
    first = {p.name: p.dtypes[0] for p in discover()}
    f = project(["01_all_reduce", "22_distributed_sample_sort"], ["dgx_b200"], dtype="bf16")
    assert f["dtype"].tolist() == ["bfloat16", first["22_distributed_sample_sort"]]  # sorts int64 or float32 keys
    assert project(["01_all_reduce"], ["dgx_b200"], dtype=None)["dtype"].tolist() == [first["01_all_reduce"]]


# ---- summary and the system registry ----------------------------------------------------------------------------

def test_summary_shares_add_up_and_common_compares_one_set(frame):
    s = summary(frame)
    assert s["gpus"].is_monotonic_increasing and len(s) == len(SYSTEMS)
    assert (s["evaluated"] + s["not_evaluable"] == frame["problem"].nunique()).all()
    shares = s[[f"share_{b}" for b in BOUNDS]].sum(axis=1)
    assert shares[s["evaluated"] > 0].tolist() == pytest.approx([1.0] * int((s["evaluated"] > 0).sum()))
    assert (s["share_link_or_network"] == s["share_link"] + s["share_network"]).all()
    c = summary(frame, common=True)
    assert c["evaluated"].nunique() == 1 and (c["not_evaluable"] == 0).all()


def test_summary_counts_a_toy_frame():
    toy = pd.DataFrame({"problem": ["a", "b", "a", "b"], "system": ["x", "x", "y", "y"], "gpu": "B200",
                        "gpus": [576, 576, 8, 8], "domain_gpus": 8, "bound": ["network", None, "link", "compute"],
                        "evaluable": [True, False, True, True]})
    s = summary(toy)
    assert s["system"].tolist() == ["y", "x"] and s["evaluated"].tolist() == [2, 1]
    assert s["share_network"].tolist() == [0.0, 1.0] and s["share_link_or_network"].tolist() == [0.5, 1.0]
    assert math.isnan(summary(toy.assign(evaluable=[False, False, True, True]), common=True)["share_link"].iloc[1])


def test_list_systems_shows_every_system():
    t = list_systems()
    assert list(t.index) == list(SYSTEMS)
    assert t.loc[ONE_DOMAIN, "nic"].isna().all() and t.loc[SEVERAL_DOMAINS, "nic_GBps"].gt(0).all()
    assert (t["domains"] * t["domain_gpus"] == t["gpus"]).all()
    assert t.loc["dgx_b200", "flops_per_nvlink_byte"] > t.loc["dgx_h100", "flops_per_nvlink_byte"]
    assert t.loc["dgx_b200_576", "flops_per_nic_byte"] == pytest.approx(2250e12 / 50e9)
    assert t["alpha_source"].str.len().gt(0).all()


def test_hardware_keeps_the_discrete_gpus_and_cites_the_new_entries():
    assert list(hardware.GPUS) == ["A100", "H100", "H200", "B200"]  # notebook 01's trend is unchanged
    gb200 = hardware.SUPERCHIP_GPUS["GB200"]
    assert gb200.nvlink_gbps_per_direction == 900 and "NVL72" in gb200.source
    assert {n: nic.gbps_per_direction for n, nic in hardware.NICS.items()} == {
        "ConnectX-6": 25.0, "ConnectX-7": 50.0, "ConnectX-8": 100.0}
    assert all(nic.source for nic in hardware.NICS.values())


# ---- argument errors name the argument --------------------------------------------------------------------------

@pytest.mark.parametrize("call, match", [
    (lambda: split(-1, "uniform", 16, 8), "link_bytes:"),
    (lambda: split(1e6, "ring", 16, 8), "traffic:"),
    (lambda: split(1e6, None, 16, 8), r"traffic: .*several NVLink domains"),
    (lambda: split(1e6, "uniform", 1, 1), "gpus:"),
    (lambda: split(1e6, "uniform", 16, 6), "domain_gpus:"),
    (lambda: split(1e6, "uniform", 16, 0), "domain_gpus:"),
    (lambda: System("x", hardware.GPUS["B200"], 16, 8, None, 1.0, "assumed"), "nic:"),
    (lambda: System("x", hardware.GPUS["B200"], 8, 8, hardware.NICS["ConnectX-7"], 1.0, "assumed"), "nic:"),
    (lambda: System("x", hardware.GPUS["B200"], 8, 8, None, -1.0, "assumed"), "alpha_us:"),
    (lambda: System("x", hardware.GPUS["B200"], 8.0, 8, None, 1.0, "assumed"), "gpus:"),
    (lambda: project_cost(LINK_HEAVY, "dgx_b200"), "system:"),
    (lambda: project_cost({"flops": 1}, SYSTEMS["dgx_b200"]), "cost:"),
    (lambda: project(size=3), "size:"),
    (lambda: project(dtype="int8"), "dtype:"),
    (lambda: project(problems=["no_such_problem"]), "problems:"),
    (lambda: project(problems=[1]), "problems:"),
    (lambda: project(systems=["dgx_z900"]), "systems:"),
    (lambda: project(systems={"x": 1}), "systems:"),
    (lambda: list_systems({}), "systems:"),
    (lambda: summary("frame"), "frame:"),
    (lambda: summary(pd.DataFrame({"problem": []})), "frame:"),
])
def test_bad_arguments_name_the_argument(call, match):
    with pytest.raises(ValueError, match=match):
        call()
