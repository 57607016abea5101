"""Every example of seeds 000 and 003, each a test: the snippet (as the seed writes it) inside
a minimal playbook, compiled, and run where it does something on its own. Seed 003 §12 runs
in test_pagination.py; the rules the snippets illustrate have their own tests in
test_semantics.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from tests.playbooks.driver import definition, run_playbook
from tests.playbooks.server import Handler, serving

HEAD = """
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: seed, path: seeds/example}
"""


def compiled(body: str) -> dict[str, Any]:
    return definition(HEAD + body)


ENTRY = """
executor:
  spec:
    entry_step: "second"
workflow:
  - step: first
    tool: {kind: noop}
  - step: second
    tool: {kind: noop}
"""


def test_000_2_2_entry_step_override() -> None:
    assert compiled(ENTRY)["entry"] == "second"
    assert [e["step"] for e in run_playbook(HEAD + ENTRY).of("step.started")] == ["second"]


ADMIT = """
workload: {ready: %s}
workflow:
  - step: gated
    spec:
      policy:
        admit:
          mode: exclusive # exclusive | inclusive (default exclusive)
          rules:
            - when: "{{ workload.ready }}"
              then: { allow: true }
            - else:
                then: { allow: false }
    tool: {kind: noop}
"""


def test_000_3_1_and_003_5_2_1_admission_rules() -> None:
    assert compiled(ADMIT % "true")["steps"][0]["admit"] == {"template": "{{ workload.ready }}"}
    assert "gated" in run_playbook(HEAD + ADMIT % "true").steps
    assert "gated" not in run_playbook(HEAD + ADMIT % "false").steps


ROUTER = """
workflow:
  - step: start
    tool: {kind: noop}
    next:
      spec:
        mode: %s
        policy: {} # placeholders: priority/dedupe/partitioning
      arcs:
        - step: next_step_name
          when: "{{ workload.go }}" # optional (default true)
          args: { n: 1 }
        - step: other
  - {step: next_step_name, tool: {kind: noop, args: {got: "{{ args.n }}"}}}
  - {step: other, tool: {kind: noop}}
"""


def test_000_4_1_and_003_5_5_the_router() -> None:
    exclusive = run_playbook(HEAD + ROUTER % "exclusive", {"go": True})
    assert exclusive.steps == {"start": None, "next_step_name": {"got": 1}}
    inclusive = run_playbook(HEAD + ROUTER % "inclusive", {"go": True})
    assert set(inclusive.steps) == {"start", "next_step_name", "other"}
    assert set(run_playbook(HEAD + ROUTER % "exclusive", {"go": False}).steps) == {"start", "other"}


def test_000_5_no_arcs_and_no_match() -> None:
    leaf = run_playbook(HEAD + "workflow:\n  - {step: leaf, tool: {kind: noop}}\n")
    assert leaf.status == "completed"
    strict = HEAD + (
        "executor: {spec: {no_next_is_error: true}}\n"
        "workflow:\n"
        "  - {step: a, tool: {kind: noop}, next: {arcs: [{step: b, when: '{{ false }}'}]}}\n"
        "  - {step: b, tool: {kind: noop}}\n"
    )
    assert run_playbook(strict).status == "failed"


def test_000_7_final_step() -> None:
    text = HEAD + (
        "executor: {spec: {final_step: wrap_up}}\n"
        "workflow:\n"
        "  - {step: work, tool: {kind: noop}}\n"
        "  - {step: wrap_up, tool: {kind: noop, args: {summary: '{{ args }}'}}}\n"
    )
    done = run_playbook(text)
    summary = done.steps["wrap_up"]["summary"]
    assert done.status == "completed" and summary["execution"]["id"] == "e1"
    assert summary["steps"]["done"] == 1 and summary["failures"] == []


def test_003_2_1_keychain() -> None:
    value = compiled(
        """
keychain:
  - name: openai_token
    kind: secret_manager
  - name: pg_k8s
    kind: postgres_credential
workflow:
  - {step: a, tool: {kind: noop}}
"""
    )
    assert value["keychain"] == [
        {"name": "openai_token", "kind": "secret_manager"},
        {"name": "pg_k8s", "kind": "postgres_credential"},
    ]


def test_003_5_4_task_policy_shape_with_its_placeholders() -> None:
    value = compiled(
        """
workflow:
  - step: a
    tool:
      kind: noop
      spec:
        policy:
          mode: exclusive # placeholder (future)
          on_unmatched: continue # placeholder (future), default continue
          before: []
          after: []
          finally: []
          rules:
            - when: "{{ outcome.status == 'error' }}"
              then:
                do: retry
                attempts: 5
                backoff: exponential
                delay: 1.0
            - else:
                then:
                  do: continue
                  set_iter: { a: 1 }
                  set_ctx: { b: 2 }
"""
    )
    rules = value["steps"][0]["tasks"][0]["policy"]["rules"]
    assert rules[0]["then"] == {**rules[0]["then"], "do": "retry", "attempts": 5, "delay_ms": 1000}
    assert rules[1]["when"] is None and rules[1]["then"]["set_ctx"] == {"b": 2}


CANONICAL_TASKS = """
workload: {api_url: "%s/get"}
workflow:
  - step: fetch
    tool:
    - name: init_iter
      kind: noop
      spec:
        policy:
          rules:
          - else:
              then: { do: continue, set_iter: { page: 1 } }

    - name: fetch_page
      kind: http
      method: GET
      url: "{{ workload.api_url }}"
      spec:
        policy:
          rules:
          - when: "{{ outcome.status == 'error' }}"
            then: { do: retry, attempts: 5 }
          - else:
              then: { do: continue }
"""


def test_003_7_1_the_canonical_task_list() -> None:
    with serving() as url:
        done = run_playbook(HEAD + CANONICAL_TASKS % url)
    assert done.status == "completed" and Handler.calls == ["/get"]
    assert done.steps["fetch"]["results"]["fetch_page"]["status"] == 200


def test_003_7_2_and_7_3_unnamed_and_single_tasks() -> None:
    value = compiled(
        """
workload: {api_url: "http://127.0.0.1:1"}
workflow:
  - step: many
    tool:
    - kind: http
      url: "..."
    - kind: python
      code: "..."
  - step: single
    tool:
      kind: http
      method: GET
      url: "{{ api_url }}"
"""
    )
    assert [t["name"] for t in value["steps"][0]["tasks"]] == ["task_0", "task_1"]
    assert [t["name"] for t in value["steps"][1]["tasks"]] == ["single_task"]
    assert value["steps"][1]["tasks"][0]["tool"] == {
        "kind": "http",
        "method": "GET",
        "url": "{{ api_url }}",
    }


def test_003_12_compiles_as_the_seed_writes_it() -> None:
    doc = yaml.safe_load(Path(__file__).with_name("pagination.yaml").read_text())
    step = doc["workflow"][0]
    store = {"kind": "postgres", "auth": "pg_k8s", "command": "INSERT INTO results_ok (...)"}
    step["tool"][3] = {**step["tool"][3], **store}
    for key in ("args", "code"):
        del step["tool"][3][key]
    value = definition(yaml.safe_dump(doc))
    task = value["steps"][0]["tasks"][3]
    assert task["tool"] == store and task["do"] == "call"
    assert value["steps"][0]["loop"]["exec"] == "distributed"
    assert value["steps"][0]["loop"]["max_in_flight"] == 10
