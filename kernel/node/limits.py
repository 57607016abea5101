"""Bounds of a world host. Every one is a named default that `NodeLimits` can override, and so
`aos node up`, whose options are generated from its fields (kernel/limits_config.py); crossing
one is a typed error (`node.limit_exceeded`, `request.too_large`), never a silent clamp."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aos.kernel import limits_config
from aos.kernel.limits_config import limit
from aos.kernel.node.errors import NodeConfigError
from aos.kernel.signing.request_auth import (
    ADAPTER_NONCES_MAX_DEFAULT,
    ADAPTER_RECEIPT_REFUSALS_MAX_DEFAULT,
    ADAPTER_REFUSAL_WINDOW_MS_DEFAULT,
    ADAPTER_REQUEST_SKEW_MS_MAX_DEFAULT,
)
from aos.kernel.store.limits import OWNER_LEASE_MS_DEFAULT, OWNER_LEASE_MS_MIN

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
CLIENT_IDLE_CONNECTION_S = 2.0
"""How long aos's own clients keep an idle pooled connection before they close it. A request
sent on a connection the node is closing at that instant fails in flight, and a POST cannot be
retried safely (the node may have read it), so a client must let go first."""
IDLE_CONNECTION_S_DEFAULT = 20
"""How long the node keeps a client's connection open with no request on it (HTTP keep-alive).
Longer than the clients' own expiry: aos's (`CLIENT_IDLE_CONNECTION_S`) and httpx's default
5 s, which uvicorn's default 5 s raced (bench/HISTORY.md, issue 34)."""
IDLE_CONNECTION_S_MIN = 3
"""Never at or under `CLIENT_IDLE_CONNECTION_S`, so aos's clients always close first."""
IDLE_CONNECTION_S_MAX = 3600
"""An idle socket is held at most an hour (they count against `connections_max`)."""
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


LIMIT_CEILING = 2**63 - 1
"""No node limit is larger: every one fits a signed 64-bit integer (a timer, a socket option,
a database column)."""


def _positive(default: int, help: str) -> Any:
    """A node limit: every one is a positive integer."""
    return limit(default, help, minimum=1, maximum=LIMIT_CEILING)


@dataclass(frozen=True)
class NodeLimits:
    """The bounds of one world host; `aos node up` takes each as `--field-name`, as
    `--limit NAME=VALUE` and from a settings file's `[limits]` (spec/04 §10)."""

    request_bytes_max: int = _positive(REQUEST_BYTES_MAX_DEFAULT, "Largest request body.")
    blob_bytes_max: int = _positive(
        BLOB_BYTES_MAX_DEFAULT, "Largest blob an adapter may upload (POST /v1/blobs)."
    )
    proposal_bytes_max: int = _positive(
        PROPOSAL_BYTES_MAX_DEFAULT,
        "Largest proposal (patch and module binaries) `aos gov propose` may send.",
    )
    shadow_ms_max: int = _positive(
        SHADOW_MS_MAX_DEFAULT, "Longest one shadow (`aos gov shadow` through the node) may run."
    )
    request_body_ms_max: int = _positive(
        REQUEST_BODY_MS_MAX_DEFAULT,
        "Longest a request body may take to arrive after its headers (then 408).",
    )
    json_depth_max: int = _positive(
        JSON_DEPTH_MAX_DEFAULT, "Deepest JSON a request body or query value may nest."
    )
    leases_per_request_max: int = _positive(
        LEASES_PER_REQUEST_MAX_DEFAULT, "Most intents one lease request may get."
    )
    long_poll_ms_max: int = _positive(
        LONG_POLL_MS_MAX_DEFAULT, "Longest wait_ms a lease request may ask for."
    )
    cell_waiters_max: int = _positive(
        CELL_WAITERS_MAX_DEFAULT, "Requests waiting at once for a cell to step (then node.busy)."
    )
    lease_ms: int = _positive(
        LEASE_MS_DEFAULT,
        "How long a leased intent stays with its adapter before it is handed out again.",
    )
    timer_tick_ms: int = _positive(
        TIMER_TICK_MS_DEFAULT, "Tick interval of a wall-clock world while a timer is pending."
    )
    journal_records_per_request_max: int = _positive(
        JOURNAL_RECORDS_PER_REQUEST_MAX_DEFAULT, "Most records one journal read answers."
    )
    journal_scan_records_max: int = _positive(
        JOURNAL_SCAN_RECORDS_MAX_DEFAULT,
        "Most records one journal read looks at when filtering by kind.",
    )
    journal_scan_records_per_turn: int = _positive(
        JOURNAL_SCAN_RECORDS_PER_TURN_DEFAULT,
        "Most records a journal read looks at in one turn on the writer thread.",
    )
    cells_per_request_max: int = _positive(
        CELLS_PER_REQUEST_MAX_DEFAULT, "Most cells one read answers."
    )
    tasks_per_request_max: int = _positive(
        TASKS_PER_REQUEST_MAX_DEFAULT, "Most human tasks one read answers."
    )
    events_per_request_max: int = _positive(
        EVENTS_PER_REQUEST_MAX_DEFAULT, "Most history events one read of an execution answers."
    )
    value_bytes_shown_max: int = _positive(
        VALUE_BYTES_SHOWN_MAX_DEFAULT,
        "Largest value (a state, encoded) a read shows; a larger one by its size and hash.",
    )
    state_replay_records_max: int = _positive(
        STATE_REPLAY_RECORDS_MAX_DEFAULT,
        "Most records a read may replay to rebuild a state the store no longer keeps.",
    )
    tail_streams_max: int = _positive(
        TAIL_STREAMS_MAX_DEFAULT, "Live journal tails open at once (then node.busy)."
    )
    tail_poll_ms: int = _positive(TAIL_POLL_MS_DEFAULT, "How often a live tail looks for records.")
    tail_stream_ms_max: int = _positive(
        TAIL_STREAM_MS_MAX_DEFAULT, "How long one live tail stays open (then it reconnects)."
    )
    host_queue_max: int = _positive(
        HOST_QUEUE_MAX_DEFAULT, "World operations waiting for the writer thread (then node.busy)."
    )
    host_batch_max: int = _positive(
        HOST_BATCH_MAX_DEFAULT,
        "Most queued receipts and events run to idle and flushed together (group commit).",
    )
    shutdown_grace_ms: int = _positive(
        SHUTDOWN_GRACE_MS_DEFAULT, "How long a stopping node waits for in-flight requests."
    )
    idle_connection_s: int = limit(
        IDLE_CONNECTION_S_DEFAULT,
        "How long a client's connection stays open with no request on it (keep-alive).",
        minimum=IDLE_CONNECTION_S_MIN,
        maximum=IDLE_CONNECTION_S_MAX,
    )
    # The transport (kernel/node/transport.py) and the write rate (kernel/node/rate.py).
    header_timeout_ms: int = _positive(
        HEADER_TIMEOUT_MS_DEFAULT,
        "Longest a request's head (request line and headers) may take to arrive; then the "
        "socket is closed (slowloris).",
    )
    header_bytes_max: int = _positive(HEADER_BYTES_MAX_DEFAULT, "Largest request head (then 431).")
    connections_max: int = _positive(
        CONNECTIONS_MAX_DEFAULT,
        "Most sockets open at once (held below the file limit); one more closes the oldest "
        "one still sending its head.",
    )
    large_bodies_max: int = _positive(
        LARGE_BODIES_MAX_DEFAULT,
        "Most bodies over --request-bytes-max (blobs, proposals with binaries) read at once.",
    )
    proposal_values_max: int = _positive(
        PROPOSAL_VALUES_MAX_DEFAULT,
        "Most values a CBOR proposal may hold, counted before it is decoded.",
    )
    write_rate_per_s: int = _positive(
        WRITE_RATE_PER_S_DEFAULT,
        "Write requests one caller (peer address) may make per second (then 429).",
    )
    write_burst_max: int = _positive(
        WRITE_BURST_MAX_DEFAULT, "Write requests one caller may make at once after a quiet spell."
    )
    # Signed adapter requests (kernel/signing/request_auth.py).
    adapter_request_skew_ms_max: int = _positive(
        ADAPTER_REQUEST_SKEW_MS_MAX_DEFAULT,
        "How far a signed adapter request's timestamp may be from this host's clock.",
    )
    adapter_nonces_max: int = _positive(
        ADAPTER_NONCES_MAX_DEFAULT, "Nonces remembered per adapter within the skew window."
    )
    adapter_receipt_refusals_max: int = _positive(
        ADAPTER_RECEIPT_REFUSALS_MAX_DEFAULT,
        "Refused receipts one adapter may cause per --adapter-refusal-window-ms.",
    )
    adapter_refusal_window_ms: int = _positive(
        ADAPTER_REFUSAL_WINDOW_MS_DEFAULT, "The window of --adapter-receipt-refusals-max."
    )
    # The host's ownership of a PostgreSQL world (kernel/store/pg_owner.py, spec/07).
    owner_lease_ms: int = limit(
        OWNER_LEASE_MS_DEFAULT,
        "(PostgreSQL worlds) How long this node's ownership of the world lasts unrenewed "
        "(renewed every third); a dead node's world can be taken over after it.",
        minimum=OWNER_LEASE_MS_MIN,
        maximum=LIMIT_CEILING,
    )

    def __post_init__(self) -> None:
        for problem in limits_config.problems(self):
            raise NodeConfigError(f"node limit {problem}")
