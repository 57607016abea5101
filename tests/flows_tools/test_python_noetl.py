"""The python tool's inline code as NoETL 2.13.1 runs it (`noetl/tools/python/executor.py`,
`execute_python_task_async`; spec/12 §6): `libs` in both of NoETL's forms, `context` the
execution's context a playbook's call carries, NoETL's answer for code that sets no `result`,
and the helpers NoETL offers every code."""

from __future__ import annotations

from typing import Any

from aos.flows.tools.context import ToolContext
from aos.flows.tools.dispatch import run_tool
from aos.flows.tools.outcomes import ToolOutcome

EFFECT = "aos/tool.python@1"


def code_call(code: str, args: Any = None, *, params: Any = None, **tool: Any) -> ToolOutcome:
    call = {"tool": {"kind": "python", "code": code, **tool}, "args": args, **(params or {})}
    return run_tool(EFFECT, call, context=ToolContext(intent="blake3:i"))


def test_libs_imports_a_name_from_a_module_as_noetl_writes_it() -> None:
    libs = {"dt": {"from": "datetime", "import": "datetime"}, "path": "os.path"}
    code = "result = [dt(2024, 1, 2).isoformat(), path.join('a', 'b')]"
    assert code_call(code, libs=libs).payload == ["2024-01-02T00:00:00", "a/b"]
    # `from` a package whose `import` is one of its submodules, not an attribute yet
    submodule = {"parser": {"from": "email", "import": "parser"}}
    assert code_call("result = parser.__name__", libs=submodule).payload == "email.parser"


def test_libs_as_a_list_of_packages_is_accepted_and_imports_nothing() -> None:
    # NoETL's worker ignores a list (`'libs' must be a dict`); the code imports what it uses.
    code = "import json as j\nresult = j.dumps([1])"
    assert code_call(code, libs=["psycopg2-binary"]).payload == "[1]"


def test_bad_libs_are_a_tool_error_saying_what_libs_holds() -> None:
    for libs in ({"x": {"from": "os"}}, {"x": 7}, {"not a name": "os"}, ["ok", 3], "os"):
        outcome = code_call("result = 1", libs=libs)
        assert outcome.status == "error" and outcome.payload["code"] == "tool.invalid", libs
        assert "libs" in outcome.payload["message"]


def test_context_is_the_calls_execution_context_else_the_args() -> None:
    context = {"fetch": {"count": 3}, "workload": {"n": 1}, "execution_id": "42"}
    code = "result = [context.get('fetch'), context['execution_id'], input_data]"
    given = code_call(code, {"a": 1}, params={"flow_format": 2, "context": context})
    assert given.payload == [{"count": 3}, "42", {"a": 1}]
    # no context in the call (an aos.flow/1 definition's): `context` is the args map
    assert code_call("result = context", {"a": 1}).payload == {"a": 1}
    # an args key of that name wins over both
    both = code_call("result = context", {"context": 9}, params={"context": context})
    assert both.payload == 9


def test_main_with_a_context_parameter_gets_the_execution_context() -> None:
    code = "def main(context, n=0):\n    return {'step': context['s'], 'n': n}"
    outcome = code_call(code, {"n": 2}, params={"flow_format": 2, "context": {"s": "x"}})
    assert outcome.payload == {"step": "x", "n": 2}


def test_code_without_result_answers_as_noetl_in_a_playbook_and_null_otherwise() -> None:
    code = "import math\ntotal = math.floor(2.5)\nprint(total)"
    answer = code_call(code, {"a": 1}, params={"flow_format": 2}).payload
    assert answer == {
        "status": "success",
        "message": "Code executed without explicit result variable",
        "locals_count": 2,
        "locals_keys": ["math", "total"],
    }
    assert code_call(code, {"a": 1}).payload is None  # aos.flow/1: the output is null
    assert code_call("result = None", params={"flow_format": 2}).payload is None


def test_noetl_helpers_are_offered_without_an_import() -> None:
    code = """
merged = deep_merge({'a': {'b': 1}, 'l': [1]}, {'a': {'c': 2}, 'l': [2]})
named = deep_merge([{'name': 'x', 'v': 1}], [{'name': 'x', 'w': 2}, {'name': 'y'}])
moment = datetime.datetime(2024, 5, 1, 12, 0, tzinfo=datetime.timezone.utc)
result = {
    'got': get_val({'a': [{'b': 'c'}]}, ['a', 0, 'b']),
    'missing': get_val({'a': []}, ['a', 3], 'none'),
    'merged': merged,
    'named': named,
    'iso': format_iso8601(moment),
    'plain': make_serializable({'when': moment, 'n': [1]}),
    'now_is_utc': now_utc().tzinfo is not None,
}
"""
    assert code_call(code).payload == {
        "got": "c",
        "missing": "none",
        "merged": {"a": {"b": 1, "c": 2}, "l": [1, 2]},
        "named": [{"name": "x", "v": 1, "w": 2}, {"name": "y"}],
        "iso": "2024-05-01T12:00:00+00:00",
        "plain": {"when": "2024-05-01T12:00:00+00:00", "n": [1]},
        "now_is_utc": True,
    }
    assert code_call("result = get_val", {"get_val": 1}).payload == 1  # an args key wins


def test_a_bad_flow_format_is_refused() -> None:
    outcome = code_call("result = 1", params={"flow_format": 0})
    assert outcome.status == "error" and outcome.payload["code"] == "tool.invalid"


def test_a_playbooks_result_keys_become_text_as_json_makes_them() -> None:
    """NoETL's worker sends a result as JSON (`json.dumps`), so numbers, booleans and None as
    map keys arrive as text; an `aos.flow/1` result must be data as written."""
    code = "result = {'counts': {1: 'one', 2.5: 'half', None: 'none', 'x': True}}"
    answer = code_call(code, params={"flow_format": 2})
    assert answer.payload == {"counts": {"1": "one", "2.5": "half", "null": "none", "x": True}}
    clash = code_call("result = {1: 'a', '1': 'b'}", params={"flow_format": 2})
    assert (clash.status, clash.payload["code"]) == ("error", "python.result_invalid")
    assert "one text" in clash.payload["message"]
    strict = code_call(code)
    assert (strict.status, strict.payload["code"]) == ("error", "python.result_invalid")
    assert "not text" in strict.payload["message"]
