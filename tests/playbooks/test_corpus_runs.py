"""The corpus playbooks that need only python, noop and http run end to end (natively, with
the real python worker and real HTTP to a local server); each asserts the final status and
the step results its comments and playbook_test_config.yaml state. The ones that use
postgres run on a flow world against the real server (tests/flows_pg/test_corpus_pg.py);
no corpus playbook uses duckdb, so one postgres playbook also runs ported to it
(test_corpus_duckdb.py). `RUN_BY` says where each corpus playbook runs, and
`test_every_corpus_playbook_runs_somewhere` keeps it complete: every playbook of the corpus
uses only python, noop, http, postgres and workbook, so all of them run but the broken one,
which `aos flow check` rejects (test_playbook_world.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.playbooks.driver import PLAYBOOKS, run_playbook
from tests.playbooks.server import Handler, serving

SEC = 1_000_000_000
TESTS = Path(__file__).resolve().parents[1]
RUN_BY = {
    "control_flow_workbook/control_flow_workbook.yaml": ["playbooks/test_corpus_runs.py"],
    "examples/http_pagination_v2.yaml": ["playbooks/test_corpus_runs.py"],
    "examples/simple_http_v2.yaml": ["playbooks/test_corpus_runs.py"],
    "examples/weather_loop_v2.yaml": ["flows_pg/test_corpus_pg.py"],
    "iterator_save_test/iterator_save_test.yaml": [
        "flows_pg/test_corpus_pg.py",
        "playbooks/test_corpus_duckdb.py",
    ],
    "retry_test/http_retry_status_code.yaml": ["playbooks/test_corpus_runs.py"],
    "retry_test/python_retry_exception.yaml": ["playbooks/test_corpus_runs.py"],
    "root_scripts/test_implicit_end_routing.yaml": ["playbooks/test_corpus_runs.py"],
    "test_args_passing.yaml": ["playbooks/test_corpus_runs.py"],
    "test_loop_instance_isolation/playbook.yaml": ["playbooks/test_corpus_runs.py"],
    "v10_canonical_example.yaml": [
        "flows_pg/test_corpus_pg.py",
        "playbooks/test_playbook_world.py",
    ],
    "v2_loop_test.yaml": ["playbooks/test_corpus_runs.py"],
    "vars_test/test_vars_simple.yaml": ["playbooks/test_corpus_runs.py"],
    # Rejected by `aos flow check`, naming what is missing: it never runs.
    "broken_playbooks/should_error_tool_is_required.yaml": ["playbooks/test_playbook_world.py"],
}
"""Each corpus playbook -> the test files (under tests/) that run it end to end."""


@pytest.fixture
def server() -> Iterator[str]:
    with serving() as url:
        yield url


def run(name: str, workload: object = None):  # type: ignore[no-untyped-def]
    return run_playbook((PLAYBOOKS / name).read_bytes(), workload, source=name)


def test_control_flow_workbook_goes_hot_and_joins_once() -> None:
    done = run("control_flow_workbook/control_flow_workbook.yaml")
    assert done.status == "completed"
    assert done.steps["eval_flag"] == {"is_hot": True, "message": "hot"}
    assert done.steps["hot_task_a"] == {"who": "A"} and done.steps["hot_task_b"] == {"who": "B"}
    assert "cold_path" not in done.steps and done.steps["end"] == {"status": "complete"}
    assert len(done.steps) >= 5  # min_steps: 5 (playbook_test_config.yaml)


def test_control_flow_workbook_goes_cold_when_the_workload_says_so() -> None:
    done = run("control_flow_workbook/control_flow_workbook.yaml", {"temperature_c": 10})
    assert done.status == "completed"
    assert done.steps["eval_flag"]["message"] == "cold" and done.steps["cold_task"] == {"who": "C"}
    assert "hot_path" not in done.steps


def test_args_passing() -> None:
    done = run("test_args_passing.yaml")
    assert done.status == "completed"
    assert done.steps["use_vars"] == {"status": "success", "result": 300}


def test_vars_simple_reads_back_what_set_ctx_wrote() -> None:
    done = run("vars_test/test_vars_simple.yaml")
    assert done.status == "completed"
    assert done.ctx == {"test_counter": 42, "set_message": "Variable set successfully"}
    assert done.steps["get_var"]["verification"] is True


def test_loop_instance_isolation() -> None:
    done = run("test_loop_instance_isolation/playbook.yaml")
    assert done.status == "completed"
    verify = done.steps["verify_results"]
    assert verify["verification"] == "Both loops completed independently"
    assert verify["users_count"] == 2 and verify["products_count"] == 2
    assert [r["name"] for r in done.steps["process_items_products"]["results"]] == [
        "Laptop",
        "Mouse",
    ]


def test_v2_loop_test_runs_code_with_a_top_level_return() -> None:
    done = run("v2_loop_test.yaml")
    assert done.status == "completed"
    assert [r["doubled"] for r in done.steps["start"]["results"]] == [2, 4, 6, 8, 10]
    assert done.steps["verify"]["status"] == "passed"
    assert done.steps["end"] == {"status": "ok", "test_passed": True}


def test_python_retry_exception_retries_until_the_code_succeeds() -> None:
    done = run("retry_test/python_retry_exception.yaml")
    assert done.status == "completed"
    failed = done.of("task.attempt.failed")
    assert 1 <= len(failed) <= 4  # `random` is seeded from each intent: reproducible
    assert all(e["error"]["code"] == "python.raised" for e in failed)
    assert done.steps["start"]["success"] is True
    delays = [b - a for a, b in zip([1000 * SEC, *done.fired], done.fired, strict=False)]
    assert delays[:2] == [200_000_000, 400_000_000][: len(delays[:2])]  # exponential, 0.2 s


def test_implicit_end_routing_is_not_implicit_in_v10() -> None:
    # The fixture's comment expects a step without `next` to route to `end`; seed 000 §5.1
    # says such a step is a leaf, and reserved names must not be required. The seed wins.
    done = run("root_scripts/test_implicit_end_routing.yaml")
    assert done.status == "completed"
    assert done.steps == {"start": {"status": "started"}, "step1": {"status": "step1_complete"}}


def test_simple_http(server: str) -> None:
    done = run("examples/simple_http_v2.yaml", {"api_url": server})
    assert done.status == "completed"
    assert done.steps["start"]["data"]["args"] == {"test": "hello"}
    assert done.steps["process"]["data"]["args"] == {"test": "hello"}
    assert done.steps["end"] == {"status": "done"}


def test_http_retry_status_code_retries_503s_with_exponential_backoff(server: str) -> None:
    done = run("retry_test/http_retry_status_code.yaml", {"test_url": f"{server}/flaky"})
    assert done.status == "completed"
    assert Handler.calls == ["/flaky"] * 3
    assert [b - a for a, b in zip([1000 * SEC, *done.fired], done.fired, strict=False)] == [
        500_000_000,
        1_000_000_000,
    ]
    assert done.steps["end"] == {"status": "complete"}


def test_http_pagination_collects_every_page_in_order(server: str) -> None:
    done = run("examples/http_pagination_v2.yaml", {"api_url": server})
    assert done.status == "completed"
    assert Handler.calls == [f"/data?page={n}&pageSize=100" for n in (1, 2, 3)]
    assert done.ctx["all_pages"] == [f"p{p}-{i}" for p in (1, 2, 3) for i in range(2)]
    assert done.steps["process_results"] == {"count": 6, "status": "processed"}


def test_every_corpus_playbook_runs_somewhere() -> None:
    corpus = sorted(str(p.relative_to(PLAYBOOKS)) for p in PLAYBOOKS.rglob("*.yaml"))
    assert corpus == sorted(RUN_BY)
    for name, files in RUN_BY.items():
        stem = Path(name).stem if Path(name).stem != "playbook" else Path(name).parent.name
        for file in files:
            assert stem in (TESTS / file).read_text(), (name, file)


def test_the_corpus_expectations_are_the_upstream_ones() -> None:
    config = yaml.safe_load(
        (PLAYBOOKS.parents[3] / "e2e" / "fixtures" / "playbook_test_config.yaml").read_text()
    )
    by_name = {p["name"]: p for p in config["playbooks"]}
    for name in ("control_flow_workbook", "test_vars_simple", "python_retry_exception"):
        assert by_name[name]["validation"]["execution_status"] == "completed"
