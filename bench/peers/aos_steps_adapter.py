"""The code-first `three_steps` adapter of `bench/bench_restate.py`: an SDK adapter
(`aos.kernel.adapters.sdk`) serving the three step effects of `bench/workflows/three_steps_py`,
each a Python function called in this process that returns a small dict (the steps of
`bench/playbooks/hello_world.yaml` and of the Restate service, `bench/peers/restate_service.py`).

    python -m bench.peers.aos_steps_adapter --node URL [--concurrency N]

First line on stdout: {"ready": true, "world": WORLD_ID}; then one line per execution whose
last step's receipt the node has answered, which it does once that receipt and the step it
resumed are durable: {"done": EXECUTION_ID}, or {"failed": EXECUTION_ID, "why": ...} when a
receipt of it was not accepted. The bench learns each execution's end from these lines: the
node has no wait on a workflow cell's state (a flow execution's end has one, spec/11 §9.1).
It runs until SIGTERM.
"""

from __future__ import annotations

import argparse
import json
import threading
from collections.abc import Callable
from typing import Any

from aos.kernel.adapters.sdk import Adapter, Lease, Outcome, Result
from bench.bench_effects import ADAPTER_SEED

ADAPTER = "bench/steps-adapter@1"
LEASE_WAIT_MS = 10_000
CONCURRENCY_DEFAULT = 32


def greet(message: str) -> dict[str, Any]:
    return {"greeting": message}


def shout(message: str) -> dict[str, Any]:
    return {"shout": message.upper()}


def end(message: str) -> dict[str, Any]:
    return {"done": True, "length": len(message)}


STEPS: dict[str, Callable[[str], dict[str, Any]]] = {
    "bench/three_steps.greet@1": greet,
    "bench/three_steps.shout@1": shout,
    "bench/three_steps.end@1": end,
}
LAST_EFFECT = "bench/three_steps.end@1"


def report(outcome: Outcome) -> dict[str, Any] | None:
    """The line to print for a lease's outcome: an execution's end, a refusal, or nothing
    (an earlier step settled)."""
    execution = str(outcome.lease.origin_key)  # the cell's key: the execution id
    if not outcome.settled:
        why = outcome.refused or outcome.unposted
        return {"failed": execution, "why": f"{outcome.lease.effect}: {why}"}
    if outcome.lease.effect == LAST_EFFECT:
        return {"done": execution}
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--node", required=True)
    parser.add_argument("--concurrency", type=int, default=CONCURRENCY_DEFAULT)
    options = parser.parse_args()
    printing = threading.Lock()

    def on_outcome(outcome: Outcome) -> None:
        line = report(outcome)
        if line is not None:
            with printing:
                print(json.dumps(line), flush=True)

    adapter = Adapter(
        name=ADAPTER,
        seed=ADAPTER_SEED,
        node=options.node,
        concurrency=options.concurrency,
        lease_wait_ms=LEASE_WAIT_MS,
        on_outcome=on_outcome,
    )
    for effect, step in STEPS.items():

        def handle(params: Any, lease: Lease, step: Callable[..., Any] = step) -> Result:
            return Result("ok", step(params["message"]))

        adapter.effect(effect)(handle)
    with adapter:
        print(json.dumps({"ready": True, "world": adapter.world_id}), flush=True)
        adapter.run()


if __name__ == "__main__":
    main()
