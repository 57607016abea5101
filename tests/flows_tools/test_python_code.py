"""The python tool's inline `code` form: args as variables, `result` as the output, run in a
worker subprocess reused between calls, with a timeout, bounded output, and typed errors
(the outcome envelope's `py: {exception}`)."""

from __future__ import annotations

from typing import Any, cast

import pytest

from aos.flows.tools import pyworker
from aos.flows.tools.context import ToolContext
from aos.flows.tools.dispatch import run_tool
from aos.flows.tools.outcomes import ToolOutcome

EFFECT = "aos/tool.python@1"


def code_call(code: str, args: Any = None, intent: str = "blake3:i", **tool: Any) -> ToolOutcome:
    params = {"tool": {"kind": "python", "code": code, **tool}, "args": args}
    return run_tool(EFFECT, params, context=ToolContext(intent=intent))


def error(outcome: ToolOutcome, status: str = "error") -> dict[str, Any]:
    assert outcome.status == status, outcome
    return cast(dict[str, Any], outcome.payload)


def test_args_are_variables_and_result_is_the_output() -> None:
    outcome = code_call("result = {'sum': a + b, 'same': input_data == context}", {"a": 2, "b": 3})
    assert outcome == ToolOutcome("ok", {"sum": 5, "same": True})


def test_no_result_is_null_and_prints_do_not_reach_the_protocol() -> None:
    assert code_call("print('hello' * 1000)\nimport os\nos.write(1, b'x\\n')").payload is None


def test_a_top_level_return_runs_the_code_as_a_function_body() -> None:
    code = "n = input_data.get('n')\nif n > 1:\n    return {'big': n}\nresult = {'small': n}"
    assert code_call(code, {"n": 5}).payload == {"big": 5}
    assert code_call(code, {"n": 1}).payload == {"small": 1}


def test_libs_are_imported_under_their_alias() -> None:
    assert code_call("result = m.sqrt(n)", {"n": 9}, libs={"m": "math"}).payload == 3.0


def test_the_worker_is_reused_between_calls() -> None:
    pool = pyworker.pool_for(pyworker.PoolOptions())
    before = pool.started
    pids = {code_call("import os\nresult = os.getpid()").payload for _ in range(5)}
    assert len(pids) == 1 and pool.started - before <= 1


def test_random_is_seeded_from_the_intent() -> None:
    draw = "import random\nresult = random.random()"
    assert code_call(draw, intent="blake3:a").payload == code_call(draw, intent="blake3:a").payload
    assert code_call(draw, intent="blake3:a").payload != code_call(draw, intent="blake3:b").payload


def test_an_exception_is_an_error_with_its_type() -> None:
    payload = error(code_call("raise KeyError('nope')"))
    assert (payload["code"], payload["kind"], payload["py"]) == (
        "python.raised",
        "expression",  # the code the definition holds failed, not a transport (issue 32)
        {"exception": "KeyError"},
    )
    assert "nope" in payload["message"]
    assert error(code_call("import sys\nsys.exit(3)"))["py"] == {"exception": "SystemExit"}
    assert error(code_call("def broken(:"))["py"] == {"exception": "SyntaxError"}


def test_a_result_that_is_not_data_is_refused() -> None:
    assert error(code_call("result = {1, 2}"))["code"] == "python.result_invalid"
    assert error(code_call("result = {1: 'a'}"))["code"] == "python.result_invalid"
    assert error(code_call("result = float('nan')"))["code"] == "python.result_invalid"


def test_a_timeout_kills_the_worker_and_the_next_call_gets_a_new_one() -> None:
    pid = code_call("import os\nresult = os.getpid()").payload
    payload = error(code_call("while True:\n    pass", timeout_ms=300), status="timeout")
    assert payload["code"] == "python.timeout" and payload["retryable"] is True
    assert code_call("import os\nresult = os.getpid()").payload != pid


def test_a_crashed_worker_is_replaced() -> None:
    assert error(code_call("import os\nos._exit(3)"))["code"] == "python.crashed"
    assert code_call("result = 1").payload == 1


def test_output_over_the_limit_is_refused_at_the_edge() -> None:
    pool = pyworker.WorkerPool(pyworker.PoolOptions(output_bytes_max=100))
    try:
        assert pool.run({"code": "result = 'x' * 80", "args": {}}, 10) == {"ok": "x" * 80}
        with pytest.raises(pyworker.WorkerError) as caught:
            pool.run({"code": "result = 'x' * 100", "args": {}}, 10)
        assert caught.value.code == "python.output_too_large"
        assert pool.run({"code": "result = 2", "args": {}}, 10) == {"ok": 2}
    finally:
        pool.close()


def test_a_worker_retires_after_its_calls() -> None:
    pool = pyworker.WorkerPool(pyworker.PoolOptions(worker_calls_max=2))
    try:
        pids = [pool.run({"code": "import os\nresult = os.getpid()"}, 10)["ok"] for _ in range(4)]
        assert pids[0] == pids[1] != pids[2] == pids[3] and pool.started == 2
    finally:
        pool.close()


@pytest.mark.parametrize(
    "tool",
    [
        {"code": "result = 1", "function": "m:f"},
        {},
        {"code": 7},
        {"code": "result = 1", "libs": {"not an identifier": "math"}},
        {"code": "result = 1", "libs": [7]},
        {"code": "result = 1", "libs": {"d": {"from": "datetime"}}},
        {"code": "result = 1", "timeout_ms": 0},
    ],
)
def test_malformed_code_calls_are_invalid(tool: dict[str, Any]) -> None:
    params = {"tool": {"kind": "python", **tool}, "args": {}}
    payload = error(run_tool(EFFECT, params, context=ToolContext(intent="blake3:i")))
    assert payload["code"] == "tool.invalid"


def test_an_adapter_may_refuse_inline_code() -> None:
    params = {"tool": {"kind": "python", "code": "result = 1"}, "args": {}}
    context = ToolContext(intent="blake3:i", python_code=False)
    payload = error(run_tool(EFFECT, params, context=context))
    assert (payload["code"], payload["kind"]) == ("python.code_refused", "authorization")
