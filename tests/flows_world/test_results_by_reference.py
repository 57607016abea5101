"""Large results by reference on a real flow world (the interpreter component, the kernel,
signed receipts): a long loop whose every result is tens of KB completes, its state small all
along (spec/11 §3.1, §7); the next step and an arc read its aggregate; `aos flow status` and
the history stay readable; and `aos world replay --verify` reproduces a world that holds such
a loop beside an execution the kernel failed."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from aos.cli.main import main
from aos.flows.serve import flow_operations as ops
from aos.flows.serve.flow_world import EXEC_WORKFLOW
from aos.kernel.audit import replay
from tests.flows_world.support import make_flow_world
from tests.flows_world.test_kernel_faults import AT_ONCE

LOOP = """
name: t/big-loop
steps:
  - name: fan
    loop: {in: "{{ range(workload.n) | list }}", iterator: i, mode: sequential}
    tasks:
      - name: get
        do: call
        tool: {kind: echo}
        args: {i: "{{ iter.i }}", pad: "{{ 'x' * workload.size }}"}
    next:
      - {to: count, when: "{{ fan.results | length == workload.n }}"}
  - name: count
    tasks:
      - do: noop
        result:
          length: "{{ fan.results | length }}"
          last: "{{ fan.results[workload.n - 1].i }}"
          total: "{{ fan.stats.total }}"
"""
ITEMS = 200
ITEM_BYTES = 20_000  # 4 MB of results in all: today's limit refused item ~50
STATE_BYTES_MAX = 64 * 1024 + ITEMS * 96 + 16 * 1024
"""The inline budget, a reference per further result, and the rest of the state."""


def test_a_long_loop_of_large_results_completes_with_a_small_state(tmp_path: Path) -> None:
    flows = make_flow_world(tmp_path / "w")
    name = flows.deploy(LOOP).name
    ops.start(flows.world, name, workload={"n": ITEMS, "size": ITEM_BYTES}, exec_id="big")
    sizes = []
    while flows.world.reader.open_intents():  # one receipt at a time: the state after each step
        flows.adapters.drain(rounds_max=1)
        sizes.append(len(flows.state_bytes("big")))
    state = flows.state("big")
    assert state["status"] == "completed", ops.failure(state)
    assert max(sizes) < STATE_BYTES_MAX
    fan = state["business"]["steps"]["fan"]
    assert set(fan["results"]) == {"$ref", "size"} and fan["results"]["size"] < STATE_BYTES_MAX
    assert state["business"]["steps"]["count"] == {
        "length": ITEMS,
        "last": ITEMS - 1,
        "total": ITEMS,
    }
    cell = next(c for c in flows.world.reader.cells(EXEC_WORKFLOW) if c.key == "big")
    assert cell.status != "failed"
    flows.world.close()
    shown = CliRunner().invoke(main, ["flow", "status", "big", "--world", str(flows.path)])
    assert shown.exit_code == 0 and len(shown.output) < 10_000, shown.output[:500]
    assert '"$ref": "blake3:' in shown.output  # a reference with its size, not megabytes
    events = CliRunner().invoke(
        main, ["flow", "events", "big", "--world", str(flows.path), "--json"]
    )
    assert json.loads(events.stdout)[-1]["status"] == "completed"


def test_a_world_with_a_loop_by_reference_and_a_refused_step_replays(tmp_path: Path) -> None:
    flows = make_flow_world(tmp_path / "w")
    flows.run(LOOP, {"n": 30, "size": 5_000}, exec_id="loop")
    assert flows.state("loop")["status"] == "completed"
    assert set(flows.state("loop")["business"]["steps"]["fan"]["results"]) == {"$ref", "size"}
    flows.run(AT_ONCE, exec_id="refused")
    assert flows.state("refused")["status"] == "failed"
    written = [
        r for _, r in flows.journal() if r["kind"] == "step" and r.get("writes")
    ]  # the interpreter wrote blobs itself (the aggregate), beside the adapter's
    assert written
    flows.world.close()
    for workers in (1, 2):
        report = replay.verify_replay(flows.path, workers_max=workers, parallel_records_min=0)
        assert report.ok, report.divergence
