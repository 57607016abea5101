"""WorldClient: one interface to a world, whether this process opens it or a node serves it
(DESIGN §2; spec/04 §11). The `aos` commands pick one and render what it answers.

    client = LocalWorld(path, token=...)    # reads open the world read-only (they work beside
                                            # a node that serves it); writes open it for
                                            # writing, or go through the node that serves it
    client = NodeWorld(url, token=...)      # the node's HTTP API (spec/04 §9)
    client.send(schema, value)              # -> SendResponse, the same from either

Both answer the typed models of kernel/node/models.py, and a refusal is the same `AosError`
code either way: the in-process client runs the same kernel functions the node's routes run
(ids by unique prefix, keys as typed, the faults and drops of a run), and the HTTP client
raises the node's error body as an error of its code (`kernel/node/errors.refused`).

Every request to a node carries the caller's token (`Authorization: Bearer`, spec/04 §9.8)
and is verified as kernel/node/tls.py says for `https://` (`AOS_CA`, `AOS_CLIENT_CERT/KEY`).
One `NodeConnection` keeps one HTTP connection pool for its life, made at its first request.
The flows layer extends both clients with the flow operations (flows/serve/flow_client.py).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, Self, TypeVar

from aos.kernel import cbor
from aos.kernel.node import actions, models
from aos.kernel.node.errors import NodeUnreachableError, refused

if TYPE_CHECKING:
    import httpx

    from aos.kernel.world.world import World

T = TypeVar("T")

REQUEST_TIMEOUT_S = 60.0
"""How long one request may take (a write runs the world to idle before it is answered)."""
CONNECTIONS_MAX = 100
"""Connections one `NodeConnection` opens to its node at once (httpx's default)."""
IDLE_CONNECTIONS_MAX = 20
"""Idle connections it keeps for reuse (httpx's default)."""
SHADOW_TIMEOUT_S = 900.0
"""How long a shadow may take over HTTP (the node bounds it by its own `shadow_ms_max`, 600 s
by default)."""

Progress = Callable[[int, int], None]


class WorldClient(Protocol):
    """What a client asks of a world, in process or through its node."""

    def send(
        self, schema: str, value: Any, *, idempotency_key: str | None = None
    ) -> models.SendResponse:
        """Ingress one event and run the world to idle; its faults and drops listed."""
        ...

    def operate(self, request: models.OperationRequest) -> models.OperationResponse:
        """Retry or reset a cell (its key as typed in `key_text`, or as a value in `key`), or
        cancel an open intent (its hash or a unique prefix)."""
        ...

    def intent(self, intent: str) -> models.IntentResponse:
        """An intent by its hash, or an open one by a unique prefix."""
        ...

    def advance_time(self, by_ns: int) -> models.TimeResponse: ...

    def jump_next_timer(self) -> models.TimeResponse: ...

    def propose(
        self, patch: Any, modules: list[bytes], expected_hash: str | None
    ) -> models.ProposalResponse: ...

    def shadow(self, proposal: str, progress: Progress | None = None) -> models.ShadowResponse:
        """Shadow a proposal (its id or a unique prefix) and journal the report."""
        ...

    def decide(
        self, proposal: str, *, approve: bool, approver: str, reason: str
    ) -> models.ProposalResponse: ...

    def apply(self, proposal: str) -> models.ApplyResponse: ...

    def close(self) -> None: ...

    def __enter__(self) -> Self: ...

    def __exit__(self, *_: object) -> None: ...


class _Closing(ABC):
    """A client used in a `with` block closes when the block ends."""

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    @abstractmethod
    def close(self) -> None:
        """Let go of what the client holds (a node's connection pool)."""


# --------------------------------------------------------------------------------------------
# Through a node


class NodeConnection:
    """One node's HTTP API: a connection pool, the caller's token, TLS as configured."""

    def __init__(
        self, url: str, *, token: str | None = None, timeout_s: float = REQUEST_TIMEOUT_S
    ) -> None:
        self.url = url.rstrip("/")
        self.token = token
        self.timeout_s = timeout_s
        self._http: httpx.Client | None = None

    def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        params: dict[str, Any] | None = None,
        timeout_s: float | None = None,
        cbor_body: Any = None,
    ) -> Any:
        """One request (`body` as JSON, or `cbor_body` as canonical CBOR); the answer's JSON,
        or the node's error raised as an error of its code."""
        import httpx  # only commands that talk to a node pay for it

        if self._http is None:
            headers = {} if self.token is None else {"authorization": f"Bearer {self.token}"}
            from aos.kernel.node.limits import CLIENT_IDLE_CONNECTION_S
            from aos.kernel.node.tls import client_verify

            self._http = httpx.Client(
                timeout=self.timeout_s,
                verify=client_verify(self.url),
                headers=headers,
                limits=httpx.Limits(
                    max_connections=CONNECTIONS_MAX,
                    max_keepalive_connections=IDLE_CONNECTIONS_MAX,
                    keepalive_expiry=CLIENT_IDLE_CONNECTION_S,  # before the node lets go
                ),
            )
        content, headers = None, {}
        if cbor_body is not None:
            content = cbor.encode(cbor_body)
            headers["content-type"] = "application/cbor"
        try:
            response = self._http.request(
                method,
                self.url + path,
                json=body if content is None else None,
                content=content,
                headers=headers,
                params={k: v for k, v in (params or {}).items() if v is not None},
                timeout=timeout_s or self.timeout_s,
            )
        except httpx.HTTPError as error:
            raise NodeUnreachableError(f"cannot reach {self.url}: {error}") from None
        try:
            found = response.json() if response.content else None
        except ValueError:
            found = None
        if response.is_success and found is not None:
            return found
        answer = found.get("error") if isinstance(found, dict) else None
        raise refused(answer if isinstance(answer, dict) else {}, f"HTTP {response.status_code}")

    def close(self) -> None:
        if self._http is not None:
            self._http.close()
            self._http = None


class NodeWorld(_Closing):
    """A world through the node that serves it (spec/04 §9.3)."""

    def __init__(self, url: str, *, token: str | None = None) -> None:
        self.node = NodeConnection(url, token=token)

    @property
    def url(self) -> str:
        return self.node.url

    def send(
        self, schema: str, value: Any, *, idempotency_key: str | None = None
    ) -> models.SendResponse:
        request = {"schema": schema, "value": value, "idempotency_key": idempotency_key}
        return models.SendResponse.model_validate(self.node.call("POST", "/v1/events", request))

    def operate(self, request: models.OperationRequest) -> models.OperationResponse:
        body = request.model_dump(exclude_none=True)
        found = self.node.call("POST", "/v1/operations", body)
        return models.OperationResponse.model_validate(found)

    def intent(self, intent: str) -> models.IntentResponse:
        found = self.node.call("GET", f"/v1/intents/{intent}")
        return models.IntentResponse.model_validate(found)

    def advance_time(self, by_ns: int) -> models.TimeResponse:
        found = self.node.call("POST", "/v1/time/advance", {"by_ns": by_ns})
        return models.TimeResponse.model_validate(found)

    def jump_next_timer(self) -> models.TimeResponse:
        return models.TimeResponse.model_validate(self.node.call("POST", "/v1/time/jump-next", {}))

    def propose(
        self, patch: Any, modules: list[bytes], expected_hash: str | None
    ) -> models.ProposalResponse:
        request = {"patch": patch, "modules": modules, "expected_hash": expected_hash}
        found = self.node.call("POST", "/v1/gov/proposals", cbor_body=request)
        return models.ProposalResponse.model_validate(found)

    def shadow(self, proposal: str, progress: Progress | None = None) -> models.ShadowResponse:
        del progress  # the node shadows in a worker process of its own
        found = self.node.call("POST", f"/v1/gov/{proposal}/shadow", {}, timeout_s=SHADOW_TIMEOUT_S)
        return models.ShadowResponse.model_validate(found)

    def decide(
        self, proposal: str, *, approve: bool, approver: str, reason: str
    ) -> models.ProposalResponse:
        request = {"approve": approve, "approver": approver, "reason": reason}
        found = self.node.call("POST", f"/v1/gov/{proposal}/decision", request)
        return models.ProposalResponse.model_validate(found)

    def apply(self, proposal: str) -> models.ApplyResponse:
        found = self.node.call("POST", f"/v1/gov/{proposal}/apply", {})
        return models.ApplyResponse.model_validate(found)

    def close(self) -> None:
        self.node.close()


# --------------------------------------------------------------------------------------------
# In process


class LocalWorld(_Closing):
    """A world directory opened in this process: read-only for reads, so they work while a
    node serves it; for a write opened for writing, or, while a node serves it (its owner
    record, kernel/node/owner.py), through that node (`NodeWorld`), since a world has one
    writer. `node_url` names the node to write through instead."""

    def __init__(
        self, path: str | Path, *, token: str | None = None, node_url: str | None = None
    ) -> None:
        self.path = Path(path)
        self.token = token
        self.node_url = node_url
        self._served: NodeWorld | None = None

    @contextmanager
    def reading(self) -> Iterator[World]:
        """The world as of its last commit, read-only."""
        from aos.kernel.world.world import World

        with World.reading(self.path) as world:
            yield world

    @contextmanager
    def writing(self) -> Iterator[World]:
        """The world opened for writing (`store.locked` while another process holds it)."""
        from aos.kernel.world.world import World

        world = World.open(self.path)
        try:
            yield world
        finally:
            world.close()

    def served(self) -> NodeWorld | None:
        """The node that serves the world (or the one `node_url` names), if any."""
        if self._served is None:
            from aos.kernel.node.owner import owner_url

            url = self.node_url or owner_url(self.path)
            self._served = None if url is None else self.node_for(url)
        return self._served

    def node_for(self, url: str) -> NodeWorld:
        """The client of a node that serves this world (a subclass's own kind)."""
        return NodeWorld(url, token=self.token)

    def write(self, through: Callable[[NodeWorld], T], here: Callable[[World], T]) -> T:
        """`through` the serving node if one serves the world, else `here` on it opened for
        writing."""
        node = self.served()
        if node is not None:
            return through(node)
        with self.writing() as world:
            return here(world)

    def send(
        self, schema: str, value: Any, *, idempotency_key: str | None = None
    ) -> models.SendResponse:
        return self.write(
            lambda node: node.send(schema, value, idempotency_key=idempotency_key),
            lambda world: actions.send(world, schema, value, idempotency_key),
        )

    def operate(self, request: models.OperationRequest) -> models.OperationResponse:
        return self.write(lambda node: node.operate(request), lambda w: actions.operate(w, request))

    def intent(self, intent: str) -> models.IntentResponse:
        """From the node while one serves the world (it keeps the progress frames)."""
        node = self.served()
        if node is not None:
            return node.intent(intent)
        from aos.kernel.world.intent_view import intent_view, resolve_intent

        with self.reading() as world:
            found = intent_view(world.reader, resolve_intent(world.reader, intent))
        return models.IntentResponse.model_validate({**found, "progress": [], "served": False})

    def advance_time(self, by_ns: int) -> models.TimeResponse:
        return self.write(
            lambda node: node.advance_time(by_ns),
            lambda world: actions.time_answer(world, world.advance_time(by_ns)),
        )

    def jump_next_timer(self) -> models.TimeResponse:
        return self.write(
            lambda node: node.jump_next_timer(),
            lambda world: actions.time_answer(world, world.jump_next_timer()),
        )

    def propose(
        self, patch: Any, modules: list[bytes], expected_hash: str | None
    ) -> models.ProposalResponse:
        return self.write(
            lambda node: node.propose(patch, modules, expected_hash),
            lambda world: actions.propose(world, patch, modules, expected_hash),
        )

    def shadow(self, proposal: str, progress: Progress | None = None) -> models.ShadowResponse:
        """Replayed here read-only (beside a node, too), then journaled by the writer."""
        node = self.served()
        if node is not None:
            return node.shadow(proposal)
        from aos.kernel.governance import proposals, shadow

        with self.reading() as world:
            proposal = proposals.resolve_proposal(world, proposal)
        report = shadow.shadow(self.path, proposal, progress=progress)
        with self.writing() as world:
            proposals.record_shadow(world, proposal, report)
            recorded = world.proposals[proposal]["shadow"]
            return models.ShadowResponse(
                report=cbor.to_json(report.to_value()),
                report_hash=str(recorded["report"]),
                seq=world.height,
            )

    def decide(
        self, proposal: str, *, approve: bool, approver: str, reason: str
    ) -> models.ProposalResponse:
        return self.write(
            lambda node: node.decide(proposal, approve=approve, approver=approver, reason=reason),
            lambda world: actions.decide(
                world, proposal, approve=approve, approver=approver, reason=reason
            ),
        )

    def apply(self, proposal: str) -> models.ApplyResponse:
        return self.write(lambda node: node.apply(proposal), lambda w: actions.apply(w, proposal))

    def close(self) -> None:
        if self._served is not None:
            self._served.close()
