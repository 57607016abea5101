"""A node: one world served to clients and adapters. This is what the HTTP API calls; every
method takes JSON-ready values (bytes as `{"$bytes": hex}`) and answers the response model of
its route (models.py), and every world access runs on the host thread (host.py).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aos.kernel import cbor, prefixes
from aos.kernel.governance import proposals
from aos.kernel.node import actions, models
from aos.kernel.node import read_model as views
from aos.kernel.node.audit import AuditLog
from aos.kernel.node.errors import (
    HumanDisabledError,
    LeaseAdapterNotAllowedError,
    LeaseAdapterUnknownError,
    LeaseEffectUnknownError,
    NodeLimitExceededError,
    RequestInvalidError,
    RequestTooLargeError,
    TaskAmbiguousError,
    TaskUnknownError,
)
from aos.kernel.node.host import Admission, WorldHost
from aos.kernel.node.human import (
    INBOX_FILE_NAME,
    TASK_STATUSES,
    HumanAdapter,
    TaskInbox,
    check_name,
    check_roles,
)
from aos.kernel.node.identities import Authority, IdentityStore
from aos.kernel.node.leases import Lease, LeaseManager, PublishedIntent, wait_for_leases
from aos.kernel.node.limits import NodeLimits
from aos.kernel.node.models import OperationRequest
from aos.kernel.node.progress import (
    ProgressForgedError,
    ProgressInvalidError,
    ProgressLog,
    authenticate_frame,
    parse_frame,
)
from aos.kernel.node.proposal_body import ProposalRequest
from aos.kernel.node.shadow_worker import ShadowUnavailableError, run_shadow
from aos.kernel.signing.request_auth import AdapterForbiddenError, RefusalLimiter, RequestVerifier
from aos.kernel.world.cells import STATUS_FAILED
from aos.kernel.world.errors import CellMissingError, KeyUnexpectedError
from aos.kernel.world.intent_view import intent_view, resolve_intent
from aos.kernel.world.receipts import ReceiptError
from aos.kernel.world.router import RouteError
from aos.kernel.world.world import RunReport, Settlement, World

TraceContext = Callable[[PublishedIntent], str | None]
"""The W3C `traceparent` of an intent's work, or None (flows/serve/tracing.py)."""


@dataclass(frozen=True)
class LeaseAsk:
    """A receipt request's `lease` member: lease up to `count` intents of `effects` (every
    effect the adapter may settle when empty) once the receipt is settled."""

    effects: list[str]
    count: int


class Node:
    """Host a world: `start` opens it on the host thread, `close` stops and closes it."""

    def __init__(
        self,
        opener: Callable[[], World],
        *,
        limits: NodeLimits | None = None,
        human: HumanAdapter | None = None,
        inbox_path: Path | None = None,
        inbox_sync: bool = True,
        world_path: Path | None = None,
        authority: Authority | None = None,
    ) -> None:
        self.limits = limits or NodeLimits()
        # Who may call it (spec/04 §9.8): by default the identities of its world directory.
        self.authority = authority or (
            Authority(IdentityStore.of_world(world_path), audit=AuditLog.of_world(world_path))
            if world_path is not None
            else Authority.in_memory()
        )
        self.world_path = world_path  # where a shadow worker finds the world
        self.human = human
        self.inbox = (
            TaskInbox(human.name, inbox_path, limits=human.limits, sync=inbox_sync)
            if human is not None
            else None
        )
        self.leases = LeaseManager(lease_ms=self.limits.lease_ms)
        self.host = WorldHost(
            self._opening(opener),
            self.leases,
            limits=self.limits,
            on_manifest=self._learn_effects,
            watcher=self.inbox,
        )
        # What each adapter may settle, learnt from the manifest (again when it changes).
        self._effects_of: dict[str, tuple[str, ...]] = {}
        self._effect_names: frozenset[str] = frozenset()
        # To check signed requests and progress frames off the host thread.
        self._adapter_keys: dict[str, bytes] = {}
        self.progress_log = ProgressLog()
        # What layers served beside the kernel (flows) say of their own cells and records,
        # for every read of this node (views.Derived).
        self.derived = views.Derived()
        # A layer that traces (flows/serve/tracing.py) names each lease's W3C trace context.
        self.trace_context: TraceContext | None = None
        self.verifier = RequestVerifier(
            world=lambda: self.world_id,
            keys=lambda: self._adapter_keys,
            skew_ms_max=self.limits.adapter_request_skew_ms_max,
            nonces_max=self.limits.adapter_nonces_max,
        )
        self.refusals = RefusalLimiter(
            refusals_max=self.limits.adapter_receipt_refusals_max,
            window_ms=self.limits.adapter_refusal_window_ms,
        )

    @classmethod
    def open_path(
        cls,
        path: str | os.PathLike[str],
        *,
        limits: NodeLimits | None = None,
        human: HumanAdapter | None = None,
        authority: Authority | None = None,
        **world_options: Any,
    ) -> Node:
        return cls(
            lambda: World.open(path, **world_options),
            limits=limits,
            human=human,
            inbox_path=Path(path) / INBOX_FILE_NAME,
            inbox_sync=bool(world_options.get("sync", True)),
            world_path=Path(path),
            authority=authority,
        )

    def _opening(self, opener: Callable[[], World]) -> Callable[[], World]:
        def open_world() -> World:
            world = opener()
            try:
                self._learn_manifest(world)
                if self.inbox is not None:
                    self.inbox.load()  # before the open intents are published
            except BaseException:
                world.close()
                raise
            return world

        return open_world

    def _learn_manifest(self, world: World) -> None:
        if self.human is not None:
            self.human.check(world.runtime.adapters)
        self._learn_effects(world)

    def _learn_effects(self, world: World) -> None:
        runtime = world.runtime
        effects_of: dict[str, list[str]] = {name: [] for name in runtime.adapters}
        for name, effect in sorted(runtime.effects.items()):
            for adapter in effect.adapters:
                if adapter in effects_of:
                    effects_of[adapter].append(name)
        self._effects_of = {k: tuple(v) for k, v in effects_of.items()}
        self._effect_names = frozenset(runtime.effects)
        self._adapter_keys = {n: a.public_key_bytes for n, a in runtime.adapters.items()}

    def start(self) -> Node:
        self.host.start()
        return self

    def close(self) -> None:
        self.leases.close()
        self.host.close()

    def __enter__(self) -> Node:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.close()

    @property
    def world_id(self) -> str:
        return self.host.world_id

    # -- the world ---------------------------------------------------------------------------

    async def info(self) -> models.WorldResponse:
        """`GET /v1/world`: the read layer's overview without the proposals."""
        info = await self.host.run(views.overview)
        del info["proposals"]
        info["leases"] = self.leases.counts()
        return models.WorldResponse.model_validate(info)

    async def send(
        self, schema: str, value_json: Any, idempotency_key: str | None = None
    ) -> models.SendResponse:
        """Ingress an event; it runs to idle (and is flushed) together with the other events
        and receipts queued with it (group commit, host.py). A repeat under an idempotency
        key answers the first admission; it still waits for the batch's flush, so the first
        admission it names is durable when the answer goes out."""
        value = cbor.from_json(value_json, "$.value")

        def admit(world: World) -> Admission[models.SendResponse]:
            try:
                admitted = world.ingress(schema, value, idempotency_key=idempotency_key)
            except RouteError as error:
                error.detail["rejected_seq"] = world.height  # journaled as ingress_rejected
                raise

            def answer(report: RunReport | None) -> models.SendResponse:
                assert report is not None  # an admitted event always runs
                return models.SendResponse(
                    seq=admitted.seq,
                    event_hash=str(admitted.event_hash),
                    deliveries=admitted.deliveries,
                    duplicate=admitted.duplicate,
                    report=actions.report_body(RunReport() if admitted.duplicate else report),
                )

            # A run that stops at the step budget: this event itself is durable (the run
            # flushed it), so tell its sender not to send it again.
            detail = {"seq": admitted.seq, "event_hash": str(admitted.event_hash)}
            return Admission(True, answer, detail)

        sent = await self.host.run_batched(admit)
        report = sent.report
        if report.faults or report.dropped:  # rare: read on the host thread, after the flush
            sent.problems = await self.host.run(lambda w: actions.problems(w, sent.seq, report))
        return sent

    async def state(
        self, workflow: str, key_json: Any, keyed_request: bool
    ) -> models.StateResponse:
        key = cbor.from_json(key_json, "$.key")

        def read(world: World) -> models.StateResponse:
            definition = world.runtime.workflow(workflow)
            if definition.key_schema is None and keyed_request:
                raise KeyUnexpectedError(f"{workflow} is not keyed; leave the key out")
            key_bytes = world.reader.key_bytes(workflow, key)
            state = world.reader.state(workflow, key)
            status = world.reader.status_of(workflow, key_bytes)
            if state is None and status != STATUS_FAILED:
                raise CellMissingError(f"{workflow} has no cell for that key")
            return models.StateResponse.model_validate(
                {
                    "workflow": workflow,
                    "key": cbor.to_json(key),
                    "status": status,
                    "state": cbor.to_json(state),
                }
            )

        return await self.host.run(read)

    # -- leases and receipts -----------------------------------------------------------------

    def adapters(self) -> models.AdaptersResponse:
        """The manifest's adapter identities: what `aos adapter run` checks its key against
        before it leases anything. Public keys only; nothing here is secret."""
        effects_of = self._effects_of  # replaced whole when the manifest changes
        return models.AdaptersResponse(
            adapters=[
                models.AdapterIdentity(
                    name=name, public_key=key.hex(), effects=list(effects_of.get(name, ()))
                )
                for name, key in sorted(self._adapter_keys.items())
            ]
        )

    async def lease(
        self, identity: str, adapter: str, effects: list[str], count: int, wait_ms: int
    ) -> models.LeaseResponse:
        """Lease as `adapter`, which must be the `identity` that signed the request."""
        _acting_as(identity, adapter, "$.adapter")
        within("wait_ms", wait_ms, self.limits.long_poll_ms_max, minimum=0)
        wanted = self._leasable(adapter, effects, count, "$")
        leases = await wait_for_leases(self.leases, adapter, wanted, count, wait_ms)
        return models.LeaseResponse(
            world_id=self.world_id,
            leases=[_lease(lease, self.trace_context) for lease in leases],
        )

    def _leasable(self, adapter: str, effects: list[str], count: int, at: str) -> list[str]:
        """The effects a lease request of `adapter` names (all it may settle when it names
        none), each checked against the manifest; `at` is where the request sits in the body."""
        within("max", count, self.limits.leases_per_request_max, at=at)
        allowed = self._effects_of.get(adapter)
        if allowed is None:
            raise LeaseAdapterUnknownError(f"no adapter {adapter} in the manifest")
        for index, effect in enumerate(effects):
            if effect not in self._effect_names:
                raise LeaseEffectUnknownError(
                    f"no effect {effect} in the manifest", path=f"{at}.effects[{index}]"
                )
            if effect not in allowed:
                raise LeaseAdapterNotAllowedError(
                    f"{adapter} may not settle {effect}", path=f"{at}.effects[{index}]"
                )
        return list(dict.fromkeys(effects)) if effects else list(allowed)

    def renew(self, lease_id: str, identity: str) -> models.RenewResponse:
        """Extend a lease `identity` holds; a lease whose intent the workflow cancelled is
        `lease.revoked` (the adapter should stop), one not held any more is `lease.unknown`."""
        return _renewed(self.leases.renew(lease_id, identity))

    def progress(self, lease_id: str, frame_json: Any, identity: str) -> models.RenewResponse:
        """Take a signed progress frame for a lease `identity` holds: it extends the lease like
        a renewal and is kept (progress.py); nothing is journaled and no workflow sees it."""
        frame = parse_frame(cbor.from_json(frame_json, "$"), lease_id=lease_id)
        authenticate_frame(frame, world_id=self.world_id, public_keys=self._adapter_keys)
        _acting_as(identity, str(frame.body["adapter"]), "$.body.adapter")
        published = self.leases.get(str(frame.body["intent"]))
        if published is not None and frame.body["adapter"] not in published.adapters:
            raise ProgressForgedError(f"{frame.body['adapter']} may not settle this intent")
        lease = self.leases.renew(lease_id, identity)
        if lease.intent.intent != frame.body["intent"]:
            raise ProgressInvalidError("the lease holds another intent", path="$.body.intent")
        self.progress_log.add(frame)
        return _renewed(lease)

    async def intent(self, intent: str) -> models.IntentResponse:
        """An intent: its `effect_intent` record while open, whether it was settled or
        cancelled (and at which seq) once closed, and its newest progress frames."""

        def read(world: World) -> dict[str, Any]:
            return intent_view(world.reader, resolve_intent(world.reader, intent))

        found = await self.host.run(read)
        frames = self.progress_log.frames(found["intent"])
        found["progress"] = [frame.to_json() for frame in frames]
        return models.IntentResponse.model_validate(found)

    async def settle(
        self, receipt_value: Any, identity: str, then_lease: LeaseAsk | None = None
    ) -> models.SettleResponse:
        """Settle a signed receipt posted by `identity` (who must be the receipt's adapter,
        when it names one); the origin cell runs (and everything is flushed) together with the
        other receipts and events queued with it (group commit, host.py). Every refusal is
        journaled, so an identity past its refusal budget is refused here first.

        With `then_lease`, the answer also carries up to `then_lease.count` leases for
        `identity`, taken on the host thread once the run is durable and its intents are
        published (an intent the receipt's step opened is among them): a sequential chain
        needs no long-poll between a receipt and its successor. A refused receipt leases
        nothing."""
        body = receipt_value.get("body") if isinstance(receipt_value, dict) else None
        named = body.get("adapter") if isinstance(body, dict) else None
        if isinstance(named, str):
            _acting_as(identity, named, "$.receipt.body.adapter")
        wanted: list[str] = []
        if then_lease is not None:
            wanted = self._leasable(identity, then_lease.effects, then_lease.count, "$.lease")
        self.refusals.check(identity)

        def admit(world: World) -> Admission[models.SettleResponse]:
            admission = _settled(world.settle(receipt_value))
            if then_lease is None:
                return admission
            return self._leasing_after(admission, identity, wanted, then_lease.count)

        try:
            return await self.host.run_batched(admit)
        except ReceiptError:
            self.refusals.refused(identity)
            raise

    def _leasing_after(
        self,
        admission: Admission[models.SettleResponse],
        adapter: str,
        effects: list[str],
        count: int,
    ) -> Admission[models.SettleResponse]:
        """`admission`, whose answer (made on the host thread after the batch's flush and
        publish) also leases for `adapter`."""

        def answer(report: RunReport | None) -> models.SettleResponse:
            settled = admission.answer(report)
            leases = self.leases.lease(adapter, effects, count)
            settled.leases = [_lease(lease, self.trace_context) for lease in leases]
            return settled

        return Admission(admission.runs, answer, admission.error_detail)

    async def put_blob(self, data: bytes) -> models.BlobResponse:
        """Store a blob in the world's CAS (durable when this returns): a large receipt
        payload's part, named by hash in the receipt that follows."""
        if len(data) > self.limits.blob_bytes_max:  # the HTTP app refuses it before reading
            raise RequestTooLargeError(
                f"the blob is {len(data)} bytes; the limit is {self.limits.blob_bytes_max}",
                limit=self.limits.blob_bytes_max,
                limit_name="blob_bytes_max",
            )

        def put(world: World) -> models.BlobResponse:
            return models.BlobResponse(hash=str(world.put_blob(data)))

        return await self.host.run(put)

    # -- human tasks -------------------------------------------------------------------------

    def _human(self) -> tuple[HumanAdapter, TaskInbox]:
        if self.human is None or self.inbox is None:
            raise HumanDisabledError("this node hosts no human adapter")
        return self.human, self.inbox

    async def tasks(
        self,
        limit: int,
        *,
        assignee: str | None = None,
        role: str | None = None,
        status: str | None = None,
    ) -> models.TasksResponse:
        """Open tasks, oldest first, that pass every filter given."""
        human, inbox = self._human()
        within("limit", limit, self.limits.tasks_per_request_max)
        found = inbox.select(
            self.leases.open_for(human.name, sys.maxsize),
            assignee=assignee,
            role=role,
            status=status,
            limit=limit,
        )
        return models.TasksResponse(
            adapter=human.name, tasks=[_task(t, shown) for t, shown in found]
        )

    async def task(self, intent: str) -> models.TaskBody:
        human, inbox = self._human()
        task = self._open_task(human, intent)
        return _task(task, inbox.shown(task))

    async def task_history(self, intent: str) -> models.TaskHistoryResponse:
        """A task's history, open or closed (while the inbox remembers it)."""
        _, inbox = self._human()
        return models.TaskHistoryResponse.model_validate(inbox.history(intent))

    def _open_task(self, human: HumanAdapter, intent: str) -> PublishedIntent:
        """An open task by its intent hash or a unique prefix of it."""
        task = self.leases.get(intent)
        if task is None or human.name not in task.adapters:
            tasks = {t.intent: t for t in self.leases.open_for(human.name, sys.maxsize)}
            found = prefixes.resolve(
                intent,
                tasks,
                what="open task",
                unknown=TaskUnknownError,
                ambiguous=TaskAmbiguousError,
                hashes=True,
            )
            return tasks[found]
        return task

    async def claim_task(self, intent: str, user: str, roles: list[str]) -> models.TaskBody:
        """Claim a task for `user`, who presents `roles` (idempotent for its holder)."""
        human, inbox = self._human()
        user = check_name(user, "$.user", human.limits)
        presented = check_roles(roles, human.limits)
        return await self._change_task(intent, lambda t: inbox.claim(t, user, presented))

    async def release_task(self, intent: str, user: str) -> models.TaskBody:
        human, inbox = self._human()
        user = check_name(user, "$.user", human.limits)
        return await self._change_task(intent, lambda t: inbox.release(t, user))

    async def reassign_task(
        self, intent: str, user: str, to: str | None, roles: list[str] | None = None
    ) -> models.TaskBody:
        """Assign a task to `to` (null: nobody): its holder may, or while it is not claimed
        anyone who may claim it (`roles`: the caller's; None: anyone at all). Handing it to
        someone else releases the claim."""
        human, inbox = self._human()
        user = check_name(user, "$.user", human.limits)
        to = None if to is None else check_name(to, "$.to", human.limits)
        return await self._change_task(intent, lambda t: inbox.reassign(t, user, to, roles))

    async def _change_task(
        self, intent: str, change: Callable[[PublishedIntent], None]
    ) -> models.TaskBody:
        human, inbox = self._human()

        def run(_: World) -> models.TaskBody:
            # On the host thread, like completions: a task settled just before is gone.
            task = self._open_task(human, intent)
            change(task)
            return _task(task, inbox.shown(task))

        return await self.host.run(run)

    async def complete_task(
        self,
        intent: str,
        status: str,
        payload_json: Any,
        user: str | None = None,
        roles: list[str] | None = None,
    ) -> models.SettleResponse:
        """Complete a task: a claimed one only by its holder (`user`); an unclaimed one, when
        `roles` are given (the caller's identity's), only by whoever may claim it."""
        human, inbox = self._human()
        if status not in TASK_STATUSES:
            raise RequestInvalidError(f"status is one of {TASK_STATUSES}", path="$.status")
        if user is not None:
            user = check_name(user, "$.user", human.limits)
        payload = cbor.from_json(payload_json, "$.payload")

        def admit(world: World) -> Admission[models.SettleResponse]:
            # Looked up on the host thread: a receipt settled just before is withdrawn by now.
            # (Within one batch, a second completion of the same task is a duplicate.)
            task = self._open_task(human, intent)
            inbox.completing(task, user, roles)
            receipt = human.receipt(world.world_id, task, status, payload)
            # The identity that completed it, journaled with the receipt (None: insecure-local).
            settlement = world.settle(receipt, by=user if roles is not None else None)
            if not settlement.duplicate:
                inbox.note_completion(task.intent, user, status)
            return _settled(settlement)

        return await self.host.run_batched(admit)

    # -- operations (kernel/world/operations.py) ---------------------------------------------

    async def operate(self, request: OperationRequest) -> models.OperationResponse:
        """Retry or reset a cell, or cancel an intent: journaled, then run to idle."""
        return await self.host.run(lambda world: actions.operate(world, request))

    # -- governance -------------------------------------------------------------------------

    async def gov_propose(self, request: ProposalRequest) -> models.ProposalResponse:
        """Journal a proposal (`aos gov propose` while the node serves the world), read and
        validated beforehand (kernel/node/proposal_body.py)."""

        def run(world: World) -> models.ProposalResponse:
            proposal = proposals.propose(
                world, request.patch, blobs=request.blobs, prepared=request.prepared
            )
            return actions.proposal_body(world, proposal)

        return await self.host.run(run)

    async def gov_shadow(self, proposal: str) -> models.ShadowResponse:
        """Shadow a proposal in a worker process (read-only, beside the writer), then journal
        its report here; answers the report with the record's sequence."""
        if self.world_path is None:
            raise ShadowUnavailableError("this node did not open its world from a folder")
        proposal = await self.host.run(lambda w: proposals.resolve_proposal(w, proposal))
        found = await run_shadow(self.world_path, proposal, timeout_ms=self.limits.shadow_ms_max)

        def record(world: World) -> models.ShadowResponse:
            report_hash = str(world.put_blob(found.report))
            proposals.record_shadow_raw(
                world, proposal, found.state_height, report_hash, found.summary
            )
            report = cbor.to_json(cbor.decode(found.report))
            return models.ShadowResponse(report=report, report_hash=report_hash, seq=world.height)

        return await self.host.run(record)

    async def gov_decide(
        self, proposal: str, *, approve: bool, approver: str, reason: str
    ) -> models.ProposalResponse:
        def run(world: World) -> models.ProposalResponse:
            return actions.decide(
                world, proposal, approve=approve, approver=approver, reason=reason
            )

        return await self.host.run(run)

    async def gov_apply(self, proposal: str) -> models.ApplyResponse:
        return await self.host.run(lambda world: actions.apply(world, proposal))

    # -- time --------------------------------------------------------------------------------

    async def advance_time(self, by_ns: int) -> models.TimeResponse:
        def advance(world: World) -> models.TimeResponse:
            return actions.time_answer(world, world.advance_time(by_ns))

        return await self.host.run(advance)

    async def jump_next_timer(self) -> models.TimeResponse:
        def jump(world: World) -> models.TimeResponse:
            return actions.time_answer(world, world.jump_next_timer())

        return await self.host.run(jump)


def _settled(settlement: Settlement) -> Admission[models.SettleResponse]:
    def answer(report: RunReport | None) -> models.SettleResponse:
        return models.SettleResponse(
            intent=settlement.intent,
            seq=settlement.seq,
            duplicate=settlement.duplicate,
            delivered=settlement.delivered,
            report=actions.report_body(report) if report is not None else None,
            leases=[],  # what a receipt request's `lease` asked for (Node.settle)
        )

    detail = {"intent": settlement.intent, "receipt_seq": settlement.seq}
    return Admission(not settlement.duplicate, answer, detail)


def _acting_as(identity: str, named: str, path: str) -> None:
    """An adapter acts only as itself."""
    if named != identity:
        raise AdapterForbiddenError(
            f"the request is signed by {identity}, not {named}", path=path, adapter=identity
        )


def within(name: str, value: int, maximum: int, *, minimum: int = 1, at: str = "$") -> None:
    """Refuse a request's `name` outside `[minimum, maximum]`: below is `request.invalid`,
    above is `node.limit_exceeded` (a node's limit, named in the error)."""
    if value < minimum:
        raise RequestInvalidError(f"{name} must be at least {minimum}", path=f"{at}.{name}")
    if value > maximum:
        raise NodeLimitExceededError(
            f"{name} is {value}; this node allows at most {maximum}",
            path=f"{at}.{name}",
            limit=maximum,
            value=value,
        )


def _origin(published: PublishedIntent) -> models.Origin:
    return models.Origin(workflow=published.workflow, key=cbor.to_json(published.key))


def _renewed(lease: Lease) -> models.RenewResponse:
    return models.RenewResponse(
        lease_id=lease.lease_id, intent=lease.intent.intent, expires_unix_ms=lease.expires_unix_ms
    )


def _lease(lease: Lease, trace_context: TraceContext | None) -> models.LeaseBody:
    published = lease.intent
    return models.LeaseBody(
        traceparent=None if trace_context is None else trace_context(published),
        lease_id=lease.lease_id,
        intent=published.intent,
        effect=published.effect,
        params=cbor.to_json(published.params),
        # The intent hash names this piece of work forever (it survives restarts and
        # re-leases), so it is what the adapter passes to the outside system.
        idempotency_key=published.intent,
        issuer_ref=published.issuer_ref,
        origin=_origin(published),
        expires_unix_ms=lease.expires_unix_ms,
    )


def _task(task: PublishedIntent, shown: dict[str, Any]) -> models.TaskBody:
    """A task as the inbox shows it (`shown`: its title, assignee, roles, claim...)."""
    return models.TaskBody.model_validate(
        {
            "intent": task.intent,
            "effect": task.effect,
            "params": cbor.to_json(task.params),
            "issuer_ref": task.issuer_ref,
            "origin": _origin(task),
            "seq": task.seq,
            "published_unix_ms": task.published_unix_ms,
            **shown,
        }
    )
