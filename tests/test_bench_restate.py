"""The Restate benchmark's own logic (bench/bench_restate.py and its peers): its ratio and
percentile arithmetic, how it reads each side's answers, the code-first workflow and its
adapter's lines. The benchmark itself runs under `make bench-restate`, with Restate in its own
folder and virtualenv, never here."""

from __future__ import annotations

import importlib.util
import io
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from aos.kernel.adapters.sdk import Lease, Outcome, Result
from aos.kernel.air.loader import load_manifest_dir
from aos.kernel.hashing import hash_bytes
from aos_sdk import cbor
from aos_sdk.testing import Event, run
from bench import bench_restate as br
from bench.bench_playbooks import EXPECTED, BenchCheckError
from bench.harness import sampled, with_ratios
from bench.peers import aos_steps_adapter, restate_stack

STEPS_MODULE = br.WORLD / "module" / "three_steps.py"


def _load_workflow() -> ModuleType:
    spec = importlib.util.spec_from_file_location("aos_bench_three_steps", STEPS_MODULE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


three_steps = _load_workflow()
RESULTS = EXPECTED[br.CASE]


# --------------------------------------------------------------------------------------------
# Arithmetic


def test_percentile_is_the_nearest_rank() -> None:
    values = [float(v) for v in range(10, 0, -1)]  # unordered on purpose
    assert br.percentile(values, 90) == 9.0
    assert br.percentile(values, 91) == 10.0
    assert br.percentile(values, 100) == 10.0
    assert br.percentile(values, 1) == 1.0
    assert br.percentile([0.5], 90) == 0.5
    # 30 values: 90 % is rank 27 exactly (0.9 * 30 in floats is 27.000000000000004).
    assert br.percentile([float(v) for v in range(1, 31)], 90) == 27.0


@pytest.mark.parametrize(("values", "percent"), [([], 90), ([1.0], 0), ([1.0], 101)])
def test_percentile_refuses_what_has_none(values: list[float], percent: int) -> None:
    with pytest.raises(ValueError):
        br.percentile(values, percent)


def test_executions_ended_after_the_deadline_are_not_counted() -> None:
    assert br.ended_within([1.0, 9.99, 10.0, 10.01, 12.0], 10.0) == 3
    assert br.ended_within([], 10.0) == 0


def test_rate_ratios_are_the_inverse_of_the_time_ratios_round_by_round() -> None:
    restate_s, aos_s = [0.025, 0.020, 0.040], [0.050, 0.010, 0.040]
    ratios = br.rate_ratios(aos_s, restate_s)
    assert ratios["rate_ratio_per_round"] == [0.5, 2.0, 1.0]
    assert ratios["rate_ratio_median"] == 1.0


def test_rows_carry_the_median_of_per_round_ratios_not_the_ratio_of_medians() -> None:
    rows = [
        sampled("g", "restate", [1.0, 2.0, 4.0], "execution", baseline=True),
        sampled("g", "aos", [4.0, 1.0, 6.0], "execution", baseline=False),
    ]
    with_ratios(rows)
    assert rows[1].extra["ratio_per_round"] == [4.0, 0.5, 1.5]
    assert rows[1].extra["ratio_median"] == 1.5
    assert rows[1].median_s / rows[0].median_s == 2.0  # what a ratio of medians would say


def test_cpu_per_execution_names_the_engine_and_every_process() -> None:
    side = br.Side("aos", "code-first", lambda _: 0.0, lambda _: None, dict, "node")
    extra = br.cpu_extra(side, {"node": 0.3, "adapter": 0.1}, 10)
    assert extra["engine_cpu_ms_per_execution"] == 30.0
    assert extra["cpu_ms_per_execution"] == 40.0
    assert extra["cpu_ms_per_execution_by_process"] == {"adapter": 10.0, "node": 30.0}


# --------------------------------------------------------------------------------------------
# Reading each side's answers


def test_the_code_first_state_answer_is_read_into_each_steps_result() -> None:
    answer = {
        "workflow": br.WORKFLOW,
        "key": "code-first-1",
        "status": "completed",
        "state": {"id": "code-first-1", "message": "Hello World", "failed": None, **RESULTS},
    }
    assert br.code_first_results(answer) == RESULTS
    br.check_results("code-first", "code-first-1", br.code_first_results(answer))


def test_a_missing_or_different_step_result_fails_the_check() -> None:
    partial = {"state": {**RESULTS, "end": None}}
    with pytest.raises(BenchCheckError, match=r"code-first, execution x: .*end"):
        br.check_results("code-first", "x", br.code_first_results(partial))
    with pytest.raises(BenchCheckError, match="restate"):
        br.check_results("restate", "y", {**RESULTS, "shout": {"shout": "hello world"}})
    with pytest.raises(BenchCheckError):
        br.check_results("code-first", "z", br.code_first_results({"state": None}))


def test_the_adapters_lines_say_which_execution_ended_and_how() -> None:
    assert br.adapter_line('{"done": "code-first-7"}\n') == ("code-first-7", True, "")
    failed = '{"failed": "code-first-8", "why": "bench/three_steps.end@1: receipt.refused"}'
    assert br.adapter_line(failed) == (
        "code-first-8",
        False,
        "bench/three_steps.end@1: receipt.refused",
    )


@pytest.mark.parametrize("line", ['{"ready": true}', "[1]", '"done"'])
def test_a_line_that_names_no_execution_is_refused(line: str) -> None:
    with pytest.raises(BenchCheckError):
        br.adapter_line(line)


# --------------------------------------------------------------------------------------------
# The code-first adapter


def _outcome(effect: str, **answer: Any) -> Outcome:
    lease = Lease(
        lease_id="l-1",
        intent="blake3:" + "2" * 64,
        effect=effect,
        params={"message": "Hello World"},
        idempotency_key="blake3:" + "2" * 64,
        issuer_ref=None,
        origin_workflow=br.WORKFLOW,
        origin_key="code-first-3",
        expires_unix_ms=0,
    )
    return Outcome(lease, Result("ok", {}), **answer)


def test_the_adapter_reports_an_execution_once_its_last_receipt_is_answered() -> None:
    report = aos_steps_adapter.report
    assert report(_outcome(aos_steps_adapter.LAST_EFFECT, seq=12)) == {"done": "code-first-3"}
    assert report(_outcome("bench/three_steps.greet@1", seq=8)) is None
    refused = report(_outcome("bench/three_steps.shout@1", refused="receipt.refused"))
    assert refused == {
        "failed": "code-first-3",
        "why": "bench/three_steps.shout@1: receipt.refused",
    }
    unposted = report(_outcome(aos_steps_adapter.LAST_EFFECT, unposted="node unreachable"))
    assert unposted is not None and unposted["failed"] == "code-first-3"


def test_the_adapters_steps_compute_the_playbooks_results() -> None:
    results = {
        effect.split(".")[1].split("@")[0]: step(br.MESSAGE)
        for effect, step in aos_steps_adapter.STEPS.items()
    }
    assert results == RESULTS
    assert set(aos_steps_adapter.STEPS) == set(three_steps.EFFECTS.values())


# --------------------------------------------------------------------------------------------
# The code-first workflow, natively


def _start(key: str = "e-1") -> Event:
    start = three_steps.Start(key, "Hello World")
    return Event("bench/ThreeStepsEvent@1", start, key=key)


def _receipt(step: str, payload: Any, status: str = "ok", key: str = "e-1") -> Event:
    value = three_steps.Receipt(
        origin_workflow=br.WORKFLOW,
        intent_hash="blake3:" + "1" * 64,
        effect=three_steps.EFFECTS[step],
        adapter=aos_steps_adapter.ADAPTER,
        status={"$tag": status},
        payload=cbor.encode(payload),
        emitted_seq=1,
        origin_key=cbor.encode(key),
    )
    return Event("bench/ThreeStepsEvent@1", value, key=key)


def test_the_workflow_runs_its_three_steps_one_effect_each() -> None:
    state, events, effects = run(three_steps.three_steps, None, _start())
    assert [e.effect for e in effects] == [three_steps.EFFECTS["greet"]]
    assert effects[0].params == {"message": "Hello World"} and events == []
    for step, following in (("greet", "shout"), ("shout", "end"), ("end", None)):
        state, _, effects = run(three_steps.three_steps, state, _receipt(step, RESULTS[step]))
        expected = [three_steps.EFFECTS[following]] if following else []
        assert [e.effect for e in effects] == expected
    assert {step: getattr(state, step) for step in br.STEPS} == RESULTS
    assert state.failed is None


def test_a_failed_step_ends_the_workflow_and_a_second_start_changes_nothing() -> None:
    started, _, _ = run(three_steps.three_steps, None, _start())
    again, _, effects = run(three_steps.three_steps, started, _start())
    assert again == started and effects == []
    failed, _, effects = run(three_steps.three_steps, started, _receipt("greet", {}, "error"))
    assert failed.failed == "greet" and failed.greet is None and effects == []
    late, _, effects = run(three_steps.three_steps, failed, _receipt("greet", RESULTS["greet"]))
    assert late == failed and effects == []


def test_the_world_manifest_loads_and_checks() -> None:
    loaded = load_manifest_dir(br.WORLD, artifact_resolver=lambda path: hash_bytes(b"bench"))
    assert br.WORKFLOW in loaded.definitions
    assert br.START in loaded.definitions


# --------------------------------------------------------------------------------------------
# The Restate stack


def test_restate_is_left_out_with_the_make_target_that_sets_it_up(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(restate_stack, "RESTATE_DIR", tmp_path / "none")
    why = restate_stack.unavailable()
    assert why is not None and "make bench-restate-setup" in why
    binary = restate_stack.server_binary()
    assert binary.name == "restate-server" and binary.is_relative_to(tmp_path / "none")
    assert binary.parent.parent.name.startswith("restate-server-")


# --------------------------------------------------------------------------------------------
# Following the code-first adapter


def test_following_the_adapter_wakes_each_execution_and_fails_the_rest_when_it_ends(
    tmp_path: Path,
) -> None:
    node = br.CodeFirstNode(tmp_path, br.BenchClient())
    done, refused, left = (node.expect(name) for name in ("a", "b", "c"))
    lines = '{"done": "a"}\n{"failed": "b", "why": "receipt.refused"}\n'
    node.follow(io.StringIO(lines))
    assert done.is_set() and node.failure("a") is None
    assert refused.is_set() and node.failure("b") == "receipt.refused"
    assert left.is_set() and node.failure("c") == "the adapter exited"
    later = node.expect("d")  # an execution started after the adapter went
    assert later.is_set() and node.failure("d") == "the adapter exited"


def test_output_that_makes_no_sense_fails_every_waiting_execution(tmp_path: Path) -> None:
    node = br.CodeFirstNode(tmp_path, br.BenchClient())
    waiting = node.expect("a")
    node.follow(io.StringIO('{"done": "x"}\nnot json\n{"done": "a"}\n'))
    assert waiting.is_set()
    failed = node.failure("a")
    assert failed is not None and failed.startswith("the adapter's output:")
