"""A finished task's result is in scope under the task's name inside its step (seed 003 §7.5:
task names serve "result access in templates ({{ task_name.data }})"), besides `_prev` and
`results`. Task names sit above workload keys, step results and the token's args at the top
level, and below the named namespaces (spec/12 §6)."""

from __future__ import annotations

from tests.playbooks.driver import run_playbook
from tests.playbooks.server import serving
from tests.playbooks.test_semantics import arcs, py, run, step


def test_a_task_reads_an_earlier_task_by_its_name() -> None:
    with serving() as url:
        doc = f"""
apiVersion: noetl.io/v2
kind: Playbook
metadata: {{name: names, path: tests/task-names}}
workload: {{api_url: "{url}"}}
workflow:
  - step: get
    tool:
      - name: fetch
        kind: http
        method: GET
        url: "{{{{ api_url }}}}/get"
        params: {{q: hello}}
      - name: use
        kind: python
        args: {{q: "{{{{ fetch.data.args.q }}}}", status: "{{{{ fetch.http.status }}}}"}}
        code: "result = {{'q': q, 'status': status}}"
"""
        done = run_playbook(doc)
    assert done.status == "completed"
    assert done.steps["get"]["results"]["use"] == {"q": "hello", "status": 200}


def test_task_names_win_over_workload_steps_and_args_not_over_namespaces() -> None:
    done = run(
        step("x", py("result = 'step x'"), next=arcs({"step": "b", "args": {"y": "arg y"}})),
        step(
            "b",
            [
                py("result = 'task x'", name="x"),
                py("result = 'task y'", name="y"),
                py("result = 'task w'", name="w"),
                py("result = 'task ctx'", name="ctx"),
                py(
                    "result = [x, y, w, steps_x, ctx, wl]",
                    name="read",
                    args={
                        "x": "{{ x }}",
                        "y": "{{ y }}",
                        "w": "{{ w }}",
                        "steps_x": "{{ steps.x }}",
                        "ctx": "{{ ctx }}",
                        "wl": "{{ workload.w }}",
                    },
                ),
            ],
        ),
        workload={"w": "workload w"},
    )
    assert done.status == "completed"
    read = done.steps["b"]["results"]["read"]
    assert read == ["task x", "task y", "task w", "step x", {}, "workload w"]


def test_a_task_name_is_only_in_scope_inside_its_own_step() -> None:
    done = run(
        step("a", py("result = 1", name="fetch"), next=arcs("b")),
        step("b", py("result = fetch", args={"fetch": "{{ fetch | default('absent') }}"})),
    )
    assert done.steps["b"] == "absent"
