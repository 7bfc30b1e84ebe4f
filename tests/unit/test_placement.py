"""Where llama.cpp puts a target's layers on RPC workers (engine.machine.placement).

The expected splits below are worked out by hand from llama.cpp's rule; the
integration test test_rpc_placement.py checks the rule against llama.cpp's
own per-layer log.
"""

from __future__ import annotations

from gambit.engine.estimates import CostModel
from gambit.engine.machine.devices import DeviceMemory
from gambit.engine.machine.placement import (
    TargetPlacement,
    WorkerShare,
    cost_curve,
    describe_costs,
    placement_for,
    split_layers,
)
from gambit.engine.machine.rpc import WorkerInfo

GIB = 1024**3


def mem(free: int, total: int | None = None) -> DeviceMemory:
    return DeviceMemory(free, free if total is None else total)


def test_all_layers_on_one_device_count_the_output_layer() -> None:
    # 30 blocks + the output layer: llama.cpp's "offloaded 31/31 layers"
    assert split_layers(30, -1, [mem(8 * GIB)]) == (0, (31,))
    assert split_layers(30, 0, [mem(8 * GIB)]) == (0, (31,))  # (0 means all, as -1)


def test_equal_memory_splits_at_the_first_layer_past_half() -> None:
    # layer il goes to the first device whose split point exceeds il/31: 0..15, then 16..30
    assert split_layers(30, -1, [mem(4 * GIB), mem(4 * GIB)]) == (0, (16, 15))


def test_some_layers_stay_here_and_the_rest_split_by_memory() -> None:
    # n_gpu_layers 15: blocks 16..29 and the output layer go out, 16 layers stay
    assert split_layers(30, 15, [mem(4 * GIB)]) == (16, (15,))
    # the 15 over two equal devices: x = 0/15 .. 7/15 is below 0.5 -> 8 and 7
    assert split_layers(30, 15, [mem(4 * GIB), mem(4 * GIB)]) == (16, (8, 7))


def test_the_split_follows_free_memory_not_total() -> None:
    # 1 : 3 of free memory; split points 0.25, 1.0; x = il/31 < 0.25 for il 0..7
    assert split_layers(30, -1, [mem(1 * GIB, 64 * GIB), mem(3 * GIB, 4 * GIB)]) == (0, (8, 23))


def test_more_layers_asked_than_the_model_has_is_all_of_them() -> None:
    assert split_layers(30, 500, [mem(GIB)]) == (0, (31,))


def test_a_device_reporting_no_memory_counts_with_this_machines() -> None:
    assert split_layers(30, -1, [mem(0, 0), mem(4 * GIB)], host_free=4 * GIB) == (0, (16, 15))
    # free 0 of a real total is a full device: it gets nothing
    assert split_layers(30, -1, [mem(0, 8 * GIB), mem(4 * GIB)], host_free=4 * GIB) == (0, (0, 31))


def test_no_devices_keeps_everything_here() -> None:
    assert split_layers(30, -1, []) == (31, ())


def test_float32_split_points_as_in_llama_cpp() -> None:
    # Three equal devices: float32 thirds. il/31 against 1/3 and 2/3: 0..10, 11..20, 21..30
    assert split_layers(30, -1, [mem(GIB)] * 3) == (0, (11, 10, 10))


def test_placement_sums_each_workers_devices_in_order() -> None:
    w1 = WorkerInfo("10.0.0.2:50052", (3, 0, 0), (mem(2 * GIB), mem(2 * GIB)), rtt_s=0.0004)
    w2 = WorkerInfo("10.0.0.3:50052", (3, 0, 0), (mem(4 * GIB),), rtt_s=0.0021)
    placement = placement_for(30, 15, [w1, w2])
    assert placement == TargetPlacement(
        16,
        (
            WorkerShare("10.0.0.2:50052", 8, 4 * GIB, 0.0004),
            WorkerShare("10.0.0.3:50052", 7, 4 * GIB, 0.0021),
        ),
    )
    assert placement.total_layers == 31
    assert placement.describe() == (
        "Target: 16 layers here · 8 on 10.0.0.2:50052 (rtt 0.40 ms)"
        " · 7 on 10.0.0.3:50052 (rtt 2.1 ms) · network ≥ 2.5 ms per pass"
    )
    assert placement.as_dict()["local_layers"] == 16


def test_the_cost_line_shows_t1_and_the_largest_measured_ratio() -> None:
    costs = CostModel(k_max=8)
    assert describe_costs(costs) == "" and cost_curve(costs) == {}
    costs.set_target(1, 0.020)
    costs.set_target(5, 0.025)
    assert cost_curve(costs) == {1: 1.0, 5: 1.25}
    assert describe_costs(costs) == "Target pass: t(1) 20.0 ms · t(5)/t(1) 1.25"


def test_each_pass_waits_at_least_one_round_trip_per_worker_with_layers() -> None:
    near, far = WorkerShare("a:1", 10, 1, 0.0005), WorkerShare("b:1", 21, 1, 0.002)
    idle = WorkerShare("c:1", 0, 1, 0.05)  # holds nothing: never waited on
    placement = TargetPlacement(0, (near, far, idle))
    assert placement.network_s == 0.0025
    assert placement.describe().endswith("· network ≥ 2.5 ms per pass")
    assert placement.as_dict()["network_ms_per_pass"] == 2.5
    assert "network" not in TargetPlacement(31, ()).describe()
