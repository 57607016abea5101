"""How a python tool's `args` reach inline code (spec/12 §6): every key as given (a key named
`input_data` or `context` too), `input_data` and `context` the whole map only when the author
did not pass them, `def main(...)` called as NoETL 2.13.1 calls it; the keys no code could
receive as given are refused at check time, at the key's path."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from aos.flows.define.document import load_flow
from aos.flows.errors import FlowCheckError
from tests.flows_tools.test_python_code import code_call, error
from tests.playbooks.driver import run_playbook


def test_a_key_named_input_data_or_context_reaches_the_code_as_given() -> None:
    args = {"input_data": {"x": 1}, "context": "mine", "n": 2}
    code = "result = {'input_data': input_data, 'context': context, 'n': n}"
    assert code_call(code, args).payload == args


def test_without_those_keys_input_data_and_context_are_the_whole_map() -> None:
    code = "result = [input_data, context]"
    assert code_call(code, {"a": 1}).payload == [{"a": 1}, {"a": 1}]
    mine = {"input_data": [1, 2]}
    assert code_call(code, mine).payload == [[1, 2], mine]


def test_a_function_body_gets_the_keys_as_given_too() -> None:
    code = "return {'input_data': input_data, 'n': n}"
    assert code_call(code, {"input_data": 7, "n": 1}).payload == {"input_data": 7, "n": 1}


def test_keys_that_are_not_names_reach_the_code_through_input_data_and_globals() -> None:
    code = "result = [input_data['my-key'], globals()['my-key'], globals()['class']]"
    assert code_call(code, {"my-key": 1, "class": 2}).payload == [1, 1, 2]


def test_an_arg_named_like_a_module_the_scope_offers_wins() -> None:
    assert code_call("result = json", {"json": "mine"}).payload == "mine"
    assert code_call("result = json.dumps([1])").payload == "[1]"


@pytest.mark.parametrize(
    ("code", "args", "expected"),
    [
        ("def main(input_data):\n    return input_data", {"a": 1}, {"a": 1}),
        ("def main(input_data):\n    return input_data", {"input_data": 3}, 3),
        ("def main(**kwargs):\n    return kwargs", {"a": 1, "my-key": 2}, {"a": 1, "my-key": 2}),
        ("def main(a, b=5):\n    return [a, b]", {"a": 1}, [1, 5]),
        ("def main(a, **rest):\n    return [a, rest]", {"a": 1, "b": 2}, [1, {"b": 2}]),
        ("def main(context):\n    return context", {"a": 1}, {"a": 1}),
        ("async def main(a):\n    return a * 2", {"a": 4}, 8),
        ("result = 1\ndef main():\n    return 2", {}, 2),
    ],
)
def test_a_main_function_is_called_with_its_parameters_from_args(
    code: str, args: dict[str, Any], expected: Any
) -> None:
    assert code_call(code, args).payload == expected


@pytest.mark.parametrize(
    ("code", "words"),
    [
        ("def main(a):\n    return a", "`a`"),
        ("def main(*items):\n    return items", "*items"),
        ("def main(a, /):\n    return a", "positional-only"),
    ],
)
def test_a_main_that_cannot_be_called_from_args_is_an_error_saying_why(
    code: str, words: str
) -> None:
    payload = error(code_call(code, {"b": 1}))
    assert payload["code"] == "python.raised" and words in payload["message"]


@pytest.mark.parametrize(
    ("args", "libs", "key"),
    [
        ({"__builtins__": 1}, None, "__builtins__"),
        ({"np": 1}, {"np": "math"}, "np"),
    ],
)
def test_keys_no_code_could_receive_are_refused_at_run_time(
    args: dict[str, Any], libs: Any, key: str
) -> None:
    payload = error(code_call("result = 1", args, **({"libs": libs} if libs else {})))
    assert payload["code"] == "tool.invalid" and key in payload["message"]


def _playbook(args: dict[str, Any], **tool: Any) -> str:
    task = {"kind": "python", "code": "result = input_data", "args": args, **tool}
    return yaml.safe_dump(
        {
            "apiVersion": "noetl.io/v2",
            "kind": "Playbook",
            "metadata": {"name": "t", "path": "t/args"},
            "workflow": [{"step": "start", "tool": task}],
        },
        sort_keys=False,
    )


@pytest.mark.parametrize(
    ("args", "libs", "path"),
    [
        ({"__builtins__": 1}, None, "$.workflow[0].tool[0].args.__builtins__"),
        ({"np": 1, "ok": 2}, {"np": "math"}, "$.workflow[0].tool[0].args.np"),
    ],
)
def test_the_check_refuses_those_keys_at_their_path(
    args: dict[str, Any], libs: Any, path: str
) -> None:
    text = _playbook(args, **({"libs": libs} if libs else {}))
    with pytest.raises(FlowCheckError) as raised:
        load_flow(text, source="t.yaml")
    [problem] = raised.value.problems
    assert (problem.code, problem.path) == ("flow.tool_args_invalid", path)


def test_a_playbook_passing_input_data_gets_it_back() -> None:
    done = run_playbook(_playbook({"input_data": {"rows": [1, 2]}, "limit": 3}))
    assert done.status == "completed"
    assert done.steps["start"] == {"rows": [1, 2]}
