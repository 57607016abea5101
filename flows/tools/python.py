"""The python tool (`aos/tool.python@1`, spec/11 §1.2, spec/12 §6).

{function: "package.module:function", timeout_ms} -> function(args), in a subprocess, for
    modules the adapter's allowlist admits (the built-in python adapter's runner);
{code, libs, timeout_ms} -> the code's `result` (or what its `main` returns), `args` as
    variables, in a worker subprocess reused between calls (flows/tools/pyworker.py).
"""

from __future__ import annotations

from typing import Any

from aos.flows.define.tool_schema import TOOL_SCHEMAS, python_args_problems, python_libs_problem
from aos.flows.tools import pyworker
from aos.flows.tools.context import (
    ERROR_TEXT_CHARS_MAX,
    ToolCallInvalidError,
    ToolContext,
    timeout_s_of,
)
from aos.flows.tools.outcomes import ToolOutcome, failure, timed_out
from aos.flows.tools.outcomes import check_fields as _check_fields
from aos.flows.tools.outcomes import clip as _clip
from aos.kernel import cbor
from aos.kernel.adapters.builtin.python_fn import (
    PYTHON_LIMIT_CODES,
    PYTHON_TIMEOUT_S_DEFAULT,
    PythonFunctionEffect,
    PythonOptions,
)
from aos.kernel.adapters.sdk import Lease
from aos.kernel.node.models import TRACEBACK_CHARS_MAX

PYTHON_FIELDS = TOOL_SCHEMAS["python"].accepted
PYTHON_EFFECT = "aos/tool.python@1"


def run_python(tool: dict[str, Any], args: Any, context: ToolContext) -> ToolOutcome:
    _check_fields(tool, PYTHON_FIELDS)
    if (tool.get("code") is None) == (tool.get("function") is None):
        raise ToolCallInvalidError("a python tool has `code` (inline) or `function`, one of them")
    timeout_s = timeout_s_of(tool, PYTHON_TIMEOUT_S_DEFAULT, context.python_timeout_s_max)
    if tool.get("code") is not None:
        if not context.python_code:
            message = "this adapter does not run inline code (aos adapter run --no-code)"
            return failure("python.code_refused", message, kind="authorization")
        return _run_code(tool, args, timeout_s, context)
    ref = tool.get("function")
    module = _function_module(ref)
    if not context.python_allows(module):
        allowed = ", ".join(context.python_allow) or "none"
        return failure(
            "python.not_allowed",
            f"module {module} is not allowed to this adapter (allowed prefixes: {allowed})",
            kind="authorization",
        )
    return _run_function(str(ref), args, timeout_s, context)


def _run_code(
    tool: dict[str, Any], args: Any, timeout_s: float, context: ToolContext
) -> ToolOutcome:
    """Inline `code` in a reused worker (flows/tools/pyworker.py): `args` as variables, `result` as
    the output."""
    code, libs = tool.get("code"), tool.get("libs") or {}
    if not isinstance(code, str):
        raise ToolCallInvalidError("code is text (python source)")
    problem = python_libs_problem(libs)
    if problem is not None:
        raise ToolCallInvalidError(problem)
    refused = python_args_problems(args, libs)
    if refused:
        raise ToolCallInvalidError("; ".join(why for _, why in refused))
    options = pyworker.PoolOptions(python=context.python_executable, limits=context.python_limits)
    pool = pyworker.pool_for(options)
    request = {
        "code": code,
        "args": args,
        "libs": libs if isinstance(libs, dict) else {},
        "seed": context.intent,
        "context": context.execution_context,
        "noetl": context.flow_format >= 2,
    }
    try:
        answer = pool.run(request, timeout_s)
    except pyworker.WorkerError as error:
        if error.code == "python.timeout":
            return timed_out(error.code, str(error))
        return failure(error.code, str(error))
    if isinstance(answer, dict) and "ok" in answer:
        try:
            return ToolOutcome("ok", cbor.from_json(answer["ok"]))
        except cbor.CborError as error:
            return failure("python.result_invalid", f"the result has no CBOR form: {error}")
    raised = answer.get("error") if isinstance(answer, dict) else None
    if not isinstance(raised, dict):
        return failure("python.crashed", "the python worker answered without a result")
    kind = str(raised.get("type"))
    if kind == "NotData":  # the worker's own: the code ran, its `result` is not plain data
        return failure("python.result_invalid", str(raised.get("message")))
    message = f"{kind}: {raised.get('message')}"
    # The code the definition holds raised: the definition's own logic, not a transport.
    shown = raised.get("traceback")
    trace: dict[str, Any] = {}
    if isinstance(shown, str):
        trace["traceback"] = shown[-TRACEBACK_CHARS_MAX:]
    return failure("python.raised", message, kind="expression", py={"exception": kind}, **trace)


def _function_module(ref: Any) -> str:
    module, sep, function = ref.partition(":") if isinstance(ref, str) else ("", "", "")
    if not sep or not all(p.isidentifier() for p in module.split(".")):
        raise ToolCallInvalidError(f"function {ref!r} is package.module:function")
    if not function.isidentifier():
        raise ToolCallInvalidError(f"function {ref!r} is package.module:function")
    return module


def _run_function(ref: str, args: Any, timeout_s: float, context: ToolContext) -> ToolOutcome:
    """`ref(args)` in a fresh child process: the built-in python adapter's runner."""
    runner = PythonFunctionEffect(
        PythonOptions(
            functions={"*": ref},
            module_paths=context.python_paths,
            timeout_s=timeout_s,
            python=context.python_executable,
            limits=context.python_limits,
        )
    )
    effect = PYTHON_EFFECT
    lease = Lease(
        lease_id="",
        intent=context.intent,
        effect=effect,
        params=args,
        idempotency_key=context.intent,
        issuer_ref=None,
        origin_workflow="",
        origin_key=None,
        expires_unix_ms=0,
    )
    result = runner(args, lease)
    if result.status == "ok":
        return ToolOutcome("ok", result.payload)
    found = result.payload if isinstance(result.payload, dict) else {}
    message = str(found.get("message", ""))
    if result.status == "timeout":
        return timed_out("python.timeout", message)
    if found.get("code") in PYTHON_LIMIT_CODES:
        return failure(str(found["code"]), message)
    if "type" in found:
        exception = str(found["type"])
        return failure("python.raised", message, kind="expression", py={"exception": exception})
    if "exit_code" in found:
        stderr = _clip(str(found.get("stderr", "")), ERROR_TEXT_CHARS_MAX)
        return failure(
            "python.crashed", message, py={"exit_code": found["exit_code"], "stderr": stderr}
        )
    return failure("python.result_invalid", message)
