"""Effects: the cost of an effect round trip, and effect throughput over many cells, on the
effect-chain world (bench/worlds/effect_chain: a cell started with n does n `bench/noop@1`
effects one after another, each emitted by the step that takes the previous receipt).

* `effects.sequential`: one cell, N effects one after another. In process: a noop adapter
  signs each receipt and calls `World.settle` + `run_to_idle` directly on a durable world
  (sync on: one fsync per receipt). Out of process: `aos node up` serving a durable world and
  a noop SDK adapter in its own process (`python -m bench.bench_effects --adapter URL`),
  leasing over HTTP and posting signed receipts.
* `effects.many_cells`: M cells started at once, each doing E effects. In process, the
  receipts of all open intents are settled and flushed together (group commit) or one flush
  each; out of process, the SDK adapter with concurrency `ADAPTER_CONCURRENCY` against the
  node (which settles the receipts queued together and flushes once for them: group commit).

Rows are seconds per effect (a settled intent and the step its receipt resumes).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from aos.kernel.adapters.sdk import Adapter, Lease, Outcome, Result
from aos.kernel.node.identities import IdentityStore, create_first_admin
from aos.kernel.signing.signatures import signed_receipt
from aos.kernel.world.stamps import PinnedStampSource
from aos.kernel.world.world import World
from bench.harness import Row

REPO = Path(__file__).resolve().parent.parent
CHAIN = REPO / "bench" / "worlds" / "effect_chain"
START = "bench/ChainStart@1"
WORKFLOW = "bench/chain@1"
EFFECT = "bench/noop@1"
ADAPTER = "bench/noop-adapter@1"
ADAPTER_SEED = bytes(range(32))  # bench-only: its public half is in the chain manifest
ADAPTER_CONCURRENCY = 16
SEQUENTIAL_EFFECTS = {True: 40, False: 200}  # by quick
SEQUENTIAL_ROUNDS = {True: 5, False: 9}
MANY_CELLS = {True: 200, False: 1000}
MANY_EFFECTS_PER_CELL = {True: 3, False: 5}
MANY_ROUNDS = {True: 3, False: 5}
HTTP_SEQUENTIAL_EFFECTS = {True: 40, False: 200}
HTTP_SEQUENTIAL_ROUNDS = {True: 3, False: 7}
HTTP_CELLS = {True: 60, False: 300}
HTTP_ROUNDS = {True: 2, False: 3}
SENDERS = 4
START_S_MAX = 60.0
DONE_S_MAX = 300.0
POLL_S = 0.001


# --------------------------------------------------------------------------------------------
# In process


def settle_all(world: World, *, flush_each: bool) -> int:
    """Sign and settle a receipt for every open intent; flush once, or once per receipt."""
    intents = [intent["intent"] for intent in world.reader.open_intents()]
    for intent in intents:
        world.settle(signed_receipt(ADAPTER_SEED, _body(world, intent)))
        if flush_each:
            world.run_to_idle()
    if not flush_each:
        world.run_to_idle()
    return len(intents)


def _body(world: World, intent: str) -> dict[str, Any]:
    now = time.time_ns()
    return {
        "world": world.world_id,
        "intent": intent,
        "status": "ok",
        "payload": {"ok": True},
        "adapter": ADAPTER,
        "started_ns": now,
        "finished_ns": now,
    }


def run_chains(world: World, keys: list[str], effects: int, *, flush_each: bool) -> float:
    """Start a chain of `effects` in each key's cell and settle until every chain is done;
    the seconds it took."""
    started = time.perf_counter()
    for key in keys:
        world.ingress(START, {"id": key, "n": effects})
    world.run_to_idle()
    settled = 0
    while settled < len(keys) * effects:
        count = settle_all(world, flush_each=flush_each)
        assert count, "a chain stopped before its end"
        settled += count
    elapsed = time.perf_counter() - started
    assert all(world.reader.state(WORKFLOW, key)["done"] == effects for key in keys)
    return elapsed


@contextmanager
def chain_world(*, sync: bool) -> Iterator[World]:
    with tempfile.TemporaryDirectory(prefix="aos-bench-effects-") as tmp:
        world = World.create(Path(tmp) / "w", CHAIN, sync=sync, stamps=PinnedStampSource())
        with world:
            yield world


def _in_process_rows(quick: bool) -> list[Row]:
    rows = []
    effects, rounds = SEQUENTIAL_EFFECTS[quick], SEQUENTIAL_ROUNDS[quick]
    for sync in (True, False):
        with chain_world(sync=sync) as world:
            run_chains(world, ["warm"], 5, flush_each=True)
            samples = [
                run_chains(world, [f"seq-{r}"], effects, flush_each=True) / effects
                for r in range(rounds)
            ]
        label = "sync on" if sync else "sync off"
        rows.append(
            _row("effects.sequential", f"in-process noop adapter, {label}", samples, sync=sync)
        )
    cells, per_cell = MANY_CELLS[quick], MANY_EFFECTS_PER_CELL[quick]
    for flush_each in (False, True):
        with chain_world(sync=True) as world:
            samples = []
            for r in range(MANY_ROUNDS[quick]):
                keys = [f"many-{r}-{n}" for n in range(cells)]
                elapsed = run_chains(world, keys, per_cell, flush_each=flush_each)
                samples.append(elapsed / (cells * per_cell))
        how = "1 flush per receipt" if flush_each else "receipts of all open intents, 1 flush"
        rows.append(
            _row(
                "effects.many_cells",
                f"in-process, {cells} cells x {per_cell}, {how}, sync on",
                samples,
                baseline=not flush_each,
                cells=cells,
                effects_per_cell=per_cell,
            )
        )
    rows[0].baseline = True
    return rows


def _row(group: str, name: str, samples: list[float], baseline: bool = False, **extra: Any) -> Row:
    ordered = sorted(samples)
    median = ordered[len(ordered) // 2]
    extra["effects_per_s"] = round(1 / median)
    return Row(group, name, median, "effect", len(samples), baseline, samples, extra)


# --------------------------------------------------------------------------------------------
# Out of process: node + SDK adapter


class _Child:
    def __init__(self, args: list[str]) -> None:
        self.popen = subprocess.Popen(
            args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1
        )
        self.out: list[str] = []
        self.err: list[str] = []
        for stream, sink in ((self.popen.stdout, self.out), (self.popen.stderr, self.err)):
            threading.Thread(target=_collect, args=(stream, sink), daemon=True).start()

    def first_line(self) -> str:
        _wait("a process to start", lambda: bool(self.out) or self.popen.poll() is not None)
        if not self.out:
            raise RuntimeError(f"{self.popen.args} exited: {''.join(self.err)}")
        return self.out[0]

    def stop(self) -> None:
        if self.popen.poll() is None:
            self.popen.terminate()
        try:
            self.popen.wait(15)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait()


def _collect(stream: Any, sink: list[str]) -> None:
    for line in stream:
        sink.append(line)


def _wait(what: str, check: Any, timeout_s: float = START_S_MAX) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(POLL_S)


class _Remote:
    """A node and a noop adapter process; the adapter prints a line per settled receipt, so
    the bench sees progress without polling the node (which would compete for its host
    thread)."""

    def __init__(self, client: httpx.Client, adapter: _Child) -> None:
        self.client = client
        self.adapter = adapter
        self.settled = 0

    def chains(self, keys: list[str], effects: int) -> float:
        """Start a chain in each key's cell; the seconds until every receipt is settled."""
        started = time.perf_counter()
        senders = [
            threading.Thread(target=self._send, args=(keys[i::SENDERS], effects))
            for i in range(min(SENDERS, len(keys)))
        ]
        for thread in senders:
            thread.start()
        for thread in senders:
            thread.join()
        self.settled += len(keys) * effects
        # The adapter's first line is its start-up line.
        _wait("the chains", lambda: len(self.adapter.out) - 1 >= self.settled, DONE_S_MAX)
        elapsed = time.perf_counter() - started
        for key in keys:
            state = self.client.get(f"/v1/state/{WORKFLOW}", params={"key": json.dumps(key)})
            assert state.json()["state"]["done"] == effects, state.text
        return elapsed

    def _send(self, keys: list[str], effects: int) -> None:
        for key in keys:
            value = {"id": key, "n": effects}
            self.client.post(
                "/v1/events", json={"schema": START, "value": value}
            ).raise_for_status()


@contextmanager
def _node_and_adapter(concurrency: int) -> Iterator[_Remote]:
    aos = str(Path(sys.executable).with_name("aos"))
    with tempfile.TemporaryDirectory(prefix="aos-bench-effects-node-") as tmp:
        world = Path(tmp) / "w"
        World.create(world, CHAIN).close()
        first = create_first_admin(IdentityStore.of_world(world))
        assert first is not None  # a new world has no identities
        node = _Child([aos, "node", "up", "--world", str(world), "--bind", "127.0.0.1:0", "--json"])
        adapter = None
        try:
            url = json.loads(node.first_line())["url"]
            command = [sys.executable, "-m", "bench.bench_effects", "--adapter", url]
            adapter = _Child([*command, "--concurrency", str(concurrency)])
            adapter.first_line()
            headers = {"authorization": f"Bearer {first[1]}"}
            with httpx.Client(base_url=url, timeout=60, trust_env=False, headers=headers) as client:
                yield _Remote(client, adapter)
        finally:
            if adapter is not None:
                adapter.stop()
            node.stop()


def _http_rows(quick: bool) -> list[Row]:
    rows = []
    effects = HTTP_SEQUENTIAL_EFFECTS[quick]
    with _node_and_adapter(concurrency=1) as remote:
        remote.chains(["warm"], 5)
        samples = [
            remote.chains([f"seq-{r}"], effects) / effects
            for r in range(HTTP_SEQUENTIAL_ROUNDS[quick])
        ]
    rows.append(
        _row("effects.sequential", "out-of-process SDK adapter over HTTP, node sync on", samples)
    )
    cells, per_cell = HTTP_CELLS[quick], MANY_EFFECTS_PER_CELL[quick]
    with _node_and_adapter(concurrency=ADAPTER_CONCURRENCY) as remote:
        samples = []
        for r in range(HTTP_ROUNDS[quick]):
            keys = [f"many-{r}-{n}" for n in range(cells)]
            samples.append(remote.chains(keys, per_cell) / (cells * per_cell))
    rows.append(
        _row(
            "effects.many_cells",
            f"out-of-process SDK adapter (concurrency {ADAPTER_CONCURRENCY}) over HTTP, "
            f"{cells} cells x {per_cell}, node sync on",
            samples,
            cells=cells,
            effects_per_cell=per_cell,
        )
    )
    return rows


def run(quick: bool) -> list[Row]:
    rows = _in_process_rows(quick)
    http_rows = _http_rows(quick)
    # Keep each group's rows together, the in-process baseline first.
    return [r for r in rows + http_rows if r.group == "effects.sequential"] + [
        r for r in rows + http_rows if r.group == "effects.many_cells"
    ]


# --------------------------------------------------------------------------------------------
# The noop adapter process


def _serve_noop(url: str, concurrency: int) -> None:
    lock = threading.Lock()

    def report(outcome: Outcome) -> None:
        assert outcome.settled, outcome
        with lock:
            print(outcome.seq, flush=True)

    adapter = Adapter(
        name=ADAPTER,
        seed=ADAPTER_SEED,
        node=url,
        concurrency=concurrency,
        lease_wait_ms=5000,
        on_outcome=report,
    )

    @adapter.effect(EFFECT)
    def noop(params: Any, lease: Lease) -> Result:
        return Result("ok", {"ok": True})

    with adapter:
        print(json.dumps({"world_id": adapter.world_id}), flush=True)
        adapter.run()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="the bench's noop adapter")
    parser.add_argument("--adapter", required=True, metavar="NODE_URL")
    parser.add_argument("--concurrency", type=int, default=1)
    options = parser.parse_args()
    _serve_noop(options.adapter, options.concurrency)
