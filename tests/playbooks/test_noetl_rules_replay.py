"""`aos world replay --verify` over a world whose executions exercise what `aos.flow/2` changed
on the step path (a step's `set_ctx` after its tasks, per loop iteration too, tasks read by
name, lenient templates, `| tojson` as text, a child named by a template, a step named with a
space), beside an execution of an `aos.flow/1` definition as playbooks compiled before it (a
step's `set_ctx` as a first task, a pipeline result through `tojson`), which keeps the meaning
it had: the journal replays byte for byte."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from click.testing import CliRunner

from aos.cli.main import main
from aos.flows.define.cfd import definition_from_value
from aos.flows.define.document import load_flow
from aos.flows.serve import flow_operations as ops
from tests.flows_world.support import make_flow_world


def _playbook(path: str, steps: list[dict[str, Any]], workload: Any = None) -> str:
    doc = {
        "apiVersion": "noetl.io/v2",
        "kind": "Playbook",
        "metadata": {"name": path.rsplit("/", 1)[-1], "path": path},
        "workload": workload or {},
        "workflow": steps,
    }
    return yaml.safe_dump(doc, sort_keys=False, allow_unicode=True)


CHILD = _playbook(
    "/tests/replay-child",
    [{"step": "echo", "tool": {"kind": "noop", "args": {"got": "{{ n }}"}}}],
    {"n": 0},
)
NOETL = _playbook(
    "tests/replay-rules",
    [
        {
            "step": "count items",
            "loop": {"in": "{{ workload.items }}", "iterator": "item"},
            "tool": {"kind": "python", "args": {"x": "{{ iter.item }}"}, "code": "result = x * 2"},
            "set_ctx": {"total": "{{ (ctx.total | default(0)) + steps['count items'] }}"},
            "next": {"arcs": [{"step": "shape", "when": "{{ event.name == 'loop.done' }}"}]},
        },
        {
            "step": "shape",
            "tool": [
                {"name": "fetch", "kind": "python", "code": "result = {'data': {'n': 7}}"},
                {
                    "name": "use",
                    "kind": "python",
                    "args": {
                        "n": "{{ fetch.data.n }}",
                        "picked": "{{ a.x if a else workload.b.x }}",
                        "body": "{{ fetch | tojson }}",
                    },
                    "code": "result = {'n': n, 'picked': picked, 'body': body}",
                },
            ],
            "set_ctx": {"n": "{{ shape.n + ctx.total }}"},
            "next": {"arcs": [{"step": "child", "when": "{{ ctx.n == 19 }}"}]},
        },
        {
            "step": "child",
            "tool": {
                "kind": "playbook",
                "path": "{{ workload.child }}",
                "args": {"n": "{{ ctx.n }}"},
            },
        },
    ],
    {"items": [1, 2, 3], "b": {"x": "lenient"}, "child": "/tests/replay-child"},
)
OLD_SET_CTX_FIRST: dict[str, Any] = {
    "format": "aos.flow/1",
    "name": "tests/replay-old",
    "steps": [
        {
            "name": "a",
            "tasks": [
                {"name": "a_set_ctx", "do": "assign", "set": {"seen": "{{ ctx | length }}"}},
                {"name": "one", "do": "call", "tool": {"kind": "echo"}, "args": {"v": 1}},
                {"name": "two", "do": "call", "tool": {"kind": "echo"}, "args": {"v": 2}},
            ],
            "result": (
                "{{ (_prev if _prev is mapping and '$ref' not in _prev else {'result': _prev})"
                " | merge_objects({'results': results}) | tojson }}"
            ),
        }
    ],
}
"""What the playbook compiler wrote before `aos.flow/2` for a two-task step with a `set_ctx`."""


def test_a_world_exercising_the_noetl_rules_replays(tmp_path: Path) -> None:
    flows = make_flow_world(tmp_path / "w")
    try:
        for text, source in ((CHILD, "child"), (NOETL, "noetl")):
            ops.deploy(flows.world, load_flow(text, source=source))
        old = ops.deploy(flows.world, definition_from_value(OLD_SET_CTX_FIRST)).name
        ops.start(flows.world, "tests/replay-rules", exec_id="noetl")
        ops.start(flows.world, old, exec_id="old")
        flows.adapters.drain()
        noetl, former = flows.state("noetl"), flows.state("old")
    finally:
        flows.world.close()
    assert noetl["status"] == "completed"
    steps = noetl["business"]["steps"]
    assert noetl["business"]["ctx"] == {"total": 12, "n": 19}
    assert steps["shape"]["results"]["use"] == {
        "n": 7,
        "picked": "lenient",
        "body": '{"data": {"n": 7}}',
    }
    assert steps["child"] == {"got": 19}
    assert former["status"] == "completed"
    assert former["business"]["ctx"] == {"seen": 0}  # set before its tasks, as it always was
    assert former["business"]["steps"]["a"] == {
        "v": 2,
        "results": {"a_set_ctx": {"seen": 0}, "one": {"v": 1}, "two": {"v": 2}},
    }
    result = CliRunner().invoke(
        main, ["world", "replay", "--verify", "--world", str(tmp_path / "w")]
    )
    assert result.exit_code == 0, result.output
    assert "ok: every record and the head match" in result.stdout
