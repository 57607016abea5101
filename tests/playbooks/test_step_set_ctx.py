"""Step-level `set_ctx` (FLOWS.md §3, spec/12 §5): applied once the step's tasks are done —
after a success or a failure, before its arcs — in a scope that holds the step's own result,
so that a step paginates by setting the next page from its own response. A loop step applies
it after each iteration. Seed 003 §12's pagination, paginated by its step, runs against a
local server (page 2 answers 503 once): one request per page, plus the retried 503."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from aos.flows.define.cfd import FORMAT_2, canonical_value
from aos.flows.define.document import load_flow
from aos.flows.errors import FlowCheckError
from aos.flows.serve import flow_operations as ops
from aos.kernel.audit import replay
from tests.flows_world.support import make_flow_world
from tests.playbooks.driver import PLAYBOOKS, run_playbook
from tests.playbooks.server import Handler, serving
from tests.playbooks.test_semantics import arcs, py, rules, run, step

PAGINATION = Path(__file__).with_name("step_pagination.yaml")
SEC = 1_000_000_000
PAGES = [f"/pages?page={n}&pageSize=2" for n in (1, 2, 2, 3)]
"""One request per page, and page 2 again after its 503."""


def test_a_step_sets_its_next_page_from_its_own_response() -> None:
    with serving() as url:
        done = run_playbook(PAGINATION.read_bytes(), {"api_url": url})
    assert done.status == "completed"
    assert Handler.calls == PAGES
    assert done.fired == [1002 * SEC]  # the 503's retry: exponential, 2 s
    assert done.ctx == {"page": 4, "has_more": False, "stored": ["page#1", "page#2", "page#3"]}
    assert done.steps["done"] == {"pages": 3, "stored": ["page#1", "page#2", "page#3"]}
    fetches = [e for e in done.of("next.evaluated") if e["step"] == "fetch_page"]
    assert [e["to"] for e in fetches] == [["fetch_page"], ["fetch_page"], ["done"]]


def test_step_pagination_on_a_flow_world_replays(tmp_path: Path) -> None:
    """The same, and the corpus's http_pagination_v2 (its `start` step sets ctx), through the
    interpreter component on a world; `replay --verify` reproduces both byte for byte."""
    flows = make_flow_world(tmp_path / "w")
    corpus = (PLAYBOOKS / "examples" / "http_pagination_v2.yaml").read_bytes()
    try:
        with serving() as url:
            for exec_id, text in (("pages", PAGINATION.read_bytes()), ("corpus", corpus)):
                deployed = ops.deploy(flows.world, load_flow(text, source=exec_id))
                ops.start(flows.world, deployed.name, workload={"api_url": url}, exec_id=exec_id)
                flows.adapters.drain()
            calls = list(Handler.calls)
        pages, pages_corpus = flows.state("pages"), flows.state("corpus")
    finally:
        flows.world.close()
    assert calls[:4] == PAGES
    assert calls[4:] == [f"/data?page={n}&pageSize=100" for n in (1, 2, 3)]
    assert pages["status"] == "completed" and pages_corpus["status"] == "completed"
    assert pages["business"]["steps"]["done"]["pages"] == 3
    assert pages_corpus["business"]["ctx"]["current_page"] == 1
    assert pages_corpus["business"]["steps"]["process_results"]["count"] == 6
    report = replay.verify_replay(tmp_path / "w")
    assert report.ok, report.divergence


def test_the_step_set_ctx_is_a_field_of_the_step_not_a_first_task() -> None:
    definition = canonical_value(load_flow(PAGINATION.read_bytes(), source="p"))
    assert definition["format"] == FORMAT_2
    fetch = definition["steps"][1]
    assert [task["name"] for task in fetch["tasks"]] == ["fetch", "store"]
    assert set(fetch["set_ctx"]) == {"page", "has_more", "stored"}
    assert definition["steps"][2]["set_ctx"] == {}


def test_set_ctx_reads_the_result_and_the_arcs_read_ctx() -> None:
    done = run(
        step(
            "count",
            py("result = {'n': 41}"),
            set_ctx={"n": "{{ count.n + 1 }}", "seen": "{{ event.name }}"},
            next=arcs({"step": "big", "when": "{{ ctx.n > 41 }}"}, "small"),
        ),
        step("big"),
        step("small"),
    )
    assert done.status == "completed"
    assert done.ctx == {"n": 42, "seen": "step.done"}
    assert "big" in done.steps and "small" not in done.steps
    names = done.names()
    assert names.index("task.done") < names.index("step.done") < names.index("next.evaluated")


def test_set_ctx_applies_after_a_failed_step_too() -> None:
    done = run(
        step(
            "fetch",
            py("raise ValueError('down')"),
            set_ctx={"failure": "{{ event.payload.code }}", "status": "{{ event.name }}"},
            next=arcs({"step": "recover", "when": "{{ event.name == 'call.error' }}"}),
        ),
        step("recover", py("result = {'from': ctx}", args={"ctx": "{{ ctx }}"})),
    )
    assert done.status == "completed"
    assert done.ctx == {"failure": "python.raised", "status": "step.failed"}
    assert done.steps["recover"] == {"from": {"failure": "python.raised", "status": "step.failed"}}


def test_a_loop_step_applies_its_set_ctx_after_each_iteration() -> None:
    done = run(
        step(
            "each",
            py("result = {'v': item * 10}", args={"item": "{{ iter.n }}"}),
            loop={"in": "{{ workload.items }}", "iterator": "n"},
            set_ctx={"total": "{{ (ctx.total | default(0)) + each.v }}", "last": "{{ iter.n }}"},
            next=arcs({"step": "after", "when": "{{ event.name == 'loop.done' }}"}),
        ),
        step("after", py("result = total", args={"total": "{{ ctx.total }}"})),
        workload={"items": [1, 2, 3]},
    )
    assert done.status == "completed"
    assert done.ctx == {"total": 60, "last": 3}
    assert done.steps["after"] == 60
    assert [r["v"] for r in done.steps["each"]["results"]] == [10, 20, 30]


def test_a_set_ctx_that_cannot_render_fails_the_step() -> None:
    done = run(
        step(
            "a",
            py("result = {'n': 'text'}"),
            set_ctx={"n": "{{ a.n + 1 }}"},
            next=arcs({"step": "b", "when": "{{ event.name == 'step.failed' }}"}),
        ),
        step("b"),
    )
    assert done.status == "completed" and "b" in done.steps
    [failed] = done.of("step.failed")
    assert failed["error"]["code"] == "step.set_ctx"
    assert done.ctx == {}


def test_policy_set_ctx_runs_before_the_step_set_ctx() -> None:
    policy = rules({"else": {"then": {"do": "continue", "set_ctx": {"order": ["policy"]}}}})
    done = run(
        step(
            "a",
            py("result = 1", spec=policy),
            set_ctx={"order": "{{ ctx.order + ['step'] }}"},
        )
    )
    assert done.ctx == {"order": ["policy", "step"]}


def test_a_step_level_set_iter_is_refused_with_the_reason() -> None:
    doc = {
        "apiVersion": "noetl.io/v2",
        "kind": "Playbook",
        "metadata": {"name": "t"},
        "workflow": [{"step": "a", "tool": {"kind": "noop"}, "set_iter": {"x": 1}}],
    }
    with pytest.raises(FlowCheckError) as refused:
        load_flow(yaml.safe_dump(doc), source="t")
    [problem] = refused.value.problems
    assert problem.path == "$.workflow[0].set_iter" and "task's policy" in problem.message
