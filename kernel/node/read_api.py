"""The node's HTTP read API (spec/04-effects.md §9.4): everything the CLI can show, as JSON,
over the read layer (views.py) the web inspector shares.

    GET /v1/overview                      world, workflows, intents, proposals at a glance
    GET /v1/cells/{workflow}              cells: ?status= &after=KEYHASH &limit=
    GET /v1/cell?workflow=&key=           one cell with its state
    GET /v1/timeline?workflow=&key=       a cell's records newest first: &before=SEQ &limit=
    GET /v1/steps/{seq}/state             the state a step left its cell in
    GET /v1/journal                       records: ?from=SEQ (oldest first) | ?before=SEQ
                                          (newest first), &kind=K (repeatable) &workflow=
                                          &key= &failed=true &limit=
    GET /v1/journal/stream                server-sent events: every record after ?after=SEQ
    GET /v1/records/{seq}                 one record
    GET /v1/trace/{hash}                  what a record or intent came from and caused: ?from=SEQ
    GET /v1/intents                       open intents with their lease: ?after=INTENT &limit=
    GET /v1/proposals                     governance proposals
    GET /v1/proposals/{id}                one proposal, its patch and its shadow report
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from functools import partial
from typing import Annotated, Any

from fastapi import Query, Request
from fastapi.responses import StreamingResponse

from aos.kernel import cbor
from aos.kernel.node import read_model as views
from aos.kernel.node.errors import NodeBusyError, QueryInvalidError
from aos.kernel.node.node import Node
from aos.kernel.node.routes import Handlers
from aos.kernel.world.world import World

STREAM_MEDIA_TYPE = "text/event-stream"


def bounds_of(node: Node) -> views.Bounds:
    limits = node.limits
    return views.Bounds(
        rows_max=limits.journal_records_per_request_max,
        scan_max=limits.journal_scan_records_max,
        value_bytes_max=limits.value_bytes_shown_max,
    )


def journal_filter(
    world: World,
    kinds: list[str],
    workflow: str | None,
    key: str | None,
    failed: bool,
    derived: views.Derived = views.NOTHING_DERIVED,
) -> views.JournalFilter:
    """Records of these kinds, of the cell `workflow` and `key` name (`workflow` alone: of
    any of its cells), only failures (the kernel's and those `derived` names)."""
    found = views.kinds_of(kinds)
    if workflow is None:
        if key is not None:
            raise QueryInvalidError("a key filter needs its workflow", path="$.key")
        return views.JournalFilter(found, None, failed, derived=derived)
    if key is None:
        world.runtime.workflow(workflow)  # raises world.workflow_unknown
        return views.JournalFilter(found, None, failed, workflow, derived)
    return views.JournalFilter(found, views.cell_ref(world, workflow, key), failed, derived=derived)


async def journal_in_turns(
    node: Node,
    cursor: views.JournalCursor,
    rows: int,
    bounds: views.Bounds,
    where: Callable[[World], views.JournalFilter],
) -> dict[str, Any]:
    """One journal page (`views.journal`), scanned in turns of at most
    `journal_scan_records_per_turn` records on the writer thread, so that writes run between
    turns. Records never change once written, so the page is the one a single scan would
    give (a newest-first page starts at the head the first turn saw)."""
    records: list[Any] = []
    scanned = 0
    while True:
        budget = min(node.limits.journal_scan_records_per_turn, bounds.scan_max - scanned)
        turn = replace(bounds, rows_max=rows - len(records), scan_max=budget)
        page = await node.host.run(partial(_journal_turn, cursor, turn, where))
        records += page["records"]
        scanned += page["scanned"]
        backward = cursor.from_seq is None
        ended = page["scanned"] < budget or (backward and page["next_before"] is None)
        if len(records) >= rows or scanned >= bounds.scan_max or ended:
            return {**page, "records": records, "scanned": scanned}
        cursor = views.JournalCursor(page["next_seq"], page["next_before"])


def _journal_turn(
    cursor: views.JournalCursor,
    turn: views.Bounds,
    where: Callable[[World], views.JournalFilter],
    world: World,
) -> dict[str, Any]:
    return views.journal(
        world,
        from_seq=cursor.from_seq,
        before=cursor.before,
        limit=turn.rows_max,
        where=where(world),
        bounds=turn,
    )


def read_handlers(node: Node) -> Handlers:
    """The handlers of `routes.READS`."""
    handler = Handlers()
    bounds = bounds_of(node)
    tails = Tails()
    cell_bounds = views.Bounds(
        node.limits.cells_per_request_max, bounds.scan_max, bounds.value_bytes_max
    )

    @handler
    async def get_overview() -> dict[str, Any]:
        """Height, manifest, clock, cells and failures per workflow, open intents, proposals."""
        found = await node.host.run(partial(views.overview, bounded_failures=True))
        found["leases"] = node.leases.counts()
        return found

    @handler
    async def get_cells(
        workflow: str,
        status: str | None = None,
        after: str | None = Query(None, description="The key hash of the last cell seen."),
        limit: int | None = None,
    ) -> dict[str, Any]:
        """A workflow's cells in key-hash order, only those with `status` when given."""
        wanted = views.cell_status(status)
        rows = views.rows(limit, cell_bounds, views.CELLS_ROWS_DEFAULT)
        return await node.host.run(
            lambda world: views.cells(
                world,
                workflow,
                status=wanted,
                after=after,
                limit=rows,
                scan_max=cell_bounds.scan_max,
            )
        )

    @handler
    async def get_cell(workflow: str, key: str | None = None) -> dict[str, Any]:
        """One cell (key as JSON; leave it out for an unkeyed workflow) with its state."""
        return await node.host.run(
            lambda world: views.cell(world, views.cell_ref(world, workflow, key), bounds)
        )

    @handler
    async def get_timeline(
        workflow: str, key: str | None = None, before: int | None = None, limit: int | None = None
    ) -> dict[str, Any]:
        """A cell's records newest first, each step with the input it took (receipts with
        their signature status)."""
        rows = views.rows(limit, bounds)
        below = views.sequence(before, "before")

        def read(world: World) -> dict[str, Any]:
            ref = views.cell_ref(world, workflow, key)
            return views.timeline(world, ref, before=below, limit=rows, bounds=bounds)

        return await node.host.run(read)

    @handler
    async def get_state_at(seq: int) -> dict[str, Any]:
        """The state step record `seq` left its cell in (while the store still has it)."""
        return await node.host.run(
            lambda world: views.state_at(
                world, seq, bounds, replay_records_max=node.limits.state_replay_records_max
            )
        )

    @handler
    async def get_journal(
        from_seq: int | None = Query(None, alias="from"),
        before: int | None = None,
        limit: int | None = None,
        kind: Annotated[list[str] | None, Query()] = None,
        workflow: str | None = None,
        key: str | None = None,
        failed: bool = False,
    ) -> dict[str, Any]:
        """Records oldest first from `from` (the default: from 1), or newest first below
        `before`, keeping those of the kinds, cell and failures asked for."""
        rows = views.rows(limit, bounds, views.JOURNAL_ROWS_DEFAULT)
        start = views.sequence(from_seq, "from")
        below = views.sequence(before, "before")
        if start is None and below is None:
            start = 1

        def where(world: World) -> views.JournalFilter:
            return journal_filter(world, kind or [], workflow, key, failed, node.derived)

        cursor = views.JournalCursor(start, below)
        return await journal_in_turns(node, cursor, rows, bounds, where)

    @handler
    async def stream_journal(request: Request, after: int | None = None) -> StreamingResponse:
        """Server-sent events: one `record` event per journal record after `after` (default:
        the head when the stream opens), as it is written. Reconnecting with Last-Event-ID
        resumes after that record."""
        resume = request.headers.get("last-event-id")
        start = int(resume) if resume and resume.isdigit() else after
        if start is not None and start < 0:
            raise QueryInvalidError("after is a sequence number (>= 0)", path="$.after")
        stream = Tail(node, start, bounds, tails)
        return StreamingResponse(stream.events(request), media_type=STREAM_MEDIA_TYPE)

    @handler
    async def get_record(seq: int) -> dict[str, Any]:
        return await node.host.run(
            lambda world: {"seq": seq, "record": cbor.to_json(views.record_at(world, seq))}
        )

    @handler
    async def get_trace(
        target: str, from_seq: int | None = Query(None, alias="from")
    ) -> dict[str, Any]:
        """Where a record (by hash) or an intent (by intent hash) came from and what it
        caused; the search starts at `from` (default 1)."""
        start = views.sequence(from_seq, "from") or 1
        return await node.host.run(lambda world: views.traced(world, target, bounds, start))

    @handler
    async def get_intents(after: str | None = None, limit: int | None = None) -> dict[str, Any]:
        """Open intents in intent-hash order, each with whether an adapter leases it now."""
        rows = views.rows(limit, bounds)
        return await node.host.run(
            lambda world: views.open_intents(world, node.leases.is_leased, after=after, limit=rows)
        )

    @handler
    async def get_proposals() -> dict[str, Any]:
        return await node.host.run(views.proposals)

    @handler
    async def get_proposal(proposal: str) -> dict[str, Any]:
        """A proposal, its patch, and its shadow report (null before a shadow run)."""
        return await node.host.run(lambda world: views.proposal(world, proposal))

    return handler


class Tails:
    """How many live tails one app has open (they all run on its event loop)."""

    def __init__(self) -> None:
        self.count = 0


class Tail:
    """One live tail: polls the journal's head every `tail_poll_ms` and sends what is new, at
    most `rows_max` records per poll, until the client goes, the node stops, or
    `tail_stream_ms_max` passes (an EventSource then reconnects with Last-Event-ID). At most
    `tail_streams_max` tails are open at once; past it the stream is `node.busy`."""

    def __init__(self, node: Node, after: int | None, bounds: views.Bounds, opened: Tails) -> None:
        if opened.count >= node.limits.tail_streams_max:
            raise NodeBusyError(f"{opened.count} live tails are open; try again shortly")
        self.opened = opened
        self.node = node
        self.after = after
        self.bounds = bounds

    async def events(self, request: Request) -> AsyncIterator[str]:
        self.opened.count += 1
        try:
            limits = self.node.limits
            loop = asyncio.get_running_loop()
            deadline = loop.time() + limits.tail_stream_ms_max / 1000
            if self.after is None:
                self.after = await self.node.host.run(lambda w: w.store.journal.head())
            yield f"retry: {limits.tail_poll_ms}\n\n"
            while loop.time() < deadline and not self.node.leases.closed:
                if await request.is_disconnected():
                    return
                page = await self.node.host.run(self._read)
                for entry in page["records"]:
                    self.after = entry["seq"]
                    yield _event(entry)
                if not page["records"]:
                    await asyncio.sleep(limits.tail_poll_ms / 1000)
        finally:
            self.opened.count -= 1

    def _read(self, world: World) -> dict[str, Any]:
        assert self.after is not None
        return views.journal(
            world,
            from_seq=self.after + 1,
            before=None,
            limit=self.bounds.rows_max,
            where=views.JournalFilter(),
            bounds=self.bounds,
        )


def _event(entry: dict[str, Any]) -> str:
    data = json.dumps(entry, separators=(",", ":"), sort_keys=True)
    return f"id: {entry['seq']}\nevent: record\ndata: {data}\n\n"
