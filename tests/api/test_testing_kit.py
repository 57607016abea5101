"""aos.testing through the public API only: waiting is free on a test world, tool doubles
answer and record every call, and the replayer names the first divergence (spec/11 §13.2)."""

from __future__ import annotations

import itertools
import time
from pathlib import Path

import yaml

import aos
from aos.testing import Failure, Replayer, ToolDoubles, test_world

EXAMPLES = Path(__file__).resolve().parents[2] / "flows" / "examples"
CHECKOUT = EXAMPLES / "checkout.yaml"
HOUR_NS = 3600 * 10**9
WEEK_NS = 7 * 24 * HOUR_NS


def checkout_doubles() -> ToolDoubles:
    declined = Failure("card.declined", "the card was declined")
    return ToolDoubles(
        tasks={
            "charge": [declined, declined, declined, {"paid": 7}],
            "follow_up": [{"ready": False}, {"ready": True}],
        }
    )


def test_an_hour_of_backoff_and_a_week_timer_take_no_wall_time(tmp_path: Path) -> None:
    doubles = checkout_doubles()
    with test_world(doubles, path=tmp_path / "world") as flows:
        began = time.monotonic()
        run = flows.run(CHECKOUT)
        outcome = run.wait()
        wall_s = time.monotonic() - began
        started = run.events(kind="task.started")
    assert outcome.ok and outcome.exit_code == 0 and outcome.result == {"ready": True}
    assert wall_s < 2.0, f"took {wall_s:.2f} s of wall time"
    # The history's logical times: 15, 30 and 60 minutes of backoff, then a week.
    times = [e.logical_ns for e in started]
    assert [b - a for a, b in itertools.pairwise(times)] == [
        HOUR_NS // 4,
        HOUR_NS // 2,
        HOUR_NS,
        0,
        WEEK_NS,
    ]
    assert [(c.step, c.attempt, c.args) for c in doubles.calls_of("charge")] == [
        ("charge", n, {"order": 7}) for n in (1, 2, 3, 4)
    ]
    assert all(c.doubled and c.kind == "python" for c in doubles.calls)
    assert len(doubles.calls_of("follow_up")) == 2


def test_the_replayer_passes_the_same_definition_and_flags_a_changed_one(
    tmp_path: Path,
) -> None:
    world = tmp_path / "world"
    with test_world(checkout_doubles(), path=world) as flows:
        exec_id = flows.run(CHECKOUT).wait().exec
    assert Replayer(CHECKOUT).replay(world).ok
    changed = yaml.safe_load(CHECKOUT.read_text())
    rule = changed["workflow"][0]["tool"]["spec"]["policy"]["rules"][0]["then"]
    rule["delay"] = 600  # the backoff the recorded retries were not made with
    edited = tmp_path / "checkout.yaml"
    edited.write_text(yaml.safe_dump(changed))
    replay = Replayer(edited).replay(world)
    assert not replay.ok and replay.divergence is not None
    assert replay.divergence["where"] == "execution" and replay.divergence["exec"] == exec_id
    assert replay.divergence["diverged_at"] > 0, replay.describe()


def test_a_kept_test_world_opens_again_and_replays(tmp_path: Path) -> None:
    world = tmp_path / "world"
    with test_world(checkout_doubles(), path=world) as flows:
        exec_id = flows.run(CHECKOUT).wait().exec
    with aos.open(world) as flows:
        assert flows.execution(exec_id[:12]).wait().ok
        assert [e.exec for e in flows.executions().executions] == [exec_id]
    replay = Replayer().replay(world)
    assert replay.ok and replay.records > 30 and replay.executions == 0, replay.describe()


def test_a_call_no_double_matches_runs_the_real_tool() -> None:
    doubles = ToolDoubles(kinds={"echo": lambda call: {"echoed": call.args}})
    with test_world(doubles, python_allow=()) as flows:
        outcome = flows.run(EXAMPLES / "hello.yaml").wait()
    assert outcome.result == {"sum": 14}
    assert [c.doubled for c in doubles.calls] == [False] * len(doubles.calls)
    assert {c.step for c in doubles.calls} == {"start", "square", "done"}


def test_a_function_double_answers_and_its_failure_is_the_task_error() -> None:
    def charge(call: object) -> object:
        raise Failure("card.expired", "expired", kind="transport", retryable=False)

    with test_world(ToolDoubles(tasks={"charge": charge, "follow_up": [{}]})) as flows:
        outcome = flows.run(CHECKOUT).wait()
    assert outcome.status == "failed" and outcome.exit_code == 3
    assert outcome.error is not None and outcome.error.code == "card.expired"


def test_the_fixtures_give_a_test_world(aos_world: object, aos_flows: aos.Flows) -> None:
    aos_world.doubles.tasks["charge"] = [{"paid": 1}]  # type: ignore[attr-defined]
    aos_world.doubles.tasks["follow_up"] = [{"ready": True}]  # type: ignore[attr-defined]
    outcome = aos_flows.run(CHECKOUT).wait()
    assert outcome.ok and aos_world.path.is_dir()  # type: ignore[attr-defined]
