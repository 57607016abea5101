"""A per-caller rate limit on the node's write routes (spec/04 §9.8): a token bucket per
caller, refilled at `write_rate_per_s`, holding at most `write_burst_max` requests. A write
(any method but GET, HEAD and OPTIONS) that finds its caller's bucket empty is refused before
its body is read: 429 `request.rate_limited`, with `Retry-After`.

Who the caller is, is `caller_key`: the identity a request's token proved, else the peer's
address. Buckets are kept for at most `rate_callers_max`
callers; past it the one idle longest is forgotten (it comes back with a full bucket, which
is what it would have refilled to anyway unless it was recent).
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import Any

from aos.kernel.node.access import PRINCIPAL_KEY
from aos.kernel.node.errors import RateLimitedError, answer_early

RATE_CALLERS_MAX_DEFAULT = 10_000
"""Callers whose buckets are remembered."""
READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def caller_key(scope: Scope) -> str:
    """Who a request is from, for its rate limit: the identity its token proved (the access
    guard, which runs first, leaves it in the scope), else the peer's address. An adapter's
    name is not proved until its route checks the signature, so it counts by address: a
    forger cannot empty a real adapter's bucket."""
    principal = scope.get(PRINCIPAL_KEY)
    if principal is not None and principal.kind == "identity":
        return f"identity:{principal.name}"
    client = scope.get("client")
    return f"peer:{client[0]}" if client else "-"


@dataclass
class _Bucket:
    tokens: float
    at_s: float


class TokenBuckets:
    """One bucket per caller, at most `callers_max` of them (the longest idle forgotten)."""

    def __init__(
        self,
        rate_per_s: int,
        burst_max: int,
        callers_max: int = RATE_CALLERS_MAX_DEFAULT,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.rate_per_s = rate_per_s
        self.burst_max = burst_max
        self.callers_max = callers_max
        self._clock = clock
        self._buckets: OrderedDict[str, _Bucket] = OrderedDict()

    def take(self, caller: str) -> float:
        """Spend one token of `caller`'s: 0.0 when there was one, else the seconds until
        there will be (and nothing is spent)."""
        now = self._clock()
        bucket = self._buckets.pop(caller, None)
        if bucket is None:
            bucket = _Bucket(float(self.burst_max), now)
            if len(self._buckets) >= self.callers_max:
                self._buckets.popitem(last=False)
        self._buckets[caller] = bucket  # the most recent, last
        bucket.tokens = min(
            float(self.burst_max), bucket.tokens + (now - bucket.at_s) * self.rate_per_s
        )
        bucket.at_s = now
        if bucket.tokens >= 1.0:
            bucket.tokens -= 1.0
            return 0.0
        return (1.0 - bucket.tokens) / self.rate_per_s

    def __len__(self) -> int:
        return len(self._buckets)


class WriteRateLimit:
    """ASGI middleware: each caller's writes through its token bucket."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        buckets: TokenBuckets,
        key: Callable[[Scope], str] = caller_key,
    ) -> None:
        self.app = app
        self.buckets = buckets
        self.key = key

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope.get("method") not in READ_METHODS:
            wait_s = self.buckets.take(self.key(scope))
            if wait_s > 0:
                await _refuse(send, wait_s, self.buckets)
                return
        await self.app(scope, receive, send)


async def _refuse(send: Send, wait_s: float, buckets: TokenBuckets) -> None:
    error = RateLimitedError(
        f"more than {buckets.rate_per_s} writes a second (write_rate_per_s)",
        limit=buckets.rate_per_s,
        limit_name="write_rate_per_s",
        retry_after_ms=int(wait_s * 1000) + 1,
    )
    retry_after_s = max(1, math.ceil(wait_s))
    await answer_early(send, error, ((b"retry-after", str(retry_after_s).encode()),))
