"""The differential corpus: every playbook run on NoETL 2.13.1 and on aos (`make
conformance-noetl`), with what each needs from the machine.

* **corpus**: every playbook of `../shared/corpora/noetl` (upstream NoETL fixtures nobody here
  wrote); they need only python, noop, workbook, http and postgres. Their http URLs come from
  their workload, so the local server stands in for the internet without changing a file.
* **seed**: the playbook examples of seeds 000 and 003 that run on their own, each inside the
  smallest playbook around it (`playbooks/seed_*.yaml`).
* **behaviour N**: one playbook per numbered behaviour of issue 30 that a playbook shows (the
  ninth is the flow language: no playbook), `playbooks/behaviour_*.yaml`.
* **FLOWS.md §3**: one playbook per rule of the playbook section, `playbooks/rule_*.yaml`.

In a workload, `{server}` is the local HTTP server's base URL (`tests/playbooks/server.py`, a
new one on port 0 for each side's run). A case's workload is written into a copy of the
playbook, the same for both sides (`run._document_file` says why); `workload_at_run` sends it
with the run request instead. `auth:` names in `CREDENTIALS` reach one PostgreSQL
database on both sides (a credential in NoETL's store, a keychain secret in aos's tool
config); its `public` schema is emptied and `setup` run in it before each side's run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
OWN = HERE / "playbooks"
CORPUS = HERE.parents[2] / "shared" / "corpora" / "noetl" / "noetl" / "tests" / "fixtures"
FIXTURES = CORPUS / "playbooks"
CREDENTIALS = ("pg_local", "pg_test", "pg_k8s")
"""Keychain / credential names the corpus and our playbooks give `auth:`."""


@dataclass(frozen=True)
class Case:
    """One playbook of the differential run."""

    name: str
    file: Path
    origin: str
    workload: dict[str, Any] = field(default_factory=dict)
    setup: str = ""  # SQL run in the playbook database before each side
    children: tuple[Path, ...] = ()  # playbooks deployed first (`kind: playbook` targets)
    noetl_attempts: int = 1  # runs of the NoETL side until it ends `completed`
    attempts_reason: str = ""
    volatile: dict[str, str] = field(default_factory=dict)  # `steps.S.KEY` -> why it varies
    workload_at_run: bool = False  # send the workload with the run, not in the document

    def bound_workload(self, server: str) -> dict[str, Any]:
        """The workload with `{server}` read as the local server's URL."""
        return _bind(self.workload, server)


def _bind(value: Any, server: str) -> Any:
    if isinstance(value, str):
        return value.replace("{server}", server)
    if isinstance(value, list):
        return [_bind(v, server) for v in value]
    if isinstance(value, dict):
        return {k: _bind(v, server) for k, v in value.items()}
    return value


def corpus(name: str, path: str, **options: Any) -> Case:
    return Case(name, FIXTURES / path, "corpus", **options)


def own(name: str, origin: str, **options: Any) -> Case:
    return Case(name, OWN / f"{name}.yaml", origin, **options)


WEATHER_TABLE = (
    "CREATE TABLE weather_monitoring_summary (execution_id text, total_cities int,"
    " alerts_triggered int, summary_data jsonb, created_at timestamptz)"
)

CASES: tuple[Case, ...] = (
    corpus("control_flow_workbook", "control_flow_workbook/control_flow_workbook.yaml"),
    corpus(
        "control_flow_workbook (cold)",
        "control_flow_workbook/control_flow_workbook.yaml",
        workload={"temperature_c": 10},
        workload_at_run=True,
    ),
    corpus(
        "http_pagination_v2",
        "examples/http_pagination_v2.yaml",
        workload={"api_url": "{server}"},
    ),
    corpus("simple_http_v2", "examples/simple_http_v2.yaml", workload={"api_url": "{server}"}),
    corpus(
        "weather_loop_v2",
        "examples/weather_loop_v2.yaml",
        workload={"weather_api_url": "{server}/v1/forecast"},
        setup=WEATHER_TABLE,
    ),
    corpus("iterator_save_test", "iterator_save_test/iterator_save_test.yaml"),
    corpus(
        "python_retry_exception",
        "retry_test/python_retry_exception.yaml",
        noetl_attempts=3,
        attempts_reason=(
            "its code fails 70% of its draws on purpose and NoETL's draws are not seeded: five "
            "attempts all fail one run in six"
        ),
        volatile={
            "steps.start.message": "the value drawn: NoETL's `random` is not seeded, aos's is "
            "seeded from the intent (spec/12 §6)"
        },
    ),
    corpus(
        "http_retry_status_code",
        "retry_test/http_retry_status_code.yaml",
        workload={"test_url": "{server}/flaky"},
    ),
    corpus("test_implicit_end_routing", "root_scripts/test_implicit_end_routing.yaml"),
    corpus("test_args_passing", "test_args_passing.yaml"),
    corpus("test_loop_instance_isolation", "test_loop_instance_isolation/playbook.yaml"),
    corpus(
        "v10_canonical_example",
        "v10_canonical_example.yaml",
        workload={"api_url": "{server}"},
        setup="CREATE TABLE results (item_id int PRIMARY KEY, data jsonb)",
    ),
    corpus("v2_loop_test", "v2_loop_test.yaml"),
    corpus("test_vars_simple", "vars_test/test_vars_simple.yaml"),
    corpus(
        "should_error_tool_is_required",
        "broken_playbooks/should_error_tool_is_required.yaml",
    ),
    own("seed_000_entry_step", "seed 000 §2.2"),
    own("seed_000_admission", "seed 000 §3"),
    Case(
        "seed_000_admission (denied)",
        OWN / "seed_000_admission.yaml",
        "seed 000 §3.2",
        workload={"ready": False},
    ),
    own("seed_000_router_exclusive", "seed 000 §4"),
    own("seed_000_router_inclusive", "seed 000 §4.3"),
    own("seed_000_no_match", "seed 000 §5.2"),
    own("seed_000_no_next_is_error", "seed 000 §5.2"),
    own("seed_000_final_step", "seed 000 §7"),
    own("seed_003_task_shapes", "seed 003 §7"),
    own(
        "seed_003_pagination",
        "seed 003 §12",
        workload={"api_url": "{server}"},
        setup=(
            "CREATE TABLE results_ok (endpoint text, page int);"
            " CREATE TABLE results_not_found (endpoint text)"
        ),
    ),
    own("behaviour_1_step_set_ctx", "behaviour 1"),
    own("behaviour_2_python_arg_names", "behaviour 2"),
    own("behaviour_3_task_result_by_name", "behaviour 3"),
    own("behaviour_4_large_loop_results", "behaviour 4"),
    own("behaviour_5_kernel_refusal", "behaviour 5"),
    own("behaviour_6_postgres_credential", "behaviour 6"),
    own("behaviour_7_template_contexts", "behaviour 7"),
    own("behaviour_7_items_key", "behaviour 7"),
    own("behaviour_8_names", "behaviour 8"),
    own(
        "behaviour_8_playbook_path",
        "behaviour 8",
        children=(OWN / "behaviour_8_child.yaml",),
    ),
    own("rule_implicit_join", "FLOWS.md §3 implicit join", workload={"api_url": "{server}"}),
    own("rule_final_status_failed", "FLOWS.md §3 final status"),
    own("rule_final_status_partial", "FLOWS.md §3 final status"),
    own("rule_undefined_in_arcs", "FLOWS.md §3 undefined names"),
    own("rule_event_names", "FLOWS.md §3 boundary events"),
    own("rule_policy_retry", "FLOWS.md §3 policies", workload={"api_url": "{server}"}),
    own("rule_policy_jump_break", "FLOWS.md §3 policies", workload={"api_url": "{server}"}),
    own("rule_policy_continue", "FLOWS.md §3 policies"),
    own("rule_policy_fail", "FLOWS.md §3 policies"),
    own("rule_policy_outcome", "FLOWS.md §3 policies", workload={"api_url": "{server}"}),
    own("rule_loop_sequential", "FLOWS.md §3 loops", workload={"api_url": "{server}"}),
    own("rule_loop_parallel", "FLOWS.md §3 loops", workload={"api_url": "{server}"}),
    own("rule_reference_first", "FLOWS.md §3 reference-first"),
    own("rule_workbook", "FLOWS.md §3 workbook"),
    own("rule_keychain", "FLOWS.md §3 keychain"),
    own("rule_tool_kinds", "FLOWS.md §3 tool kinds", workload={"api_url": "{server}"}),
)


QUICK = (
    "control_flow_workbook",
    "iterator_save_test",
    "http_retry_status_code",
    "test_implicit_end_routing",
    "seed_000_entry_step",
    "seed_000_admission (denied)",
    "seed_000_router_exclusive",
    "seed_000_no_next_is_error",
    "seed_003_task_shapes",
    "rule_undefined_in_arcs",
    "rule_event_names",
    "rule_workbook",
)
"""A slice for a CI budget (`--quick`, ~3 min once NoETL is built): playbooks whose NoETL run
ends (no quiet window to wait out), agreeing or with a stable expected difference, across the
corpus, the seeds and the rules."""


def by_name() -> dict[str, Case]:
    return {case.name: case for case in CASES}
