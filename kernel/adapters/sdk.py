"""The adapter SDK: an adapter is a decorated function (spec/10-adapters.md).

    adapter = Adapter(name="demo/http@1", seed=read_seed(path), node="http://127.0.0.1:9010")

    @adapter.effect("demo/http.request@1")
    def charge(params: Any, lease: Lease) -> Result:
        return Result("ok", {"status": 200, "headers": None, "body": None})

    adapter.run()  # until SIGINT/SIGTERM or `adapter.stop()`

`run` long-polls the node for leases of the effects it has handlers for, runs each handler
on a pooled thread (at most `concurrency` at once), signs a receipt body with the adapter's
Ed25519 seed and posts it; the receipt asks for the next lease, so a chain of intents goes
on in its slot without another long-poll. Every request to the node is retried with bounded exponential
backoff; a receipt the node already has (`duplicate`) counts as delivered. A handler that
raises settles its intent with an `error` receipt, so no intent is left waiting on a bug.

Adapters live outside the deterministic kernel: they may read clocks (a receipt's
`started_ns`/`finished_ns` are host wall-clock times) and do anything else; the world only
trusts what they sign.
"""

from __future__ import annotations

import json
import logging
import queue
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from types import FrameType
from typing import Any, Literal, TypeVar

import httpx

from aos.kernel import cbor
from aos.kernel.adapters.trace_context import in_trace_context
from aos.kernel.errors import AosError
from aos.kernel.hashing import hash_bytes
from aos.kernel.node.limits import CLIENT_IDLE_CONNECTION_S
from aos.kernel.node.progress import PROGRESS_MESSAGE_CHARS_MAX
from aos.kernel.node.tls import client_verify
from aos.kernel.signing.request_auth import AdapterAuth
from aos.kernel.signing.signatures import (
    SEED_BYTES,
    SIGNATURE_BYTES,
    public_key_of,
    sign_body,
    sign_encoded,
)
from aos.kernel.world.receipts import (
    RECEIPT_BYTES_MAX_DEFAULT,
    ReceiptError,
    ReceiptMalformedError,
    ReceiptTooLargeError,
    parse,
)

log = logging.getLogger("aos.adapter")

CONCURRENCY_DEFAULT = 8
CONCURRENCY_MAX = 256
LEASE_BATCH_MAX = 64
"""Most leases asked for in one request."""
LEASE_WAIT_MS_DEFAULT = 10_000
"""How long one lease request long-polls when nothing is open; SIGINT/SIGTERM cut it short."""
LEASE_WAIT_MS_MAX = 30_000
"""The node's default `long_poll_ms_max`."""
REQUEST_TIMEOUT_S_DEFAULT = 10.0
"""Timeout of one request to the node, on top of the long-poll wait of a lease request."""
RETRY_ATTEMPTS_MAX_DEFAULT = 8
RETRY_BACKOFF_MS_INITIAL_DEFAULT = 50
RETRY_BACKOFF_MS_MAX_DEFAULT = 5_000
STOP_DRAIN_S_DEFAULT = 30.0
"""How long a stopping adapter waits for running handlers to finish and post their receipts.
A handler still running after that is abandoned: its lease expires and the node hands the
intent out again, which the idempotency key makes safe."""
ERROR_MESSAGE_CHARS_MAX = 500

_HTTP_RETRY_STATUSES = frozenset({408, 429, 500, 502, 503, 504})
_JSON_HEADERS = {"content-type": "application/json"}
_OCTET_HEADERS = {"content-type": "application/octet-stream"}
_NO_HEADERS: dict[str, str] = {}

Status = Literal["ok", "error", "timeout"]
STATUSES: tuple[Status, ...] = ("ok", "error", "timeout")


# --------------------------------------------------------------------------------------------
# Errors


class AdapterError(AosError):
    code = "adapter.error"


class AdapterConfigInvalidError(AdapterError):
    code = "adapter.config_invalid"
    hint = "check the adapter's name, seed, node URL and limits"


class AdapterEffectDuplicateError(AdapterError):
    code = "adapter.effect_duplicate"
    hint = "each effect has one handler per adapter"


class AdapterNoHandlersError(AdapterError):
    code = "adapter.no_handlers"
    hint = "register at least one handler with @adapter.effect(NAME) before running"


class AdapterNodeUnreachableError(AdapterError):
    code = "adapter.node_unreachable"
    hint = "is `aos node up` running at that URL? the adapter retried with backoff and gave up"


class AdapterNodeRefusedError(AdapterError):
    """The node answered a request with an error body; `detail['node_code']` is its code."""

    code = "adapter.node_refused"
    hint = "the node's own error code is in detail.node_code"


class AdapterProgressInvalidError(AdapterError):
    code = "adapter.progress_invalid"
    hint = (
        f"progress is a fraction in [0, 1] (or None) and a message of at most "
        f"{PROGRESS_MESSAGE_CHARS_MAX} characters, reported on a lease the adapter handed out"
    )


class AdapterNodeProtocolError(AdapterError):
    code = "adapter.node_protocol"
    hint = "the node's answer does not have the shape of the adapter protocol (spec/10-adapters.md)"


class AdapterIdentityUnknownError(AdapterError):
    code = "adapter.identity_unknown"
    hint = "the world's manifest has no defadapter of this name: check --name (GET /v1/adapters)"


class AdapterKeyMismatchError(AdapterError):
    code = "adapter.key_mismatch"
    hint = (
        "the key file is not the private half of the defadapter's public_key: use the key the "
        "manifest names, or put this key's public half into the manifest"
    )


class AdapterEffectNotAllowedError(AdapterError):
    code = "adapter.effect_not_allowed"
    hint = "the defeffect's adapters list does not include this adapter (GET /v1/adapters)"


# --------------------------------------------------------------------------------------------
# Data


@dataclass(frozen=True)
class Lease:
    """One open intent leased to this adapter until `expires_unix_ms`.

    `intent` is the intent hash: the idempotency key to pass on to the outside system, so a
    retried or re-leased intent is done once (`idempotency_key` is what the node says to
    pass, the intent hash too). `origin_key` is the origin cell's key as canonical CBOR
    bytes (None for an unkeyed workflow)."""

    lease_id: str
    intent: str
    effect: str
    params: Any
    idempotency_key: str
    issuer_ref: str | None
    origin_workflow: str
    origin_key: Any
    expires_unix_ms: int
    # The work's W3C trace context when the node traces it: the handler runs in it.
    traceparent: str | None = None
    # Set by the adapter that hands the lease to a handler (`Adapter.progress`).
    reporter: Callable[[Lease, float | None, str], bool] | None = field(
        default=None, compare=False, repr=False
    )

    def progress(self, fraction: float | None = None, message: str = "") -> bool:
        """Tell the node how far the work is (a signed frame the node keeps, the newest few per
        intent; no workflow sees it). It also extends the lease, like `Adapter.renew`. False
        when the intent was cancelled meanwhile: stop, since its receipt would be refused."""
        if self.reporter is None:
            raise AdapterProgressInvalidError("this lease was not handed out by an adapter")
        return self.reporter(self, fraction, message)

    @staticmethod
    def from_json(value: Any) -> Lease:
        try:
            origin = value.get("origin") or {}
            intent = str(value["intent"])
            key = value.get("idempotency_key")
            issuer_ref = value.get("issuer_ref")
            traceparent = value.get("traceparent")
            lease = Lease(
                lease_id=str(value["lease_id"]),
                intent=intent,
                effect=str(value["effect"]),
                params=cbor.from_json(value["params"]),
                idempotency_key=key if isinstance(key, str) and key else intent,
                issuer_ref=issuer_ref if isinstance(issuer_ref, str) else None,
                origin_workflow=str(origin.get("workflow", "")),
                origin_key=cbor.from_json(origin.get("key")),
                expires_unix_ms=int(value["expires_unix_ms"]),
                traceparent=traceparent if isinstance(traceparent, str) else None,
            )
        except (AttributeError, KeyError, TypeError, ValueError, cbor.CborError) as error:
            raise AdapterNodeProtocolError(f"a lease is malformed: {error!r}") from None
        return lease


@dataclass(frozen=True)
class Result:
    """What a handler returns: the receipt's status and payload. An `ok` payload must fit the
    effect's receipt schema; `error` and `timeout` payloads may be any value."""

    status: Status = "ok"
    payload: Any = None

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise AdapterConfigInvalidError(f"status is {self.status!r}; it is one of {STATUSES}")

    @staticmethod
    def error(message: str, **fields: Any) -> Result:
        return Result("error", {"message": _clip(message), **fields})

    @staticmethod
    def timeout(message: str, **fields: Any) -> Result:
        return Result("timeout", {"message": _clip(message), **fields})


@dataclass(frozen=True)
class Outcome:
    """What became of one lease: the result, and the node's answer to its receipt (`seq` of
    the journaled `effect_receipt`, or `duplicate`), or why it was not accepted (`refused`:
    the node's error code; `unposted`: the node could not be reached)."""

    lease: Lease
    result: Result
    seq: int | None = None
    duplicate: bool = False
    delivered: bool = False
    refused: str | None = None
    unposted: str | None = None
    signature: bytes = b""
    # Leases the node handed out with the receipt's answer (`handle(..., then_lease=True)`).
    next_leases: tuple[Lease, ...] = ()

    @property
    def settled(self) -> bool:
        return self.refused is None and self.unposted is None


@dataclass(frozen=True)
class RetryPolicy:
    """Bounded exponential backoff: `attempts_max` tries, waiting `backoff_ms_initial`, then
    twice as long each time, never more than `backoff_ms_max`, between them."""

    attempts_max: int = RETRY_ATTEMPTS_MAX_DEFAULT
    backoff_ms_initial: int = RETRY_BACKOFF_MS_INITIAL_DEFAULT
    backoff_ms_max: int = RETRY_BACKOFF_MS_MAX_DEFAULT

    def __post_init__(self) -> None:
        if self.attempts_max < 1 or self.backoff_ms_initial < 0:
            raise AdapterConfigInvalidError("attempts_max >= 1 and backoff_ms_initial >= 0")
        if self.backoff_ms_max < self.backoff_ms_initial:
            raise AdapterConfigInvalidError("backoff_ms_max < backoff_ms_initial")

    def delays_ms(self) -> list[int]:
        """The waits between attempts (one fewer than the attempts)."""
        return [
            min(self.backoff_ms_initial * 2**n, self.backoff_ms_max)
            for n in range(self.attempts_max - 1)
        ]


@dataclass
class RunSummary:
    """Counts of what `run` did, for the CLI's last line."""

    leases: int = 0
    settled: int = 0
    duplicates: int = 0
    refused: int = 0
    unposted: int = 0
    by_status: dict[str, int] = field(default_factory=dict)

    def add(self, outcome: Outcome) -> None:
        self.leases += 1
        self.by_status[outcome.result.status] = self.by_status.get(outcome.result.status, 0) + 1
        if outcome.refused is not None:
            self.refused += 1
        elif outcome.unposted is not None:
            self.unposted += 1
        elif outcome.duplicate:
            self.duplicates += 1
        else:
            self.settled += 1


Handler = Callable[[Any, Lease], Result]
H = TypeVar("H", bound=Handler)


class _PollInterrupted(BaseException):
    """Raised by the signal handler to cut a long-poll short. A BaseException, so that no
    `except Exception` on the way (httpx's included) swallows it."""


# --------------------------------------------------------------------------------------------
# The node client


URLS_CACHED_MAX = 64
"""Request URLs a node client keeps parsed (the fixed paths; a lease's own paths come and go)."""
FOLLOW_TIMEOUT_S = 2.0
"""Timeout of one `GET /v1/worlds/{world}/node` while following the world."""
# The node's answers that mean "the world is not served here any more": ask where it is.
MOVED_CODES = frozenset({"store.fenced", "store.lease_lost", "store.owned", "world.closed"})


class NodeRoute:
    """Which node the adapter talks to now, shared by its clients. `follow` asks the nodes it
    knows (the current one and the others given) where the world is served now (`GET
    /v1/worlds/{world}/node`, answered by any node from the database's owner registry) and
    moves there. Safe to share between threads."""

    def __init__(
        self,
        url: str,
        others: Sequence[str] = (),
        *,
        world: Callable[[], str | None] = lambda: None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.url = url.rstrip("/")
        self.others = [o.rstrip("/") for o in others]
        self.moves = 0  # how often the world was followed elsewhere (tests read it)
        self._world = world
        self._transport = transport
        self._lock = threading.Lock()

    def follow(self, failed: str) -> str:
        """After a request to `failed` could not be served there: the node to use now (the
        same one when nobody knows better, or another thread already moved)."""
        with self._lock:
            if self.url != failed:
                return self.url
            world = self._world()
            if world is None:
                return self.url
            for asked in dict.fromkeys([self.url, *self.others]):
                found = self._where(asked, world)
                if found is not None and found != self.url:
                    log.warning("world %s is served at %s now; following it", world, found)
                    self.url = found
                    self.moves += 1
                    break
            return self.url

    def _where(self, node: str, world: str) -> str | None:
        try:
            with httpx.Client(
                transport=self._transport,
                timeout=FOLLOW_TIMEOUT_S,
                trust_env=False,
                verify=client_verify(node),
            ) as client:
                answer = client.get(f"{node}/v1/worlds/{world}/node").json()
        except (httpx.HTTPError, ValueError):
            return None
        url = answer.get("url") if isinstance(answer, dict) else None
        live = isinstance(answer, dict) and answer.get("live") is True
        return url.rstrip("/") if isinstance(url, str) and live else None


class _NoCookies(httpx.Cookies):
    """Cookies that stay empty: the node sets none (adapter requests are signed, not a
    session), and looking for them in every answer is work on each request."""

    def extract_cookies(self, response: httpx.Response) -> None:
        return None


_NO_COOKIES = _NoCookies()


class _Http(httpx.Client):
    """httpx's client, keeping no cookies (`_NoCookies`)."""

    @property
    def cookies(self) -> httpx.Cookies:
        return _NO_COOKIES

    @cookies.setter
    def cookies(self, cookies: Any) -> None:
        del cookies  # nothing is kept


class NodeClient:
    """JSON requests to a world host with bounded retries. Safe to share between threads.
    With a `route`, a node that is gone or answers that the world moved is followed (each
    attempt goes to the route's node of the moment).

    Each request is built as an `httpx.Request` of an absolute URL (parsed once per node and
    path) with only the headers the node reads (content type, and `auth`'s signature,
    made afresh for every attempt: a retry is a new nonce), not through the client's
    defaults: httpx's merging of base URL, default headers and cookies, and an auth flow's
    second pass over the headers, are much of its cost per request, and an adapter's chain
    pays it once per task."""

    def __init__(
        self,
        base_url: str,
        *,
        retry: RetryPolicy,
        timeout_s: float = REQUEST_TIMEOUT_S_DEFAULT,
        transport: httpx.BaseTransport | None = None,
        connections_max: int = CONCURRENCY_DEFAULT,
        auth: AdapterAuth | None = None,
        route: NodeRoute | None = None,
    ) -> None:
        self.retry = retry
        self._auth = auth
        self.route = route
        self.timeout_s = timeout_s
        self.attempts = 0  # requests sent, retries included (tests read it)
        self._base = base_url.rstrip("/")
        # (node, path) -> its URL; cleared when full (paths with a lease id in them vary).
        self._urls: dict[tuple[str, str], httpx.URL] = {}
        self._client = _Http(
            transport=transport,
            timeout=timeout_s,
            limits=httpx.Limits(
                max_connections=connections_max,
                max_keepalive_connections=connections_max,
                keepalive_expiry=CLIENT_IDLE_CONNECTION_S,  # before the node lets go
            ),
            trust_env=False,  # a loopback node must not be sent through an HTTP proxy
            # An https node is verified (AOS_CA for a private CA, AOS_CLIENT_CERT/KEY for
            # mutual TLS); a route may move the world to another node, so with a route the
            # context is made whatever the first node's scheme.
            verify=client_verify("https://" if route is not None else base_url),
        )

    def close(self) -> None:
        self._client.close()

    @property
    def urls_cached(self) -> int:
        """Request URLs kept parsed (at most URLS_CACHED_MAX)."""
        return len(self._urls)

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        extra_timeout_s: float = 0.0,
        params: dict[str, str] | None = None,
        stop: threading.Event | None = None,
        raw: bytes | None = None,
        json_text: str | None = None,
    ) -> Any:
        """The decoded JSON answer to a JSON `body` (or to `json_text`, a body already encoded
        as JSON, or to `raw` bytes, sent as application/octet-stream). Transport failures and
        408/429/5xx answers are retried (waits cut short by `stop`); any other error answer
        raises `adapter.node_refused`."""
        content: bytes | None = None
        headers = _NO_HEADERS
        if raw is not None:
            content, headers = raw, _OCTET_HEADERS
        elif json_text is not None:
            content, headers = json_text.encode(), _JSON_HEADERS
        elif body is not None:
            content, headers = json.dumps(body, allow_nan=False).encode(), _JSON_HEADERS
        delays = self.retry.delays_ms()
        failure = ""
        timeout = {"timeout": httpx.Timeout(self.timeout_s + extra_timeout_s).as_dict()}
        for attempt in range(self.retry.attempts_max):
            self.attempts += 1
            node = self._node()
            try:
                response = self._client.send(
                    self._request(method, node, path, params, content, headers, timeout)
                )
            except httpx.TransportError as error:
                failure = f"{type(error).__name__}: {error}"
            else:
                moved = self._moved(response)
                if response.status_code not in _HTTP_RETRY_STATUSES and not moved:
                    return _answer(response)
                failure = moved or f"HTTP {response.status_code}"
            if self.route is not None and self.route.follow(node) != node:
                continue  # the world is served elsewhere: try there at once
            if attempt < len(delays):
                log.debug("node request %s %s failed (%s); retrying", method, path, failure)
                wait_s = delays[attempt] / 1000
                if stop is not None:
                    if stop.wait(wait_s):
                        break
                else:
                    time.sleep(wait_s)
        raise AdapterNodeUnreachableError(
            f"{method} {path}: {failure} (after {self.retry.attempts_max} attempts)"
        )

    def _node(self) -> str:
        """The node this attempt goes to (the route's, when following the world)."""
        if self.route is not None:
            self._base = self.route.url
        return self._base

    def _request(
        self,
        method: str,
        node: str,
        path: str,
        params: dict[str, str] | None,
        content: bytes | None,
        headers: dict[str, str],
        extensions: dict[str, Any],
    ) -> httpx.Request:
        url = self._url(node, path)
        if params:
            url = url.copy_merge_params(params)
        if self._auth is not None:
            headers = {**headers, **self._auth.headers_for(method, url, content or b"")}
        return httpx.Request(method, url, content=content, headers=headers, extensions=extensions)

    def _url(self, node: str, path: str) -> httpx.URL:
        url = self._urls.get((node, path))
        if url is None:
            if len(self._urls) >= URLS_CACHED_MAX:
                self._urls.clear()
            url = self._urls[(node, path)] = httpx.URL(node + path)
        return url

    def _moved(self, response: httpx.Response) -> str:
        """The node's error code when it says the world is not served there any more (only
        asked when following: then the request is tried again where the world is)."""
        if self.route is None or response.status_code not in (409, 503):
            return ""
        try:
            error = response.json().get("error")
        except (ValueError, AttributeError):
            return ""
        code = error.get("code") if isinstance(error, dict) else None
        return code if code in MOVED_CODES else ""


def _answer(response: httpx.Response) -> Any:
    try:
        value = response.json()
    except ValueError:
        raise AdapterNodeProtocolError(
            f"HTTP {response.status_code} with a body that is not JSON"
        ) from None
    if response.is_success:
        return value
    error = value.get("error") if isinstance(value, dict) else None
    if not isinstance(error, dict):
        raise AdapterNodeProtocolError(f"HTTP {response.status_code} without an error body")
    node_code = str(error.get("code", "unknown"))
    raise AdapterNodeRefusedError(
        f"{node_code}: {error.get('message', '')}",
        node_code=node_code,
        http_status=response.status_code,
    )


# --------------------------------------------------------------------------------------------
# The adapter


class Adapter:
    """An adapter identity (name and Ed25519 seed) serving effects for one node."""

    def __init__(
        self,
        *,
        name: str,
        seed: bytes,
        node: str,
        nodes: Sequence[str] = (),
        concurrency: int = CONCURRENCY_DEFAULT,
        lease_wait_ms: int = LEASE_WAIT_MS_DEFAULT,
        chain_leases: bool = True,
        retry: RetryPolicy | None = None,
        request_timeout_s: float = REQUEST_TIMEOUT_S_DEFAULT,
        receipt_bytes_max: int = RECEIPT_BYTES_MAX_DEFAULT,
        stop_drain_s: float = STOP_DRAIN_S_DEFAULT,
        on_outcome: Callable[[Outcome], None] | None = None,
        transport: httpx.BaseTransport | None = None,
        clock_ns: Callable[[], int] = time.time_ns,
    ) -> None:
        for url in (node, *nodes):
            _check_config(name, seed, url, concurrency, lease_wait_ms)
        self.name = name
        self.node = node
        self.concurrency = concurrency
        self.lease_wait_ms = lease_wait_ms
        # Each receipt asks for the handler's next lease in its answer (spec/10 §2, step 4).
        self.chain_leases = chain_leases
        self.receipt_bytes_max = receipt_bytes_max
        self.stop_drain_s = stop_drain_s
        self.on_outcome = on_outcome
        self.summary = RunSummary()
        self._seed = seed
        self._clock_ns = clock_ns
        self._handlers: dict[str, Handler] = {}
        self._world_id: str | None = None
        self._identity_checked = False
        self._stop = threading.Event()
        self._abandon = threading.Event()
        self._slots = threading.Condition()
        self._running = 0
        self._polling = False
        self._pool = _HandlerPool(concurrency)
        # Two clients: a long-poll cut short by a signal may leave its connection broken,
        # and that must not touch the one that posts receipts while the adapter drains.
        retry = retry or RetryPolicy()
        # Requests are signed once the world id is known (it is part of what is signed).
        auth = AdapterAuth(name, seed, lambda: self._world_id)
        # The world is followed to whichever node serves it (spec/10 §2.2): `nodes` are more
        # nodes to ask where that is, when the one in use is gone.
        self.route = NodeRoute(node, nodes, world=lambda: self._world_id, transport=transport)
        self._lease_client = NodeClient(
            node,
            retry=retry,
            timeout_s=request_timeout_s,
            transport=transport,
            connections_max=2,
            auth=auth,
            route=self.route,
        )
        self._receipt_client = NodeClient(
            node,
            retry=retry,
            timeout_s=request_timeout_s,
            transport=transport,
            connections_max=concurrency + 1,
            auth=auth,
            route=self.route,
        )

    # ---- registration

    def effect(self, name: str) -> Callable[[H], H]:
        """Register the decorated function as the handler of effect `name`."""
        if not isinstance(name, str) or not name:
            raise AdapterConfigInvalidError(f"an effect name is text, not {name!r}")

        def register(handler: H) -> H:
            if name in self._handlers:
                raise AdapterEffectDuplicateError(f"{name} already has a handler")
            self._handlers[name] = handler
            return handler

        return register

    @property
    def effects(self) -> list[str]:
        return sorted(self._handlers)

    # ---- running

    @property
    def world_id(self) -> str:
        """The id of the node's world (receipts are signed for it); fetched once."""
        if self._world_id is None:
            # The public health route: the id is what a signature is made for, so it is asked
            # before anything can be signed.
            answer = self._lease_client.request("GET", "/v1/health", stop=self._stop)
            world_id = answer.get("world_id") if isinstance(answer, dict) else None
            if not isinstance(world_id, str) or not world_id:
                raise AdapterNodeProtocolError("GET /v1/health has no world_id")
            self._world_id = world_id
        return self._world_id

    def check_identity(self) -> None:
        """Check, before anything is leased, that the world knows this adapter by this key and
        lets it settle every effect it has a handler for: `adapter.identity_unknown`,
        `adapter.key_mismatch` or `adapter.effect_not_allowed`, naming the mismatch, instead
        of work done and then refused. Asked of the node once (`GET /v1/adapters`)."""
        if self._identity_checked:
            return
        answer = self._lease_client.request("GET", "/v1/adapters", stop=self._stop)
        found = answer.get("adapters") if isinstance(answer, dict) else None
        if not isinstance(found, list):
            raise AdapterNodeProtocolError("GET /v1/adapters answered without an adapters list")
        mine = next((a for a in found if isinstance(a, dict) and a.get("name") == self.name), None)
        if mine is None:
            known = sorted(str(a.get("name")) for a in found if isinstance(a, dict))
            raise AdapterIdentityUnknownError(
                f"the world has no adapter {self.name}", adapter=self.name, known=known
            )
        key = public_key_of(self._seed).hex()
        if mine.get("public_key") != key:
            raise AdapterKeyMismatchError(
                f"adapter {self.name}: the key file's public key is {key}, the world's "
                f"defadapter says {mine.get('public_key')}",
                adapter=self.name,
                public_key=key,
                expected=mine.get("public_key"),
            )
        listed = mine.get("effects")
        allowed: list[Any] = listed if isinstance(listed, list) else []
        refused = [effect for effect in self.effects if effect not in allowed]
        if refused:
            raise AdapterEffectNotAllowedError(
                f"adapter {self.name} may not settle {', '.join(refused)}",
                adapter=self.name,
                effects=refused,
                allowed=allowed,
            )
        self._identity_checked = True

    def run(self, *, install_signals: bool = True) -> RunSummary:
        """Serve leases until `stop()` or SIGINT/SIGTERM, then let running handlers finish and
        post their receipts (at most `stop_drain_s`). Raises `adapter.node_unreachable` when
        the node stays away for all retries, and the errors of `check_identity` before
        leasing anything."""
        self._require_handlers()
        _ = self.world_id
        self.check_identity()
        with self._signals(install_signals):
            try:
                while not self._stop.is_set():
                    free = self._wait_for_slot()
                    if free == 0:
                        continue
                    for lease in self._lease(free, self.lease_wait_ms):
                        self._start(lease)
            except _PollInterrupted:
                pass  # a stop cut the long-poll short; the loop condition ends the run
            except AdapterNodeUnreachableError:
                if not self._stop.is_set():  # a stop cuts the backoff short: not a failure
                    raise
            finally:
                self._stop.set()
                self._drain()
        return self.summary

    def run_once(self, *, wait_ms: int = 0) -> list[Outcome]:
        """Lease once (up to `concurrency` intents, long-polling `wait_ms`), run the handlers,
        post the receipts, and return what became of each lease. For tests and scripts."""
        self._require_handlers()
        _ = self.world_id
        self.check_identity()
        outcomes: list[Outcome] = []

        def settle(lease: Lease) -> None:
            outcomes.append(self.handle(lease))

        threads = []
        for lease in self._lease(self.concurrency, wait_ms):
            thread = threading.Thread(target=settle, args=(lease,))
            thread.start()
            threads.append(thread)
        for thread in threads:
            thread.join()
        return sorted(outcomes, key=lambda o: o.lease.intent)

    def put_blob(self, data: bytes) -> str:
        """Upload `data` to the world's CAS (`POST /v1/blobs`, retried like any request: a
        blob is named by its hash, so storing it twice is storing it once) and return its
        hash, for a receipt payload to name instead of inlining the bytes. Safe from handler
        threads. Raises `adapter.node_refused` (say `request.too_large` past the node's
        `blob_bytes_max`), `adapter.node_unreachable`, or `adapter.node_protocol` when the
        node answers with any hash but the one of `data`."""
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise AdapterConfigInvalidError(f"a blob is bytes, not {type(data).__name__}")
        data = bytes(data)
        answer = self._receipt_client.request("POST", "/v1/blobs", raw=data)
        stored = answer.get("hash") if isinstance(answer, dict) else None
        expected = str(hash_bytes(data))
        if stored != expected:
            raise AdapterNodeProtocolError(
                f"POST /v1/blobs answered hash {stored!r}; the blob's hash is {expected}"
            )
        return expected

    def stop(self) -> None:
        """Ask `run` to return after the running handlers finish. Safe from any thread."""
        self._stop.set()
        with self._slots:
            self._slots.notify_all()

    def close(self) -> None:
        self._pool.close()
        self._lease_client.close()
        self._receipt_client.close()

    def __enter__(self) -> Adapter:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def handle(self, lease: Lease, *, then_lease: bool = False) -> Outcome:
        """Run the lease's handler, sign its receipt and post it; never raises for a handler
        or node failure (the outcome says what happened). With `then_lease`, the receipt asks
        the node for one more lease of this adapter's effects, in `Outcome.next_leases`: the
        caller must run it (it is leased, and expires unsettled otherwise)."""
        started_ns = self._clock_ns()
        result = self._call(lease)
        # The host clock may step back; a receipt must not finish before it started.
        finished_ns = max(self._clock_ns(), started_ns)
        try:
            text, signature, result = self._signed(lease, result, started_ns, finished_ns)
        except ReceiptError as error:
            # Not the payload's fault (that became an error receipt): the lease itself cannot
            # make a valid receipt, say an intent that is not a hash. The node would refuse it.
            log.warning("no valid receipt can be made for %s: %s", lease.intent, error)
            outcome = Outcome(lease, result, unposted=error.code)
        else:
            # A stopping adapter takes no more work, even from a receipt's answer.
            ask = then_lease and not self._stop.is_set()
            outcome = self._post(lease, result, text, signature, then_lease=ask)
        with self._slots:
            self.summary.add(outcome)
        if self.on_outcome is not None:
            self.on_outcome(outcome)
        return outcome

    def progress(self, lease: Lease, fraction: float | None = None, message: str = "") -> bool:
        """Post a signed progress frame for `lease` (`Lease.progress`)."""
        if fraction is not None and not (
            isinstance(fraction, (int, float)) and 0.0 <= float(fraction) <= 1.0
        ):
            raise AdapterProgressInvalidError(f"fraction is {fraction!r}; it is in [0, 1]")
        if not isinstance(message, str) or len(message) > PROGRESS_MESSAGE_CHARS_MAX:
            raise AdapterProgressInvalidError(
                f"the message is over {PROGRESS_MESSAGE_CHARS_MAX} characters"
            )
        body = {
            "world": self.world_id,
            "intent": lease.intent,
            "adapter": self.name,
            "lease_id": lease.lease_id,
            "fraction": None if fraction is None else float(fraction),
            "message": message,
            "at_ns": time.time_ns(),
        }
        frame = {"body": body, "signature": {"$bytes": sign_body(self._seed, body).hex()}}
        try:
            self._receipt_client.request("POST", f"/v1/leases/{lease.lease_id}/progress", frame)
        except AdapterNodeRefusedError as error:
            if error.detail.get("node_code") == "lease.revoked":
                return False
            raise
        return True

    def renew(self, lease: Lease) -> bool:
        """Extend `lease` by the node's lease_ms, for work that runs long. False when the
        workflow cancelled the intent (`lease.revoked`): stop, since its receipt would be
        refused. A lease that expired meanwhile (`lease.unknown`) is still worth finishing:
        the first valid receipt settles the intent, so that raises the node's refusal."""
        try:
            self._receipt_client.request("POST", f"/v1/leases/{lease.lease_id}/renew", {})
        except AdapterNodeRefusedError as error:
            if error.detail.get("node_code") == "lease.revoked":
                return False
            raise
        return True

    # ---- helpers

    def _require_handlers(self) -> None:
        if not self._handlers:
            raise AdapterNoHandlersError(f"adapter {self.name} has no effect handlers")

    def _lease(self, max_leases: int, wait_ms: int) -> list[Lease]:
        request = {
            "adapter": self.name,
            "effects": self.effects,
            "max": min(max_leases, LEASE_BATCH_MAX),
            "wait_ms": wait_ms,
        }
        self._polling = True
        try:
            answer = self._lease_client.request(
                "POST", "/v1/leases", request, extra_timeout_s=wait_ms / 1000, stop=self._stop
            )
        finally:
            self._polling = False
        leases = answer.get("leases") if isinstance(answer, dict) else None
        if not isinstance(leases, list):
            raise AdapterNodeProtocolError("POST /v1/leases answered without a leases list")
        return [Lease.from_json(value) for value in leases]

    def _wait_for_slot(self) -> int:
        with self._slots:
            while self._running >= self.concurrency and not self._stop.is_set():
                self._slots.wait(timeout=1.0)
            return 0 if self._stop.is_set() else self.concurrency - self._running

    def _start(self, lease: Lease) -> None:
        with self._slots:
            self._running += 1
        self._pool.submit(self._run_one, lease)

    def _run_one(self, lease: Lease) -> None:
        """Settle `lease`, then each lease its receipt's answer brings, in this slot: a chain
        of intents (each opened by the previous receipt) goes on without a long-poll."""
        current: Lease | None = lease
        try:
            while current is not None:
                outcome = self.handle(current, then_lease=self.chain_leases)
                current = outcome.next_leases[0] if outcome.next_leases else None
        except Exception:  # a bug here must not leak the slot
            log.exception("settling %s failed", lease.intent)
        finally:
            with self._slots:
                self._running -= 1
                self._slots.notify_all()

    def _drain(self) -> None:
        deadline = time.monotonic() + self.stop_drain_s
        with self._slots:
            while self._running and not self._abandon.is_set():
                left = deadline - time.monotonic()
                if left <= 0:
                    log.warning(
                        "abandoning %d running handlers; their leases expire", self._running
                    )
                    return
                self._slots.wait(timeout=min(left, 0.1))

    def _call(self, lease: Lease) -> Result:
        handler = self._handlers.get(lease.effect)
        if handler is None:
            return Result.error(f"adapter {self.name} has no handler for {lease.effect}")
        try:
            with in_trace_context(lease.traceparent):
                result = handler(lease.params, replace(lease, reporter=self.progress))
        except Exception as error:
            return Result.error(f"{type(error).__name__}: {error}")
        if not isinstance(result, Result):
            return Result.error(f"the handler returned {type(result).__name__}, not a Result")
        return result

    def _signed(
        self, lease: Lease, result: Result, started_ns: int, finished_ns: int
    ) -> tuple[str, bytes, Result]:
        """The receipt body as JSON text and its signature. The body is signed in exactly the
        form the node decodes from that JSON, so the signature holds on the other side. A
        payload that cannot be sent (no JSON/CBOR form, or over the receipt limit) becomes an
        `error` receipt saying why, since the node would refuse it and leave the intent open."""
        try:
            return (*self._sign(lease, result, started_ns, finished_ns), result)
        except (cbor.CborError, TypeError, ValueError, OverflowError) as error:
            result = Result.error(f"the handler's payload cannot be sent: {error}")
        except ReceiptTooLargeError as error:
            result = Result.error(f"the handler's payload is too large: {error}")
        return (*self._sign(lease, result, started_ns, finished_ns), result)

    def _sign(
        self, lease: Lease, result: Result, started_ns: int, finished_ns: int
    ) -> tuple[str, bytes]:
        body = {
            "world": self.world_id,
            "intent": lease.intent,
            "status": result.status,
            "payload": result.payload,
            "adapter": self.name,
            "started_ns": started_ns,
            "finished_ns": finished_ns,
        }
        wire = cbor.to_json(body)
        text = json.dumps(wire, allow_nan=False)  # raises now, not inside the retry loop
        canonical = cbor.from_json(wire)
        # The kernel's own shape and size checks, so a receipt the node must refuse is caught
        # here, where it can still become an error receipt. Its size counts a signature's
        # length only, so a stand-in does; what is signed is the encoding it made.
        try:
            checked = parse(
                {"body": canonical, "signature": bytes(SIGNATURE_BYTES)},
                receipt_bytes_max=self.receipt_bytes_max,
            )
        except ReceiptMalformedError:
            cbor.encode(canonical)  # a body with no CBOR form (say a 70-bit integer): say why
            raise
        return text, sign_encoded(self._seed, checked.body_bytes)

    def _post(
        self, lease: Lease, result: Result, body: str, signature: bytes, *, then_lease: bool = False
    ) -> Outcome:
        """Post the receipt of `body` (its JSON text, as `_signed` made it: the body is not
        encoded again) and `signature`."""
        receipt = f'{{"body":{body},"signature":{{"$bytes":"{signature.hex()}"}}}}'
        ask = f',"lease":{json.dumps({"effects": self.effects, "max": 1})}' if then_lease else ""
        try:
            answer = self._receipt_client.request(
                "POST", "/v1/receipts", json_text=f'{{"receipt":{receipt}{ask}}}'
            )
        except AdapterNodeRefusedError as error:
            code = str(error.detail.get("node_code"))
            log.warning("the node refused the receipt of %s: %s", lease.intent, error)
            return Outcome(lease, result, refused=code, signature=signature)
        except AdapterError as error:
            log.warning("the receipt of %s was not posted: %s", lease.intent, error)
            return Outcome(lease, result, unposted=error.code, signature=signature)
        if not isinstance(answer, dict):
            return Outcome(lease, result, unposted=AdapterNodeProtocolError.code)
        seq = answer.get("seq")
        return Outcome(
            lease,
            result,
            seq=seq if isinstance(seq, int) else None,
            duplicate=bool(answer.get("duplicate")),
            delivered=bool(answer.get("delivered")),
            signature=signature,
            next_leases=_next_leases(answer) if then_lease else (),
        )

    @contextmanager
    def _signals(self, install: bool) -> Iterator[None]:
        if not install or threading.current_thread() is not threading.main_thread():
            yield
            return
        signals = (signal.SIGINT, signal.SIGTERM)
        previous = {number: signal.getsignal(number) for number in signals}
        for number in signals:
            signal.signal(number, self._on_signal)
        try:
            yield
        finally:
            for number, handler in previous.items():
                signal.signal(number, handler)

    def _on_signal(self, number: int, frame: FrameType | None) -> None:
        if self._stop.is_set():
            self._abandon.set()  # a second signal: stop waiting for running handlers
            return
        self._stop.set()
        if self._polling:
            raise _PollInterrupted


def _next_leases(answer: dict[str, Any]) -> tuple[Lease, ...]:
    """The leases a receipt's answer carries. A malformed one is left to expire (the node
    hands its intent out again): the receipt itself was settled."""
    listed = answer.get("leases")
    try:
        if not isinstance(listed, list):
            raise AdapterNodeProtocolError("the receipt's answer has no leases list")
        return tuple(Lease.from_json(value) for value in listed)
    except AdapterNodeProtocolError as error:
        log.warning("ignoring the leases of a receipt's answer: %s", error)
        return ()


class _HandlerPool:
    """Up to `size` handler threads, kept once started, so a lease costs a queue hand-off
    rather than a thread start. The adapter's slots keep at most `size` jobs running or
    queued, so once `size` threads exist every job has one. Daemon threads, so that a handler
    that never returns cannot keep a stopped adapter's process alive past the drain limit."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._jobs: queue.SimpleQueue[tuple[Callable[[Lease], None], Lease] | None] = (
            queue.SimpleQueue()
        )
        self._lock = threading.Lock()
        self._threads = 0

    def submit(self, run: Callable[[Lease], None], lease: Lease) -> None:
        """Run `run(lease)` on a pool thread."""
        with self._lock:
            start = self._threads < self._size
            self._threads += start
        self._jobs.put((run, lease))
        if start:
            threading.Thread(target=self._work, name="aos-adapter-handler", daemon=True).start()

    def close(self) -> None:
        """Let the threads end once the queued jobs are done."""
        with self._lock:
            threads, self._threads = self._threads, 0
        for _ in range(threads):
            self._jobs.put(None)

    def _work(self) -> None:
        while (job := self._jobs.get()) is not None:
            run, lease = job
            run(lease)


def _check_config(name: str, seed: bytes, node: str, concurrency: int, wait_ms: int) -> None:
    if not isinstance(name, str) or not name:
        raise AdapterConfigInvalidError("an adapter has a name (its defadapter's name)")
    if not isinstance(seed, bytes) or len(seed) != SEED_BYTES:
        raise AdapterConfigInvalidError(f"the seed is {SEED_BYTES} bytes")
    if not node.startswith(("http://", "https://")):
        raise AdapterConfigInvalidError(f"the node URL is http(s)://HOST:PORT, not {node!r}")
    if not 1 <= concurrency <= CONCURRENCY_MAX:
        raise AdapterConfigInvalidError(f"concurrency is 1..{CONCURRENCY_MAX}, not {concurrency}")
    if not 0 <= wait_ms <= LEASE_WAIT_MS_MAX:
        raise AdapterConfigInvalidError(f"lease_wait_ms is 0..{LEASE_WAIT_MS_MAX}, not {wait_ms}")


def _clip(message: str) -> str:
    if len(message) <= ERROR_MESSAGE_CHARS_MAX:
        return message
    return message[: ERROR_MESSAGE_CHARS_MAX - 3] + "..."
