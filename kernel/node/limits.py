"""Bounds of a world host. Every one is a named default that `NodeLimits` (and so
`aos node up`) can override; crossing one is a typed error (`node.limit_exceeded`,
`request.too_large`), never a silent clamp."""

from __future__ import annotations

from dataclasses import dataclass

from aos.kernel.node.errors import NodeConfigError
from aos.kernel.signing.request_auth import (
    ADAPTER_NONCES_MAX_DEFAULT,
    ADAPTER_RECEIPT_REFUSALS_MAX_DEFAULT,
    ADAPTER_REFUSAL_WINDOW_MS_DEFAULT,
    ADAPTER_REQUEST_SKEW_MS_MAX_DEFAULT,
)

REQUEST_BYTES_MAX_DEFAULT = 1024 * 1024
"""Largest request body the node reads (a receipt must also fit the world's own limit)."""
BLOB_BYTES_MAX_DEFAULT = 16 * 1024 * 1024
"""Largest body of `POST /v1/blobs` (the one endpoint not bound by `request_bytes_max`); it
must also fit the store's own `blob_bytes_max`."""
PROPOSAL_BYTES_MAX_DEFAULT = 64 * 1024 * 1024
"""Largest body of `POST /v1/gov/proposals` (a patch with the module binaries it adds); it is
not bound by `request_bytes_max`, and every binary must also fit the store's `blob_bytes_max`."""
SHADOW_MS_MAX_DEFAULT = 600_000
"""How long the node lets one shadow run (in a worker process) before it kills it."""
REQUEST_BODY_MS_MAX_DEFAULT = 30_000
"""How long the node waits for a request's whole body once its headers arrived; a client that
stalls past it gets 408 `request.timeout` and its connection closed."""
JSON_DEPTH_MAX_DEFAULT = 64
"""Deepest JSON a request body or query value may nest (kernel/text/jsontext.py)."""
LEASES_PER_REQUEST_MAX_DEFAULT = 100
LONG_POLL_MS_MAX_DEFAULT = 30_000
CELL_WAITERS_MAX_DEFAULT = 1024
"""Requests waiting at once for a cell to step (`GET /v1/executions/{exec}?wait_ms=N`); past it
a new one is `node.busy`."""
LEASE_MS_DEFAULT = 30_000
"""How long an adapter holds a leased intent before it is handed out again."""
TIMER_TICK_MS_DEFAULT = 50
"""How often a wall-clock world is ticked while a kernel timer is pending."""
JOURNAL_RECORDS_PER_REQUEST_MAX_DEFAULT = 1000
JOURNAL_SCAN_RECORDS_MAX_DEFAULT = 100_000
"""Most records one journal read looks at when filtering by kind."""
JOURNAL_SCAN_RECORDS_PER_TURN_DEFAULT = 2_000
"""Most records a journal read looks at in one turn on the writer thread; a longer scan
takes several turns, and writes run between them (a filtered scan of 100k records would
otherwise hold every write for seconds)."""
CELLS_PER_REQUEST_MAX_DEFAULT = 10_000
VALUE_BYTES_SHOWN_MAX_DEFAULT = 64 * 1024
"""Largest value (a state, encoded) the read API and the inspector show; a larger one is
shown by its size and hash."""
STATE_REPLAY_RECORDS_MAX_DEFAULT = 20_000
"""Most records a read may replay to rebuild the state at a step the store no longer keeps
(on the host thread, so it holds up writes meanwhile)."""
TAIL_STREAMS_MAX_DEFAULT = 16
"""Live tails (`GET /v1/journal/stream`) open at once; past it a new one is `node.busy`."""
TAIL_POLL_MS_DEFAULT = 250
"""How often a live tail looks for new records."""
TAIL_STREAM_MS_MAX_DEFAULT = 300_000
"""How long one live tail stays open; an EventSource then reconnects where it left off."""
TASKS_PER_REQUEST_MAX_DEFAULT = 1000
EVENTS_PER_REQUEST_MAX_DEFAULT = 1000
"""History events one answer of `GET /v1/executions/{exec}/events` holds (whole step records:
the record that reaches it is the last)."""
HOST_QUEUE_MAX_DEFAULT = 10_000
"""World operations waiting for the writer thread; past it requests get `node.busy`."""
HOST_BATCH_MAX_DEFAULT = 256
"""Most queued receipt and event operations the writer thread admits before running the world
to idle once (one flush) for all of them: group commit."""
SHUTDOWN_GRACE_MS_DEFAULT = 5000
"""How long a stopping node waits for in-flight requests."""
HEADER_TIMEOUT_MS_DEFAULT = 10_000
"""How long a client has to send a whole request head (request line and headers), from the
connection's start or its first byte after a response; then the socket is closed."""
HEADER_BYTES_MAX_DEFAULT = 64 * 1024
"""Largest request head the node reads (431 `request.header_too_large`)."""
CONNECTIONS_MAX_DEFAULT = 10_000
"""Sockets open at once (held below the file limit); one more closes the oldest socket still
sending its head (kernel/node/transport.py)."""
LARGE_BODIES_MAX_DEFAULT = 4
"""Bodies larger than `request_bytes_max` (blobs, proposals with binaries) read at once; the
next waits its turn within `request_body_ms_max`, else `node.busy`."""
PROPOSAL_VALUES_MAX_DEFAULT = 100_000
"""Most values (CBOR items, module binaries included) of a proposal's body, counted before it
is decoded: what decoding it may allocate is bounded by its bytes and this."""
WRITE_RATE_PER_S_DEFAULT = 1000
"""Write requests (any method but GET, HEAD, OPTIONS) one caller may make per second,
sustained (kernel/node/rate.py)."""
WRITE_BURST_MAX_DEFAULT = 2000
"""Write requests one caller may make at once, after a quiet spell."""


@dataclass(frozen=True)
class NodeLimits:
    request_bytes_max: int = REQUEST_BYTES_MAX_DEFAULT
    blob_bytes_max: int = BLOB_BYTES_MAX_DEFAULT
    proposal_bytes_max: int = PROPOSAL_BYTES_MAX_DEFAULT
    shadow_ms_max: int = SHADOW_MS_MAX_DEFAULT
    request_body_ms_max: int = REQUEST_BODY_MS_MAX_DEFAULT
    json_depth_max: int = JSON_DEPTH_MAX_DEFAULT
    leases_per_request_max: int = LEASES_PER_REQUEST_MAX_DEFAULT
    long_poll_ms_max: int = LONG_POLL_MS_MAX_DEFAULT
    cell_waiters_max: int = CELL_WAITERS_MAX_DEFAULT
    lease_ms: int = LEASE_MS_DEFAULT
    timer_tick_ms: int = TIMER_TICK_MS_DEFAULT
    journal_records_per_request_max: int = JOURNAL_RECORDS_PER_REQUEST_MAX_DEFAULT
    journal_scan_records_max: int = JOURNAL_SCAN_RECORDS_MAX_DEFAULT
    journal_scan_records_per_turn: int = JOURNAL_SCAN_RECORDS_PER_TURN_DEFAULT
    cells_per_request_max: int = CELLS_PER_REQUEST_MAX_DEFAULT
    tasks_per_request_max: int = TASKS_PER_REQUEST_MAX_DEFAULT
    events_per_request_max: int = EVENTS_PER_REQUEST_MAX_DEFAULT
    value_bytes_shown_max: int = VALUE_BYTES_SHOWN_MAX_DEFAULT
    state_replay_records_max: int = STATE_REPLAY_RECORDS_MAX_DEFAULT
    tail_streams_max: int = TAIL_STREAMS_MAX_DEFAULT
    tail_poll_ms: int = TAIL_POLL_MS_DEFAULT
    tail_stream_ms_max: int = TAIL_STREAM_MS_MAX_DEFAULT
    host_queue_max: int = HOST_QUEUE_MAX_DEFAULT
    host_batch_max: int = HOST_BATCH_MAX_DEFAULT
    shutdown_grace_ms: int = SHUTDOWN_GRACE_MS_DEFAULT
    # The transport (kernel/node/transport.py) and the write rate (kernel/node/rate.py).
    header_timeout_ms: int = HEADER_TIMEOUT_MS_DEFAULT
    header_bytes_max: int = HEADER_BYTES_MAX_DEFAULT
    connections_max: int = CONNECTIONS_MAX_DEFAULT
    large_bodies_max: int = LARGE_BODIES_MAX_DEFAULT
    proposal_values_max: int = PROPOSAL_VALUES_MAX_DEFAULT
    write_rate_per_s: int = WRITE_RATE_PER_S_DEFAULT
    write_burst_max: int = WRITE_BURST_MAX_DEFAULT
    # Signed adapter requests (kernel/signing/request_auth.py).
    adapter_request_skew_ms_max: int = ADAPTER_REQUEST_SKEW_MS_MAX_DEFAULT
    adapter_nonces_max: int = ADAPTER_NONCES_MAX_DEFAULT
    adapter_receipt_refusals_max: int = ADAPTER_RECEIPT_REFUSALS_MAX_DEFAULT
    adapter_refusal_window_ms: int = ADAPTER_REFUSAL_WINDOW_MS_DEFAULT

    def __post_init__(self) -> None:
        for name, value in vars(self).items():
            if type(value) is not int or value < 1:
                raise NodeConfigError(
                    f"node limit {name} must be a positive integer, not {value!r}"
                )
