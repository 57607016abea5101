"""A bounded slice of the fault-injection run (`make fault` and `make fault-ci` run more, and
the flow slice), and the harness's checkers (the flow checks too) shown to see what they must
see."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from aos.kernel.wasm import WasmEngine
from aos.kernel.world.world import World
from tests.fault import flows, harness

pytestmark = pytest.mark.fault

KILLS = 10
FRESH_EVERY = 5  # two worlds: creation, growth across kills and retirement are all covered


# ~20 s alone: ten kills, each followed by a reopen and a replay check.
@pytest.mark.timeout(900)
def test_sigkill_at_random_and_named_points_loses_nothing(tmp_path: Path) -> None:
    # A fresh seed each run widens coverage over time; a failure names it (AOS_FAULT_SEED=...).
    seed = int(os.environ.get("AOS_FAULT_SEED", random.SystemRandom().getrandbits(32)))
    summary = harness.run(KILLS, seed=seed, work=tmp_path, fresh_every=FRESH_EVERY, quiet=True)
    assert not summary.failures, summary.render()
    assert summary.kills == KILLS, summary.render()
    assert summary.acked_ops > 0


PG_KILLS = 4
PG_RESTARTS = 2  # one lane: the draw decides the modes; `make fault-ci` runs both


# ~25-40 s alone: a PostgreSQL cluster of its own, killed children and restarted servers.
@pytest.mark.timeout(900)
def test_on_postgresql_kills_and_server_restarts_lose_nothing(tmp_path: Path) -> None:
    seed = int(os.environ.get("AOS_FAULT_SEED", random.SystemRandom().getrandbits(32)))
    summary = harness.run(
        PG_KILLS,
        seed=seed,
        work=tmp_path,
        fresh_every=3,  # a world retired (replayed from genesis, `aos world verify`) or two
        quiet=True,
        store="pg",
        restarts=PG_RESTARTS,
    )
    assert not summary.failures, summary.render()
    assert summary.kills == PG_KILLS, summary.render()
    assert sum(summary.restarts.values()) == PG_RESTARTS, summary.render()
    assert summary.recovered_acks >= PG_RESTARTS * harness.RECOVERED_ACKS_MIN
    assert summary.verified_worlds >= 1, summary.render()


def _workload(world: Path, ack: Path, ops: int) -> None:
    command = [sys.executable, "-m", "tests.fault.workload", "--world", str(world)]
    command += ["--ack", str(ack), "--seed", "7", "--ops-max", str(ops)]
    env = {k: v for k, v in os.environ.items() if k != "AOS_FAULT_POINT"}
    subprocess.run(command, cwd=harness.REPO, env=env, check=True, capture_output=True)


def test_the_checker_sees_a_lost_altered_or_doubly_acknowledged_record(tmp_path: Path) -> None:
    world, ack = tmp_path / "world", tmp_path / "ack.jsonl"
    _workload(world, ack, 30)
    acks = harness.read_acks(ack)
    engine = WasmEngine()
    assert harness.check_world(world, acks, engine, from_seq=None).problems == []
    first = next(a for a in acks if a["records"])
    [seq, record_hash] = first["records"][0]
    others = [a for a in acks if a is not first]
    altered = [{**first, "records": [[seq, "blake3:" + "0" * 64], *first["records"][1:]]}]
    lost = [first, {"op": "send", "records": [[10**6, record_hash]]}]
    unsettled = [first, {"op": "settle", "records": [], "intents": ["blake3:" + "1" * 64]}]
    doubled = [first, {"op": "send", "records": [[seq, record_hash]]}]  # one input, two acks
    cases = ((altered, "differs"), (lost, "missing"), (unsettled, "not journaled"))
    for bad, says in (*cases, (doubled, "and again by")):
        problems = harness.check_world(world, others + bad, engine, from_seq=None).problems
        assert len(problems) == 1 and says in problems[0], problems


def test_a_torn_ack_line_is_cut_off(tmp_path: Path) -> None:
    ack = tmp_path / "ack.jsonl"
    ack.write_bytes(b'{"op": "send", "records": []}\n{"op": "se')
    assert harness.read_acks(ack) == [{"op": "send", "records": []}]
    assert ack.read_bytes() == b'{"op": "send", "records": []}\n'


def test_the_flow_checker_sees_a_doubled_call_a_second_end_and_a_lost_input(
    tmp_path: Path,
) -> None:
    world_dir, ack = tmp_path / "world", tmp_path / "ack.jsonl"
    command = [sys.executable, "-m", "tests.fault.flows", "--world", str(world_dir)]
    command += ["--keys", str(tmp_path / "keys"), "--ack", str(ack), "--seed", "7"]
    env = {k: v for k, v in os.environ.items() if k != "AOS_FAULT_POINT"}
    subprocess.run(
        [*command, "--ops-max", "60"], cwd=harness.REPO, env=env, check=True, capture_output=True
    )
    acks = harness.read_acks(ack)
    with World.open(world_dir, engine=WasmEngine()) as world:
        journal: dict[int, dict[str, Any]] = dict(world.store.journal.read(1))  # type: ignore[arg-type]
        head = max(journal)

        def problems(changed: dict[int, dict[str, Any]], more: list[dict[str, Any]]) -> list[str]:
            found: list[str] = []
            flows.check(found, changed, world, acks + more)
            return found

        assert problems(journal, []) == []
        call = next(
            r
            for _, r in sorted(journal.items())
            if r["kind"] == "effect_intent" and str(r["effect"]).startswith("aos/tool.")
        )
        again = {**call, "intent": "blake3:" + "2" * 64}
        found = problems({**journal, head + 1: again}, [])
        assert len(found) == 3 and all("issued 2 times" in p or "reuses" in p for p in found)
        found = problems({**journal, head + 1: {**again, "issuer_ref": "w9999"}}, [])
        assert len(found) == 1 and "for one decision" in found[0], found
        ended = next(
            r
            for _, r in sorted(journal.items())
            if r["kind"] == "step"
            and any(e["event"] == "playbook.finished" for e in r.get("ann", {}).get("events", []))
        )
        found = problems({**journal, head + 1: ended}, [])
        assert len(found) == 1 and "finished 2 times" in found[0], found
        running = next(e for e, s in flows.exec_states(world).items() if s["status"] == "running")
        lost = [
            {"op": "start", "exec": "never-started", "records": []},
            {"op": "signal", "exec": running, "name": "never-sent", "records": []},
            {"op": "cancel", "exec": running, "records": []},
        ]
        found = problems(journal, lost)
        assert len(found) == 5, found  # start: no cell, not journaled; signal; cancel: twice
