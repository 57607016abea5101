"""What real playbooks read of a task's outcome, as NoETL 2.13.1 names it (spec/11 §3.3,
spec/12 §6): the error envelope (`kind` as NoETL's `ErrorKind`, `category` as FLOWS's,
`code` as aos's, `status` of an http error), the http result's `status_code`, python code
that reads `context` or holds a `{{ ... }}` that is no template, `{{ execution_id }}` as a
number, a loop's stats counting a continued error as failed, and what the check accepts
(`assert`, a `max_in_flight` over the ceiling, a root `spec`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from aos.flows.define.document import load_flow
from aos.flows.serve.numbers import execution_number
from aos.kernel.audit import replay
from tests.flows_world.support import make_flow_world
from tests.playbooks.driver import run_playbook
from tests.playbooks.server import serving
from tests.playbooks.test_semantics import py, rules, run, step


def http(name: str, path: str, **fields: Any) -> dict[str, Any]:
    return {"name": name, "kind": "http", "url": "{{ workload.api }}" + path, **fields}


def keep(when: str, key: str, value: str) -> dict[str, Any]:
    """Policy rules: when `when` holds, keep `value` in `ctx.key` and go on; else fail."""
    then = {"do": "continue", "set_ctx": {key: value}}
    return rules({"when": when, "then": then}, {"else": {"then": {"do": "fail"}}})


ERROR_FIELDS = (
    "{{ [outcome.error.kind, outcome.error.category, outcome.error.code, outcome.error.status, "
    "outcome.error.status_code, outcome.error.retryable, outcome.error.source] }}"
)


def test_an_http_error_says_what_failed_in_noetls_words() -> None:
    tasks = [
        http(
            "busy",
            "/status/503",
            spec=keep("{{ outcome.error.kind == 'server_error' }}", "e503", ERROR_FIELDS),
        ),
        http(
            "limited",
            "/status/429",
            spec=keep("{{ outcome.error.kind == 'rate_limit' }}", "e429", ERROR_FIELDS),
        ),
        http(
            "denied",
            "/status/401",
            spec=keep("{{ outcome.error.kind == 'auth' }}", "e401", ERROR_FIELDS),
        ),
        http(
            "missing",
            "/status/404",
            spec=keep("{{ outcome.error.status in [404] }}", "e404", ERROR_FIELDS),
        ),
        http(
            "fine",
            "/get",
            spec=keep("{{ outcome.result.status_code == 200 }}", "ok", "{{ outcome.result.url }}"),
        ),
    ]
    with serving() as url:
        done = run(step("calls", tasks), workload={"api": url})
    assert done.status == "completed", done.history
    ctx = done.ctx
    assert ctx["e503"] == ["server_error", "transport", "http.status", 503, 503, True, "http"]
    assert ctx["e429"] == ["rate_limit", "transport", "http.status", 429, 429, True, "http"]
    assert ctx["e401"] == ["auth", "authorization", "http.status", 401, 401, False, "http"]
    assert ctx["e404"] == ["not_found", "transport", "http.status", 404, 404, False, "http"]
    assert ctx["ok"] == f"{url}/get"


def test_an_aos_flow_1_definition_keeps_its_error_kinds() -> None:
    definition = {
        "name": "tests/classic",
        "steps": [
            {
                "name": "call",
                "tasks": [
                    {
                        "name": "busy",
                        "do": "call",
                        "tool": {"kind": "http", "url": "{{ workload.api }}/status/503"},
                        "policy": {
                            "rules": [
                                {
                                    "when": "{{ outcome.error.kind == 'transport' }}",
                                    "then": {
                                        "do": "continue",
                                        "set_ctx": {"kind": "{{ outcome.error.kind }}"},
                                    },
                                }
                            ]
                        },
                    }
                ],
            }
        ],
    }
    with serving() as url:
        done = run_playbook(yaml.safe_dump(definition), workload={"api": url})
    assert done.status == "completed" and done.ctx == {"kind": "transport"}


def test_a_python_exception_is_the_codes_failure_not_a_transport() -> None:
    fields = "{{ [outcome.error.kind, outcome.error.category, outcome.error.exception_type] }}"
    raising = py("raise ValueError('bad input')", spec=keep("{{ true }}", "error", fields))
    done = run(step("s", raising))
    assert done.ctx["error"] == ["schema", "expression", "ValueError"]


def test_a_loop_counts_an_error_it_continued_past_as_failed() -> None:
    body = py(
        "if n == 2:\n    raise KeyError(n)\nresult = n",
        args={"n": "{{ item }}"},
        spec=rules({"when": "{{ outcome.status == 'error' }}", "then": {"do": "continue"}}),
    )
    done = run(
        step("each", body, loop={"in": "{{ workload.items }}", "iterator": "item"}),
        workload={"items": [1, 2, 3]},
    )
    assert done.status == "completed"
    assert done.steps["each"]["stats"] == {"total": 3, "success": 2, "failed": 1}
    continued = [e for e in done.of("loop.iteration.done") if e.get("errors_continued")]
    assert [(e["index"], e["errors_continued"]) for e in continued] == [(1, 1)]


def test_python_code_reads_the_execution_context() -> None:
    reader = py(
        "# the previous step's result, as NoETL's `context` holds it\n"
        "result = {'count': context.get('fetch', {}).get('count'), 'id': context['execution_id'],\n"
        "          'size': context['workload']['size'], 'job': context['job']['uuid']}\n"
    )
    done = run(
        step("fetch", py("result = {'count': 3}"), next={"arcs": [{"step": "read"}]}),
        step("read", reader),
        workload={"size": 7},
    )
    number = str(execution_number("e1"))
    assert done.status == "completed", done.history
    assert done.steps["read"] == {"count": 3, "id": number, "size": 7, "job": number}


def test_python_code_renders_as_a_template_or_runs_as_written() -> None:
    rendered = py("size = {{ workload.size }}\nresult = size * 2")
    # `{{ ctx.* }}` is no template (NoETL renders it, fails, and runs the code as written)
    as_written = py("# reads {{ ctx.* }} and {{ workload.size }}\nresult = 'as written'")
    done = run(
        step("a", rendered, next={"arcs": [{"step": "b"}]}),
        step("b", as_written),
        workload={"size": 7},
    )
    assert done.status == "completed", done.history
    assert (done.steps["a"], done.steps["b"]) == (14, "as written")


def test_code_that_reads_no_context_is_not_sent_one() -> None:
    done = run(step("s", py("result = 1")), step("t"))
    calls = [params for effect, params in done.calls if effect == "aos/tool.python@1"]
    assert [params.get("context") for params in calls] == [None]
    assert [params["flow_format"] for params in calls] == [2]


def test_execution_id_is_a_number_as_noetls_ids_are() -> None:
    args = {
        "id": "{{ execution_id }}",
        "number": "{{ execution.number }}",
        "aos": "{{ execution.id }}",
    }
    done = run(step("s", py("result = [id, int(id), number, aos]", args=args)))
    number = execution_number("e1")
    assert done.steps["s"] == [str(number), number, number, "e1"]
    assert 0 < number < 2**63


def test_execution_numbers_are_the_interpreters() -> None:
    from aos_flow import run as guest_run  # the interpreter's own module

    for exec_id in ("e1", "tests-1-0f1ae2a0b0b6", "p:step:12", "", "ünï", "x" * 300):
        assert guest_run.execution_number(exec_id) == execution_number(exec_id)
    assert len({execution_number(f"x{n}") for n in range(10_000)}) == 10_000


def test_a_tools_assert_contract_is_accepted_and_not_read() -> None:
    contract = {"expects": ["n"], "returns": ["double"]}
    done = run(step("s", py("result = n * 2", args={"n": 4}, **{"assert": contract})))
    assert done.status == "completed" and done.steps["s"] == 8


def test_max_in_flight_over_the_ceiling_runs_clamped_and_says_so() -> None:
    loop = {"in": [1, 2, 3], "iterator": "n", "spec": {"mode": "parallel", "max_in_flight": 500}}
    done = run(step("each", py("result = n", args={"n": "{{ n }}"}), loop=loop))
    assert done.status == "completed"
    [started] = done.of("loop.started")
    assert (started["window"], started["max_in_flight"]) == (100, 500)


def test_a_root_spec_is_accepted_and_not_read_as_noetl_does() -> None:
    doc = {
        "apiVersion": "noetl.io/v2",
        "kind": "Playbook",
        "metadata": {"name": "t", "path": "t/spec"},
        "spec": {"state": "ready"},
        "workflow": [step("start", py("result = 1"))],
    }
    text = yaml.safe_dump(doc)
    without = load_flow(yaml.safe_dump({k: v for k, v in doc.items() if k != "spec"}), source="t")
    assert load_flow(text, source="t") == without  # NoETL's model drops it unread
    done = run_playbook(text)
    assert done.status == "completed" and done.steps["start"] == 1


def test_a_tasks_fields_read_results_as_noetls_task_result_proxy() -> None:
    # NoETL's `render_template` wraps every map of the scope but its plain namespaces: `.data`
    # and `.result` of a map without that key are the map (a list's `.result` the list).
    args = {
        "native": "{{ first.data.result.n }}",
        "text": "n={{ first.data.n }}",
        "listed": "{{ listed.result | length }}",
        "plain": "{{ ctx.data }}",
    }
    done = run(
        step("first", py("result = {'n': 3}"), next={"arcs": [{"step": "listed"}]}),
        step("listed", py("result = [1, 2]"), next={"arcs": [{"step": "read"}]}),
        step("read", py("result = [native, text, listed, plain]", args=args)),
    )
    assert done.status == "completed", done.history
    assert done.steps["read"] == [3, "n=3", 2, ""]


WORLD_PLAYBOOK = """
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: vocabulary, path: tests/vocabulary}
workload: {items: [1, 2, 3]}
workflow:
  - step: fetch
    tool:
      - name: busy
        kind: http
        url: "{{ workload.api }}/status/503"
        spec:
          policy:
            rules:
              - when: "{{ outcome.error.kind == 'server_error' }}"
                then: {do: continue, set_ctx: {status: "{{ outcome.error.status }}"}}
      - name: fine
        kind: http
        url: "{{ workload.api }}/get"
    next: {arcs: [{step: each}]}
  - step: each
    loop: {in: "{{ workload.items }}", iterator: item, spec: {mode: parallel, max_in_flight: 1000}}
    tool:
      kind: python
      args: {n: "{{ item }}", code: "{{ fetch.result.status_code }}"}
      code: |
        # {{ a comment that is no template }}
        if n == 2:
            raise ValueError(n)
        result = {"n": n, "seen": context["fetch"]["status_code"], "code": code}
      spec:
        policy:
          rules:
            - when: "{{ outcome.status == 'error' }}"
              then: {do: continue}
"""


def test_a_world_running_these_rules_replays_byte_for_byte(tmp_path: Path) -> None:
    flows = make_flow_world(tmp_path / "w")
    with serving() as url, flows.world:
        state = flows.run(WORLD_PLAYBOOK, workload={"api": url}, exec_id="v1")
    assert state["status"] == "completed", state["engine"].get("error")
    assert state["business"]["ctx"] == {"status": 503}
    each = state["business"]["steps"]["each"]
    assert each["stats"] == {"total": 3, "success": 2, "failed": 1}
    assert each["results"][0] == {"n": 1, "seen": 200, "code": 200}
    assert replay.verify_replay(tmp_path / "w").ok
