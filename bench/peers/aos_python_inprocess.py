"""A python tool adapter for `bench/bench_playbooks.py` that calls each function inside its own
process, where `aos adapter run tool-python` starts a fresh interpreter per call: the floor a
reused worker process approaches, so the bench can tell the engine's cost from the cost of
starting Python. It is a bench instrument, not a way to run untrusted code (no isolation).

    python -m bench.peers.aos_python_inprocess --node URL --key FILE --allow PREFIX
        [--module-path DIR]

It serves `aos/tool.python@1` as the adapter `aos/python@1` (the flow world's python key),
with the same answers as the real tool for what the bench calls: `ok` with the function's
value (or inline `code`'s `result`, once playbooks carry it), `error` when the module is not
allowed or the call raises. First line on stdout:
{"ready": true}; then it runs until SIGTERM.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from pathlib import Path
from typing import Any

from aos.flows.tools.dispatch import EFFECT_OF_KIND, TOOL_EFFECTS
from aos.kernel.adapters.sdk import Adapter, Lease, Result
from aos.kernel.signing.keys import read_seed

EFFECT = EFFECT_OF_KIND["python"]
LEASE_WAIT_MS = 10_000


def call(params: Any, allow: tuple[str, ...]) -> Result:
    """The tool call `params`, here: its inline `code` run with the args as its variables and
    `result` as its value (as NoETL's worker runs a playbook's python step), or its
    `module:function`(args) if `allow` admits the module."""
    tool = params["tool"]
    if "code" in tool:
        return _run_code(str(tool["code"]), params["args"])
    ref = str(tool["function"])
    module, _, name = ref.partition(":")
    if not any(module == p or module.startswith(p + ".") for p in allow):
        return _error("python.not_allowed", f"module {module} is not allowed", "authorization")
    try:
        value = getattr(importlib.import_module(module), name)(params["args"])
    except Exception as error:  # the function's failure is the call's outcome
        return _error("python.raised", f"{ref} raised {type(error).__name__}: {error}")
    return Result("ok", value)


def _run_code(code: str, args: Any) -> Result:
    scope = dict(args) if isinstance(args, dict) else {}
    try:
        exec(code, {}, scope)  # the bench's own playbooks; no isolation, see above
    except Exception as error:
        return _error("python.raised", f"inline code raised {type(error).__name__}: {error}")
    return Result("ok", scope.get("result"))


def _error(code: str, message: str, kind: str = "transport") -> Result:
    return Result("error", {"kind": kind, "code": code, "message": message, "retryable": False})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--node", required=True)
    parser.add_argument("--key", required=True, type=Path)
    parser.add_argument("--allow", action="append", required=True)
    parser.add_argument("--module-path", action="append", default=[], type=Path)
    options = parser.parse_args()
    sys.path[:0] = [str(p) for p in options.module_path]
    allow = tuple(options.allow)
    adapter = Adapter(
        name=TOOL_EFFECTS[EFFECT],
        seed=read_seed(options.key),
        node=options.node,
        lease_wait_ms=LEASE_WAIT_MS,
    )

    @adapter.effect(EFFECT)
    def handle(params: Any, lease: Lease) -> Result:
        return call(params, allow)

    with adapter:
        print(json.dumps({"ready": True}), flush=True)
        adapter.run()


if __name__ == "__main__":
    main()
