"""The Restate side of `bench/bench_restate.py`: the `three_steps` workload as a Restate
service, three `ctx.run` steps in a row, each a Python function that returns a small dict
(the same three as `bench/playbooks/hello_world.yaml` and `bench/workflows/three_steps_py`).

Run by the interpreter of `.venv-restate` (`make bench-restate-setup`: `restate-sdk` and
`hypercorn`), never by the project's: it imports nothing of aos.

    .venv-restate/bin/python bench/peers/restate_service.py --bind 127.0.0.1:PORT

serves the service's endpoint with hypercorn over HTTP/2 without TLS (h2c, what the Restate
server speaks to a deployment registered at an `http://` URI) until SIGTERM.
`bench/peers/restate_stack.py` starts it, waits for its port and registers it.

A step is `ctx.run_typed` (the SDK's name for `ctx.run` since 0.9; `ctx.run` is its deprecated
spelling) of an `async def`: the SDK awaits it on its own event loop, where a plain `def`
would go to a thread of the loop's executor. The handler's answer is the three results by step
name, what the bench checks.
"""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

import restate
from hypercorn.asyncio import serve
from hypercorn.config import Config

SERVICE = "ThreeSteps"
HANDLER = "run"

three_steps = restate.Service(SERVICE)


async def greet(message: str) -> dict[str, Any]:
    return {"greeting": message}


async def shout(message: str) -> dict[str, Any]:
    return {"shout": message.upper()}


async def end(message: str) -> dict[str, Any]:
    return {"done": True, "length": len(message)}


@three_steps.handler(HANDLER)
async def run(ctx: restate.Context, workload: dict[str, Any]) -> dict[str, Any]:
    message = str(workload["message"])
    return {
        "greet": await ctx.run_typed("greet", greet, message=message),
        "shout": await ctx.run_typed("shout", shout, message=message),
        "end": await ctx.run_typed("end", end, message=message),
    }


app = restate.app(services=[three_steps])


async def _serve(bind: str) -> None:
    config = Config()
    config.bind = [bind]
    config.accesslog = None
    await serve(app, config)  # type: ignore[arg-type]  # SIGTERM: its graceful shutdown


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bind", required=True, help="HOST:PORT")
    asyncio.run(_serve(parser.parse_args().bind))


if __name__ == "__main__":
    main()
