"""Seed 003 §12, the streaming-pagination example, on a flow world against a local paginated
HTTP server: one endpoint pages 1..3 with page 2 answering 503 twice, another is a 404.
Pages run in order, the 503s are retried with exponential backoff on logical time, the 404
is routed to its store task, the last page breaks, and `loop.done` routes to
`validate_results`; each endpoint is a child execution (`exec: distributed`)."""

from __future__ import annotations

from pathlib import Path

from aos.flows.define.document import load_flow
from aos.flows.serve import flow_operations as ops
from aos.kernel.audit import replay
from tests.flows_world.support import make_flow_world
from tests.playbooks.server import Handler, serving

PLAYBOOK = Path(__file__).with_name("pagination.yaml")
SEC = 1_000_000_000


def test_streaming_pagination(tmp_path: Path) -> None:
    flows = make_flow_world(tmp_path / "w")
    try:
        with serving() as url:
            deployed = ops.deploy(flows.world, load_flow(PLAYBOOK.read_bytes(), source="p"))
            endpoints = [
                {"path": "/ep/ok", "page_size": 2},
                {"path": "/ep/missing", "page_size": 2},
            ]
            workload = {"api_url": url, "endpoints": endpoints}
            ops.start(flows.world, deployed.name, workload=workload, exec_id="p1")
            flows.adapters.drain()
        state = flows.state("p1")
        assert state["status"] == "completed"
        ok_pages = [c for c in Handler.calls if c.startswith("/ep/ok")]
        assert ok_pages == [f"/ep/ok?page={p}&pageSize=2" for p in (1, 2, 2, 2, 3)]
        assert [c for c in Handler.calls if c.startswith("/ep/missing")] == [
            "/ep/missing?page=1&pageSize=2"
        ]
        timers = [
            record["params"]["deliver_at_ns"]
            for _, record in flows.journal()
            if record["kind"] == "effect_intent" and record["effect"] == "sys/timer.set@1"
        ]
        assert timers == [2 * SEC, 6 * SEC]  # delay 2.0 s, exponential: 2 s then 4 s later

        children = {f"p1:fetch_all_endpoints:{n}" for n in (1, 2)}
        stored = {child: _stores(flows.events(child)) for child in children}
        assert sorted(stored.values()) == [["store_200"] * 3, ["store_404"]]
        for child in children:
            breaks = [
                e
                for e in flows.events(child)
                if e["event"] == "policy.task.evaluated" and e.get("do") == "break"
            ]
            assert [e["task"] for e in breaks] == ["paginate"]

        [routed] = [e for e in flows.events("p1") if e["event"] == "next.evaluated"][:1]
        assert (routed["on"], routed["to"]) == ("loop.done", ["validate_results"])
        validated = state["business"]["steps"]["validate_results"]
        assert validated["stats"] == {"total": 2, "success": 2, "failed": 0}
        # A distributed iteration's `set_ctx` writes its own execution's ctx (spec/11 §3.7).
        last = {flows.state(c)["business"]["ctx"].get("last_stored") for c in children}
        assert last == {"/ep/ok#3", None}
    finally:
        flows.world.close()
    report = replay.verify_replay(tmp_path / "w")  # retries, children, timers: byte for byte
    assert report.ok, report.divergence


def _stores(events: list[dict[str, object]]) -> list[str]:
    return [
        str(e["task"])
        for e in events
        if e["event"] == "task.started" and str(e.get("task", "")).startswith("store_")
    ]
