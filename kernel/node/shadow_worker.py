"""A proposal's shadow, computed for a node in a process of its own.

A shadow replays the whole history, which may take minutes, so the node does not run it on
its writer thread (that would hold up every write) nor in its own process beside the
writer (LMDB forbids opening one environment twice in a process). It starts

    python -m aos.kernel.node.shadow_worker WORLD_DIR PROPOSAL

which opens the store read-only (beside the serving writer, as every reader does) and writes
one canonical CBOR map to stdout: `{"report": bytes, "state_height": int, "summary": {...}}`
(the report's own canonical bytes, so the node stores exactly what was computed), or
`{"error": {code, message, ...}}`. The node then journals the report on its writer thread.
"""

from __future__ import annotations

import asyncio
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aos.kernel import cbor
from aos.kernel.errors import AosError, KernelInvariantError
from aos.kernel.node.errors import NodeError, refused

SHADOW_OUTPUT_BYTES_MAX = 256 * 1024 * 1024
"""Largest answer the node reads from a shadow worker (the report lists every cell)."""


class ShadowTimeoutError(NodeError):
    code = "node.shadow_timeout"
    hint = "raise `aos node up --shadow-ms-max`, or run `aos gov shadow` with the node stopped"


class ShadowUnavailableError(NodeError):
    code = "node.shadow_unavailable"
    hint = "a node shadows only a world it opened from a folder (`aos node up --world DIR`)"


@dataclass(frozen=True)
class ShadowResult:
    """What a worker computed: the report's canonical bytes and what the journal records."""

    report: bytes
    state_height: int
    summary: dict[str, int]


async def run_shadow(world_dir: Path, proposal: str, *, timeout_ms: int) -> ShadowResult:
    """Run a worker for `proposal` and wait at most `timeout_ms` for its answer; a worker that
    takes longer is killed (`node.shadow_timeout`)."""
    found = await run_worker(
        __name__,
        [str(world_dir), proposal],
        timeout_ms=timeout_ms,
        what=f"the shadow of {proposal}",
    )
    return ShadowResult(
        report=bytes(found["report"]),
        state_height=int(found["state_height"]),
        summary={str(k): int(v) for k, v in found["summary"].items()},
    )


async def run_worker(
    module: str, args: list[str], *, timeout_ms: int, what: str, stdin: bytes = b""
) -> dict[str, Any]:
    """Run `python -m MODULE ARGS...` (given `stdin`), a worker that answers one canonical
    CBOR map on stdout: its answer, or `{"error": {code, message, ...}}`, raised here as the
    error it names. A worker that takes longer than `timeout_ms` is killed
    (`node.shadow_timeout`). Flow shadows and migrations (flows/serve/flow_shadow_worker.py) run so."""
    worker = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        module,
        *args,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        limit=SHADOW_OUTPUT_BYTES_MAX,
    )
    try:
        out, err = await asyncio.wait_for(worker.communicate(stdin), timeout_ms / 1000)
    except TimeoutError:
        worker.kill()
        await worker.wait()
        raise ShadowTimeoutError(
            f"{what} took more than {timeout_ms} ms", limit=timeout_ms
        ) from None
    return _answer(out, err, worker.returncode, what)


def _answer(out: bytes, err: bytes, returncode: int | None, what: str) -> dict[str, Any]:
    try:
        found: Any = cbor.decode(out)
    except AosError:
        tail = err.decode(errors="replace").strip().splitlines()[-1:] or ["no output"]
        raise KernelInvariantError(
            f"the worker for {what} exited {returncode} without an answer: {tail[0]}"
        ) from None
    if not isinstance(found, dict):
        raise KernelInvariantError(f"the worker for {what} answered no map")
    if "error" in found:
        raise refused(found["error"], f"{what} failed")
    return found


def main(argv: list[str]) -> int:
    from aos.kernel.governance import shadow  # the worker alone pays for replay's imports

    world_dir, proposal = argv
    try:
        report = shadow.shadow(world_dir, proposal)
    except AosError as error:
        sys.stdout.buffer.write(cbor.encode({"error": error.to_dict()}))
        return 1
    answer = {
        "report": cbor.encode(report.to_value()),
        "state_height": report.state_height,
        "summary": report.summary(),
    }
    sys.stdout.buffer.write(cbor.encode(answer))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
