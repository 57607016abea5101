"""A guest that reaches for what workflows do not have: the clock, a file, the network. And
one that raises.

`aos module build` rejects it (`build.capability_denied`, naming each capability and line).
Built anyway (`build_python(..., check_capabilities=False)`), every such step traps in a
stubbed WASI call, and `aos.kernel.wasm.build.trap_capability` reads the capability off the
trap backtrace. An exception traps too: the component ABI has no error channel, so `aos_sdk`
writes one line to stderr, which is the trapping call ("guest exception");
`aos_sdk.testing.explain` reruns the input natively and shows the traceback.
"""

from __future__ import annotations

import socket
import time
from typing import Any

from aos_sdk import Context, Workflow, export

bad_capabilities = Workflow("demo/BadCapabilities@1")


@bad_capabilities.on("demo/ReadClock@1")
def read_clock(state: Any, event: Any, ctx: Context) -> Any:
    return {"at": time.time_ns()}


@bad_capabilities.on("demo/OpenFile@1")
def open_file(state: Any, event: Any, ctx: Context) -> Any:
    with open("/etc/hostname", "rb") as source:
        return {"host": source.read()}


@bad_capabilities.on("demo/Connect@1")
def connect(state: Any, event: Any, ctx: Context) -> Any:
    conn = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    conn.connect(("192.0.2.1", 80))
    return {"connected": True}


@bad_capabilities.on("demo/Raise@1")
def raise_error(state: Any, event: Any, ctx: Context) -> Any:
    raise ValueError(f"cannot handle {event!r}")


@bad_capabilities.on("demo/Fine@1")
def fine(state: Any, event: Any, ctx: Context) -> Any:
    return {"fine": True}


WitWorld = export(bad_capabilities)
