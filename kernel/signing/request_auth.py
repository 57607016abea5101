"""Signed adapter requests (spec/10-adapters.md §2.1): who is asking, and not for the second time.

Every request an adapter makes that writes or reads intent params (leases, renewals, progress,
receipts, blobs) carries four headers:

    aos-adapter       the adapter's name (a `defadapter` of the world's manifest)
    aos-timestamp-ms  the adapter host's wall clock, Unix milliseconds
    aos-nonce         16 random bytes as 32 lowercase hex digits, never reused
    aos-signature     Ed25519 (128 hex digits) over the canonical CBOR of
                      {world, adapter, method, target, body, at_ms, nonce}

with `target` the path (and `?query`, when there is one), `body` the BLAKE3 hash of the raw
body bytes and `world` the world id, so a request signed for one world, route or body is
worthless for another. The node checks the signature with the manifest's public key, refuses
a timestamp more than `skew_ms_max` away from its own clock, and remembers each nonce until
its timestamp leaves that window (at most `nonces_max` per identity), so a captured request
cannot be sent again. The node reads clocks here: this is the host, not the stepping kernel.
"""

from __future__ import annotations

import heapq
import secrets
import threading
import time
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx

from aos.kernel.errors import AosError
from aos.kernel.hashing import hash_bytes
from aos.kernel.signing.signatures import sign_body, verify_body

HEADER_ADAPTER = "aos-adapter"
HEADER_TIMESTAMP = "aos-timestamp-ms"
HEADER_NONCE = "aos-nonce"
HEADER_SIGNATURE = "aos-signature"
NONCE_BYTES = 16
ADAPTER_NAME_CHARS_MAX = 200
ADAPTER_REQUEST_SKEW_MS_MAX_DEFAULT = 30_000
"""How far a signed request's timestamp may be from the node's clock, either way."""
ADAPTER_NONCES_MAX_DEFAULT = 100_000
"""Nonces remembered per identity, each until its timestamp leaves the skew window: about
3 300 signed requests per second per identity, sustained, at the default skew (some 25 MB)."""

_HEX = frozenset("0123456789abcdef")


class AdapterAuthError(AosError):
    code = "adapter.auth"


class AdapterUnauthenticatedError(AdapterAuthError):
    code = "adapter.unauthenticated"
    hint = (
        "adapter requests are signed with the adapter's key (aos-adapter, aos-timestamp-ms, "
        "aos-nonce, aos-signature headers); the SDK and `aos adapter run` do it"
    )


class AdapterClockSkewedError(AdapterAuthError):
    code = "adapter.clock_skewed"
    hint = "the adapter host's clock is too far from the node's (adapter_request_skew_ms_max)"


class AdapterReplayedError(AdapterAuthError):
    code = "adapter.replayed"
    hint = "a signed request is good once: sign every request with a fresh nonce"


class AdapterForbiddenError(AdapterAuthError):
    code = "adapter.forbidden"
    hint = "an adapter acts only as itself, on leases it holds, for effects it may settle"


class AdapterNoncesFullError(AdapterAuthError):
    code = "adapter.nonces_full"
    hint = "this identity sent more requests than adapter_nonces_max within the skew window"


class AdapterRateLimitedError(AdapterAuthError):
    code = "adapter.rate_limited"
    hint = (
        "this identity had too many receipts refused (adapter_receipt_refusals_max per "
        "adapter_refusal_window_ms); retry after the window"
    )


def signed_value(
    *, world: str, adapter: str, method: str, target: str, body: bytes, at_ms: int, nonce: str
) -> dict[str, Any]:
    """What a request signature covers (both sides build it the same way)."""
    return {
        "world": world,
        "adapter": adapter,
        "method": method.upper(),
        "target": target,
        "body": str(hash_bytes(body)),
        "at_ms": at_ms,
        "nonce": nonce,
    }


def request_headers(
    seed: bytes, *, world: str, adapter: str, method: str, target: str, body: bytes, at_ms: int
) -> dict[str, str]:
    """The four auth headers of one request, with a fresh nonce."""
    nonce = secrets.token_hex(NONCE_BYTES)
    value = signed_value(
        world=world, adapter=adapter, method=method, target=target, body=body, at_ms=at_ms,
        nonce=nonce,
    )  # fmt: skip
    return {
        HEADER_ADAPTER: adapter,
        HEADER_TIMESTAMP: str(at_ms),
        HEADER_NONCE: nonce,
        HEADER_SIGNATURE: sign_body(seed, value).hex(),
    }


def _target(url: httpx.URL) -> str:
    query = url.query.decode("ascii")
    return url.path + (f"?{query}" if query else "")


class AdapterAuth(httpx.Auth):
    """Signs every request of an httpx client as `adapter` for world `world`: what the SDK
    uses, and what a test or a script holding a key file can pass as `auth=`. A `world`
    callable that answers None (the id is not known yet) leaves the request unsigned: only
    the public `GET /v1/health` is sent then, which answers the id."""

    requires_request_body = True

    def __init__(
        self,
        adapter: str,
        seed: bytes,
        world: str | Callable[[], str | None],
        *,
        clock_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
    ) -> None:
        self.adapter = adapter
        self._seed = seed
        self._world = world
        self._clock_ms = clock_ms

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        request.headers.update(self.headers_for(request.method, request.url, request.content))
        yield request

    def headers_for(self, method: str, url: httpx.URL, body: bytes) -> dict[str, str]:
        """The auth headers of one request to `url` with `body` (a fresh nonce each time), or
        none while the world id is not known. For a client that builds its requests' headers
        in one go (the SDK's), rather than through `auth=`."""
        world = self._world if isinstance(self._world, str) else self._world()
        if world is None:
            return {}
        return request_headers(
            self._seed,
            world=world,
            adapter=self.adapter,
            method=method,
            target=_target(url),
            body=body,
            at_ms=self._clock_ms(),
        )


@dataclass
class _Seen:
    """One identity's nonces, each until its expiry (ms)."""

    expiries: dict[str, int] = field(default_factory=dict)
    order: list[tuple[int, str]] = field(default_factory=list)  # a heap by expiry

    def forget_before(self, now_ms: int) -> None:
        while self.order and self.order[0][0] < now_ms:
            _, nonce = heapq.heappop(self.order)
            self.expiries.pop(nonce, None)


class RequestVerifier:
    """The node's side: who signed a request, refusing forgeries, stale and replayed ones.
    Thread-safe (requests are checked on the event loop, the manifest changes on the host)."""

    def __init__(
        self,
        *,
        world: Callable[[], str],
        keys: Callable[[], Mapping[str, bytes]],
        skew_ms_max: int = ADAPTER_REQUEST_SKEW_MS_MAX_DEFAULT,
        nonces_max: int = ADAPTER_NONCES_MAX_DEFAULT,
        clock_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
    ) -> None:
        self._world = world
        self._keys = keys
        self.skew_ms_max = skew_ms_max
        self.nonces_max = nonces_max
        self._clock_ms = clock_ms
        self._lock = threading.Lock()
        self._seen: dict[str, _Seen] = {}

    def verify(self, *, method: str, target: str, body: bytes, headers: Mapping[str, str]) -> str:
        """The adapter that signed this request; raises (and remembers nothing) otherwise."""
        adapter, at_ms, nonce, signature = _parse_headers(headers)
        key = self._keys().get(adapter)
        if key is None:
            raise AdapterUnauthenticatedError(
                f"no adapter {adapter} in the world's manifest", adapter=adapter
            )
        now_ms = self._clock_ms()
        if abs(now_ms - at_ms) > self.skew_ms_max:
            raise AdapterClockSkewedError(
                f"the request is stamped {at_ms - now_ms} ms from the node's clock; at most "
                f"{self.skew_ms_max} ms either way (adapter_request_skew_ms_max)",
                skew_ms=at_ms - now_ms,
                limit=self.skew_ms_max,
            )
        value = signed_value(
            world=self._world(), adapter=adapter, method=method, target=target, body=body,
            at_ms=at_ms, nonce=nonce,
        )  # fmt: skip
        if not verify_body(key, value, signature):
            raise AdapterUnauthenticatedError(
                f"the signature is not {adapter}'s over this request", adapter=adapter
            )
        self._remember(adapter, nonce, at_ms + self.skew_ms_max, now_ms)
        return adapter

    def _remember(self, adapter: str, nonce: str, expiry_ms: int, now_ms: int) -> None:
        with self._lock:
            seen = self._seen.setdefault(adapter, _Seen())
            seen.forget_before(now_ms)
            if nonce in seen.expiries:
                raise AdapterReplayedError(f"{adapter} sent nonce {nonce} before", adapter=adapter)
            if len(seen.expiries) >= self.nonces_max:
                raise AdapterNoncesFullError(
                    f"{adapter} has {self.nonces_max} requests within the skew window",
                    limit=self.nonces_max,
                )
            seen.expiries[nonce] = expiry_ms
            heapq.heappush(seen.order, (expiry_ms, nonce))

    def nonces_of(self, adapter: str) -> int:
        with self._lock:
            seen = self._seen.get(adapter)
            return 0 if seen is None else len(seen.expiries)


def _parse_headers(headers: Mapping[str, str]) -> tuple[str, int, str, bytes]:
    adapter = headers.get(HEADER_ADAPTER)
    at = headers.get(HEADER_TIMESTAMP)
    nonce = headers.get(HEADER_NONCE)
    signature = headers.get(HEADER_SIGNATURE)
    if adapter is None or at is None or nonce is None or signature is None:
        raise AdapterUnauthenticatedError(
            "the request is not signed (aos-adapter, aos-timestamp-ms, aos-nonce, aos-signature)"
        )
    if not adapter or len(adapter) > ADAPTER_NAME_CHARS_MAX:
        raise AdapterUnauthenticatedError(f"aos-adapter is 1..{ADAPTER_NAME_CHARS_MAX} characters")
    if not at.isascii() or not at.isdigit() or len(at) > 16:
        raise AdapterUnauthenticatedError("aos-timestamp-ms is Unix milliseconds, in digits")
    if len(nonce) != 2 * NONCE_BYTES or not set(nonce) <= _HEX:
        raise AdapterUnauthenticatedError(f"aos-nonce is {2 * NONCE_BYTES} lowercase hex digits")
    if len(signature) != 128 or not set(signature) <= _HEX:
        raise AdapterUnauthenticatedError("aos-signature is 128 lowercase hex digits")
    return adapter, int(at), nonce, bytes.fromhex(signature)


ADAPTER_RECEIPT_REFUSALS_MAX_DEFAULT = 100
"""Refused receipts (each one journaled) an identity may cause per window."""
ADAPTER_REFUSAL_WINDOW_MS_DEFAULT = 60_000


class RefusalLimiter:
    """Refused receipts per identity within a sliding window: past `refusals_max`, the node
    refuses that identity's receipts before the world sees them (nothing journaled) until the
    oldest refusal leaves the window. Bounded: at most `refusals_max` times per identity, and
    identities are the manifest's adapters."""

    def __init__(
        self,
        *,
        refusals_max: int = ADAPTER_RECEIPT_REFUSALS_MAX_DEFAULT,
        window_ms: int = ADAPTER_REFUSAL_WINDOW_MS_DEFAULT,
        clock_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
    ) -> None:
        self.refusals_max = refusals_max
        self.window_ms = window_ms
        self._clock_ms = clock_ms
        self._lock = threading.Lock()
        self._times: dict[str, list[int]] = {}

    def check(self, adapter: str) -> None:
        """Raise `adapter.rate_limited` while `adapter` is over its budget."""
        now_ms = self._clock_ms()
        with self._lock:
            times = self._recent(adapter, now_ms)
            if len(times) >= self.refusals_max:
                raise AdapterRateLimitedError(
                    f"{adapter} had {len(times)} receipts refused within "
                    f"{self.window_ms} ms (adapter_receipt_refusals_max)",
                    limit=self.refusals_max,
                    retry_after_ms=times[0] + self.window_ms - now_ms,
                )

    def refused(self, adapter: str) -> None:
        now_ms = self._clock_ms()
        with self._lock:
            times = self._recent(adapter, now_ms)
            times.append(now_ms)
            del times[: max(0, len(times) - self.refusals_max)]

    def _recent(self, adapter: str, now_ms: int) -> list[int]:
        times = self._times.setdefault(adapter, [])
        while times and times[0] <= now_ms - self.window_ms:
            times.pop(0)
        return times
