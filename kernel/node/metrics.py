"""The node's metrics in Prometheus's exposition format: `GET /metrics` (spec/04-effects.md
§9.7).

A scrape reads; it measures nothing on the way and changes nothing:
- the world's figures (height, cells and failed cells per workflow, open intents, queued
  deliveries, logical time) and the wasm engine's compile cache and instance pool, in one host
  operation, as `GET /v1/world` reads them;
- what the host thread counted since the node started (`HostCounts`): journal records by kind,
  step faults by workflow and code, refused inputs by kind and code, dropped deliveries,
  intents by effect, receipts by adapter and status, and the host's batches with their sizes
  and durations;
- the lease manager's and the cell watch's figures, the HTTP answers by method and status
  (`HttpCounts`), and the process's own (CPU, memory, file descriptors: prometheus_client's
  process collector).

Counting costs the hot path a dict increment per journaled record: the host thread already
reads every flushed record to publish it (host.py `_after`) and counts it there. The only clock
read is a batch's duration, on the host thread around the batch: nothing a step sees.

Every label value comes from a closed set — record kinds, error codes of the catalogue
(spec/errors.md), the manifest's workflows, effects and adapters, HTTP methods and statuses —
so the number of series is bounded by the manifest, never by traffic.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Mapping, MutableMapping
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import ProcessCollector
from prometheus_client.exposition import choose_encoder
from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    InfoMetricFamily,
    Metric,
)

from aos.kernel.buckets import SECONDS_BUCKETS, Buckets
from aos.kernel.world import records
from aos.kernel.world.records import Record

METRICS_PATH = "/metrics"
# A batch's phases, in order: its inputs admitted (a receipt's signature checked, journaled),
# the world run to idle (the steps, their checks, the flush with its syncs), what was flushed
# published (leases, cell waiters), the callers answered.
BATCH_PHASES = ("admit", "run", "publish", "answer")
# Upper bounds of the batch size buckets, in inputs (host_batch_max is 256 by default).
BATCH_INPUTS_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
# HTTP methods counted by name; any other is counted as "other", so a client cannot add series.
HTTP_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]


# --------------------------------------------------------------------------------------------
# Counting


@dataclass
class HostCounts:
    """What the host thread counted since the node started. Only the host thread changes it;
    a scrape copies it on the host thread (`snapshot`)."""

    records: Counter[str] = field(default_factory=Counter)
    step_faults: Counter[tuple[str, str]] = field(default_factory=Counter)
    rejected: Counter[tuple[str, str]] = field(default_factory=Counter)
    dropped: Counter[tuple[str, str]] = field(default_factory=Counter)
    intents: Counter[str] = field(default_factory=Counter)
    receipts: Counter[tuple[str, str]] = field(default_factory=Counter)
    operations: int = 0
    batch_seconds: Buckets = field(default_factory=lambda: Buckets(SECONDS_BUCKETS))
    batch_inputs: Buckets = field(default_factory=lambda: Buckets(BATCH_INPUTS_BUCKETS))
    batch_phase_seconds: dict[str, Buckets] = field(
        default_factory=lambda: {phase: Buckets(SECONDS_BUCKETS) for phase in BATCH_PHASES}
    )
    # The commits of the stores the host closed (a refusal's reopen, host.py): a reopened
    # store counts from zero, and the node's count must not go back.
    closed_commit_seconds: Buckets = field(default_factory=lambda: Buckets(SECONDS_BUCKETS))

    def commit_seconds(self, open_store: Buckets) -> Buckets:
        """Every commit since the node started: the closed stores' and the open one's."""
        found = self.closed_commit_seconds.copied()
        found.add(open_store)
        return found

    def journaled(self, record: Record) -> None:
        """One record the host published."""
        self.records[record.kind] += 1
        if isinstance(record, records.StepFaultRecord):
            self.step_faults[record.workflow, record.code] += 1
        elif isinstance(record, records.IngressRejected | records.ReceiptRejected):
            self.rejected[record.kind, record.code] += 1
        elif isinstance(record, records.DeliveryDropped):
            self.dropped[record.workflow, record.reason] += 1
        elif isinstance(record, records.EffectIntentRecord):
            self.intents[record.effect] += 1
        elif isinstance(record, records.EffectReceipt):
            body = record.body
            self.receipts[str(body.get("adapter", "")), str(body.get("status", ""))] += 1

    def batch(self, inputs: int, marks_s: list[float]) -> None:
        """A batch of `inputs`; `marks_s`: when it started and when each of `BATCH_PHASES`
        ended (a perf counter's seconds)."""
        self.batch_inputs.observe(inputs)
        self.batch_seconds.observe(marks_s[-1] - marks_s[0])
        for phase, began, ended in zip(BATCH_PHASES, marks_s[:-1], marks_s[1:], strict=True):
            self.batch_phase_seconds[phase].observe(ended - began)

    def snapshot(self) -> HostCounts:
        """A copy to read off the host thread."""
        return HostCounts(
            Counter(self.records),
            Counter(self.step_faults),
            Counter(self.rejected),
            Counter(self.dropped),
            Counter(self.intents),
            Counter(self.receipts),
            self.operations,
            self.batch_seconds.copied(),
            self.batch_inputs.copied(),
            {phase: b.copied() for phase, b in self.batch_phase_seconds.items()},
            self.closed_commit_seconds.copied(),
        )


class HttpCounts:
    """HTTP answers by method and status, counted by `CountingAnswers` on the event loop's
    thread, which is also where a scrape reads them."""

    def __init__(self) -> None:
        self.answers: Counter[tuple[str, int]] = Counter()

    def answered(self, method: str, status: int) -> None:
        self.answers[method if method in HTTP_METHODS else "other", status] += 1


class CountingAnswers:
    """ASGI middleware, outermost: counts each HTTP answer by method and status as its start
    goes out, whichever layer answers (the request guard, the fast path, the app)."""

    def __init__(self, app: Any, *, counts: HttpCounts) -> None:
        self.app = app
        self.counts = counts

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        method = str(scope.get("method", ""))

        async def counted(message: Message) -> None:
            if message["type"] == "http.response.start":
                self.counts.answered(method, int(message["status"]))
            await send(message)

        await self.app(scope, receive, counted)


# --------------------------------------------------------------------------------------------
# Exposition


@dataclass(frozen=True)
class Scrape:
    """Everything one scrape shows, gathered before any of it is written out."""

    world: Mapping[str, Any]  # views.overview, plus `engine` (EngineStats as a map)
    host: HostCounts
    commit_seconds: Buckets  # the store's (kernel/store/interface.py `CommitTimes`)
    host_queue_jobs: int
    leases: Mapping[str, int]  # {published, leased}
    lease_waiters: int
    cell_waiters: int
    http: Mapping[tuple[str, int], int]

    def collect(self) -> Iterator[Metric]:
        """The metric families, in a fixed order (prometheus_client's `Collector`)."""
        yield from _world_families(self.world)
        yield from _host_families(self.host, self.host_queue_jobs)
        yield _histogram(
            "aos_store_commit_seconds",
            "A durable commit of the store: its transaction with the syncs, or its round trip.",
            self.commit_seconds,
        )
        yield from self._node_families()
        yield from ProcessCollector(registry=None).collect()

    def _node_families(self) -> Iterator[Metric]:
        yield _gauge(
            "aos_leases_published", "Open intents offered to adapters.", self.leases["published"]
        )
        yield _gauge(
            "aos_leases_held",
            "Published intents an adapter holds a lease on.",
            self.leases["leased"],
        )
        yield _gauge("aos_lease_waiters", "Lease requests waiting (long-poll).", self.lease_waiters)
        yield _gauge(
            "aos_cell_waiters",
            "Requests waiting for a cell to step (long-poll).",
            self.cell_waiters,
        )
        answers = CounterMetricFamily(
            "aos_http_responses", "HTTP answers by method and status.", labels=["method", "status"]
        )
        for (method, status), count in sorted(self.http.items()):
            answers.add_metric([method, str(status)], count)
        yield answers


def _gauge(name: str, documentation: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, documentation, value=value)


def _world_families(world: Mapping[str, Any]) -> Iterator[Metric]:
    info = InfoMetricFamily("aos_world", "The world this node serves.")
    info.add_metric(
        [], {"world_id": world["world_id"], "manifest": world["manifest"], "clock": world["clock"]}
    )
    yield info
    yield _gauge("aos_journal_height", "The journal's last sequence number.", world["height"])
    yield _gauge(
        "aos_world_logical_time_seconds", "The world's logical time.", world["logical_ns"] / 1e9
    )
    yield _gauge(
        "aos_intents_open", "Effect intents not yet settled or cancelled.", world["open_intents"]
    )
    yield _gauge("aos_deliveries_queued", "Deliveries waiting for their step.", world["queued"])
    cells = GaugeMetricFamily("aos_cells", "Cells by workflow.", labels=["workflow"])
    failed = GaugeMetricFamily("aos_cells_failed", "Failed cells by workflow.", labels=["workflow"])
    for workflow, counts in sorted(world["workflows"].items()):
        cells.add_metric([workflow], counts["cells"])
        failed.add_metric([workflow], counts["failed"])
    yield cells
    yield failed
    yield from _engine_families(world["engine"])


def _engine_families(engine: Mapping[str, int]) -> Iterator[Metric]:
    yield CounterMetricFamily(
        "aos_wasm_compiled",
        "Modules compiled (not found in the compile cache).",
        value=engine["compiled"],
    )
    hits = CounterMetricFamily(
        "aos_wasm_cache_hits", "Modules found compiled, by cache.", labels=["cache"]
    )
    hits.add_metric(["disk"], engine["disk_hits"])
    hits.add_metric(["memory"], engine["memory_hits"])
    yield hits
    yield CounterMetricFamily(
        "aos_wasm_cache_rejected",
        "Cached compilations refused (checksum or fingerprint).",
        value=engine["disk_rejected"],
    )
    yield CounterMetricFamily(
        "aos_wasm_pool_fallbacks",
        "Instances the pool could not make (made unpooled).",
        value=engine["pool_fallbacks"],
    )


# The host's labelled counters: name, help, labels, and the `HostCounts` field counted.
_HOST_COUNTERS = (
    ("aos_journal_records", "Journal records this node wrote, by kind.", ["kind"], "records"),
    ("aos_step_faults", "Faulted steps by workflow and code.", ["workflow", "code"], "step_faults"),
    (
        "aos_inputs_rejected",
        "Refused inputs journaled, by record kind and code.",
        ["kind", "code"],
        "rejected",
    ),
    (
        "aos_deliveries_dropped",
        "Deliveries dropped, by workflow and reason.",
        ["workflow", "reason"],
        "dropped",
    ),
    ("aos_effect_intents", "Effect intents emitted, by effect.", ["effect"], "intents"),
    (
        "aos_effect_receipts",
        "Receipts journaled, by adapter and status.",
        ["adapter", "status"],
        "receipts",
    ),
)


def _host_families(host: HostCounts, queue_jobs: int) -> Iterator[Metric]:
    for name, documentation, labels, counted in _HOST_COUNTERS:
        yield _labelled_counter(name, documentation, labels, getattr(host, counted))
    yield CounterMetricFamily(
        "aos_host_operations",
        "World operations run one at a time (not batched).",
        value=host.operations,
    )
    yield _gauge("aos_host_queue_jobs", "World operations waiting for the host thread.", queue_jobs)
    yield _histogram(
        "aos_host_batch_seconds",
        "A batch of receipts and events: admitted, run to idle, flushed, published, answered.",
        host.batch_seconds,
    )
    yield _histogram("aos_host_batch_inputs", "Receipts and events per batch.", host.batch_inputs)
    phases = HistogramMetricFamily(
        "aos_host_batch_phase_seconds",
        "A batch's phases: admit, run (steps and the flush), publish, answer.",
        labels=["phase"],
    )
    for phase, buckets in host.batch_phase_seconds.items():
        phases.add_metric([phase], buckets.cumulative(), sum_value=buckets.total)
    yield phases


def _labelled_counter(
    name: str, documentation: str, labels: list[str], counts: Mapping[Any, int]
) -> CounterMetricFamily:
    family = CounterMetricFamily(name, documentation, labels=labels)
    for key, count in sorted(counts.items()):
        family.add_metric(list(key) if isinstance(key, tuple) else [key], count)
    return family


def _histogram(name: str, documentation: str, buckets: Buckets) -> HistogramMetricFamily:
    return HistogramMetricFamily(
        name, documentation, buckets=buckets.cumulative(), sum_value=buckets.total
    )


def exposition(scrape: Scrape, accept: str) -> tuple[bytes, str]:
    """The scrape's text and its media type: OpenMetrics when `accept` asks for it, else
    Prometheus's text format 0.0.4."""
    encoder, media_type = choose_encoder(accept)
    return encoder(scrape), media_type
