"""Authoring workflows: `Workflow`, its event handlers, the step `Context`, and `export`.

    counter = Workflow("demo/Counter@1", state=CounterState)

    @counter.on("demo/CounterEvent@1", Increment | Reset)
    def on_event(state: CounterState, event: Increment | Reset, ctx: Context) -> CounterState:
        ...
        ctx.emit("demo/CounterThreshold@1", {...})
        return state

    WitWorld = export(counter)   # the component's `step(input) -> output`

A handler is a pure function of (state, event, ctx): it reads the world only through `ctx`
and acts on it only through its return value, `ctx.emit` and `ctx.effect`.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from aos_sdk import cbor, envelope, schema
from aos_sdk.envelope import DomainEvent, EffectIntent, StepInput, StepOutput

S = TypeVar("S")
H = TypeVar("H", bound=Callable[..., Any])

IN_COMPONENT = sys.platform == "wasi"
"""True inside a WebAssembly component (componentize-py's CPython reports `wasi`)."""

GUEST_ERROR_PREFIX = "aos guest error: "


class StepError(RuntimeError):
    """A workflow broke the SDK's rules during a step (the step traps in a component)."""

    code = "sdk.step"


class UnhandledEventError(StepError):
    code = "sdk.unhandled_event"


class ContextUnavailableError(StepError):
    code = "sdk.ctx_unavailable"


class ReadRequest(BaseException):
    """Raised by `ctx.read` for a blob the host did not send; the step returns a read request
    and the host runs it again with the blob. A BaseException so that a handler's own
    `except Exception` cannot swallow it."""

    def __init__(self, hashes: list[str]) -> None:
        super().__init__(", ".join(hashes))
        self.hashes = hashes


WRITE_STAND_IN_PREFIX = "blake3:" + "f" * 48
"""A written blob's hash before the host told it: `WRITE_STAND_IN_PREFIX` and 16 hex digits.
Such a run's output is a hash request, and only the run after it counts."""


class _Delete:
    _instance: _Delete | None = None

    def __new__(cls) -> _Delete:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "DELETE"


DELETE: Any = _Delete()
"""Return this from a handler to delete the cell (the output state is null)."""


class Context:
    """What a step may know (read-only) and the intents it may record."""

    def __init__(self, step_input: StepInput) -> None:
        self._ctx = step_input.ctx
        self._input = step_input
        self._events: list[DomainEvent] = []
        self._effects: list[EffectIntent] = []
        self._ann: Any = None
        self._has_ann = False
        self._cancel: list[str] = []
        self._writes: list[bytes] = []
        self._written: dict[str, bytes] = {}  # by hash, or stand-in hash
        self._unhashed: dict[bytes, str] = {}  # blobs whose hashes to ask for: stand-ins
        self._hashes: dict[bytes, str] | None = None  # `data` by content, made on first write

    # -- reading ----------------------------------------------------------------------------

    def _field(self, name: str) -> Any:
        if self._ctx is None or name not in self._ctx:
            raise ContextUnavailableError(f"ctx.{name} is not available: the host sent no ctx")
        return self._ctx[name]

    @property
    def now_ns(self) -> int:
        """Logical time of the step (journal time, never the wall clock)."""
        return int(self._field("now_ns"))

    @property
    def entropy(self) -> bytes:
        """64 bytes of deterministic, per-step entropy."""
        return bytes(self._field("entropy"))

    @property
    def journal_height(self) -> int:
        return int(self._field("journal_height"))

    @property
    def manifest_hash(self) -> str:
        return str(self._field("manifest_hash"))

    @property
    def workflow(self) -> str:
        return str(self._field("workflow"))

    @property
    def cell_mode(self) -> bool:
        return bool(self._field("cell_mode"))

    @property
    def event_schema(self) -> str:
        return self._input.schema

    @property
    def key(self) -> Any:
        """The cell key (decoded), or None for a workflow that is not keyed."""
        if self._input.has_key:
            return self._input.key
        if self._ctx is not None and type(self._ctx.get("key")) is bytes:
            return cbor.decode(self._ctx["key"])
        return None

    # -- acting -----------------------------------------------------------------------------

    def emit(self, schema_name: str, value: Any) -> None:
        """Record a domain event (`value` is a dataclass or a plain CBOR value)."""
        _check_name(schema_name, "schema")
        self._events.append(DomainEvent(schema_name, schema.to_value(value)))

    def effect(
        self,
        effect: str,
        params: Any,
        *,
        idempotency_key: bytes | None = None,
        issuer_ref: str | None = None,
    ) -> None:
        """Record an effect intent; its receipt comes back later as an event."""
        _check_name(effect, "effect")
        if idempotency_key is not None and type(idempotency_key) is not bytes:
            raise StepError("idempotency_key must be bytes")
        if issuer_ref is not None and type(issuer_ref) is not str:
            raise StepError("issuer_ref must be text")
        self._effects.append(
            EffectIntent(effect, schema.to_value(params), idempotency_key, issuer_ref)
        )

    def cancel(self, issuer_ref: str) -> None:
        """Close this cell's open intents whose issuer_ref is `issuer_ref` (an intent this
        step emits is not affected). Their late receipts are refused and journaled; a timer is
        never delivered."""
        _check_name(issuer_ref, "issuer_ref")
        if issuer_ref not in self._cancel:
            self._cancel.append(issuer_ref)

    def read(self, blob_hash: str) -> bytes:
        """The bytes of a blob in the world's CAS (`blake3:<hex>`), or one this step wrote.
        The first time a step asks for a blob it was not sent, the step stops here and runs
        again with it: keep everything before a read free of effects on anything but local
        variables."""
        found = self._written.get(blob_hash)
        if found is None:
            found = self._input.data.get(blob_hash)
        if found is None:
            raise ReadRequest([blob_hash])
        return bytes(found)

    def readable(self, blob_hash: str) -> bool:
        """Whether the host sent `blob_hash` with this step, or the step wrote it (reading it
        costs no round)."""
        return blob_hash in self._input.data or blob_hash in self._written

    def write(self, data: bytes) -> str:
        """Store `data` in the world's CAS with this step's output, and return its hash
        (`blake3:<hex>`; spec/08 §4.4). A guest cannot hash, so the first run of a step that
        writes gets a stand-in hash (`WRITE_STAND_IN_PREFIX`), asks the host for the real
        hashes once the handler returns, and runs again with them: keep what a step does with
        a written blob's hash within its output."""
        if type(data) is not bytes:
            raise StepError("ctx.write takes bytes")
        if self._hashes is None:
            self._hashes = {bytes(blob): hash_ for hash_, blob in self._input.data.items()}
        found = self._hashes.get(data)
        if found is None:
            found = self._unhashed.get(data)
            if found is None:
                found = f"{WRITE_STAND_IN_PREFIX}{len(self._unhashed):016x}"
                self._unhashed[data] = found
                self._written[found] = data
            return found
        if found not in self._written:
            self._written[found] = data
            self._writes.append(data)
        return found

    def require(self, blob_hashes: list[str]) -> None:
        """Ask for several blobs at once (one read round instead of one each)."""
        missing = [h for h in blob_hashes if h not in self._input.data]
        if missing:
            raise ReadRequest(missing)

    def annotate(self, value: Any) -> None:
        """Attach an annotation to the step's output (`ann`); the last call wins."""
        self._ann, self._has_ann = schema.to_value(value), True


def _check_name(name: object, what: str) -> None:
    if type(name) is not str or not name:
        raise StepError(f"{what} must be non-empty text, got {name!r}")


@dataclasses.dataclass(frozen=True)
class _Handler:
    event_type: Any
    fn: Callable[[Any, Any, Context], Any]


class Workflow(Generic[S]):
    """A workflow: a state type, an initial state, and one handler per event schema.

    A new cell (null state) starts as `initial()`; without `initial`, as `state()` when the
    state dataclass has a default for every field, else handlers get None."""

    def __init__(
        self,
        name: str,
        *,
        state: type[S] | Any = Any,
        initial: Callable[[], S] | None = None,
    ) -> None:
        self.name = name
        self.state_type = state
        if initial is None and _constructible_without_arguments(state):
            initial = state
        self.initial = initial
        self._handlers: dict[str, _Handler] = {}
        # The states this instance output, for the inputs that bring them back (step_bytes).
        self.state_memo = envelope.StateMemo()
        schema.prepare(state)

    @property
    def schemas(self) -> list[str]:
        """The event schemas this workflow handles, in registration order."""
        return list(self._handlers)

    def on(self, event_schema: str, event_type: Any = Any) -> Callable[[H], H]:
        """Register the decorated function as the handler of `event_schema`; its event
        argument is the event value read as `event_type`."""

        def register(fn: H) -> H:
            if event_schema in self._handlers:
                raise StepError(f"{self.name}: two handlers for {event_schema}")
            schema.prepare(event_type)
            self._handlers[event_schema] = _Handler(event_type, fn)
            return fn

        return register

    def step(self, step_input: StepInput) -> StepOutput:
        """Run one step on a decoded input envelope."""
        output = self._step(step_input)
        if output.has_state:
            output.state = schema.to_value(output.state)
        return output

    def _step(self, step_input: StepInput) -> StepOutput:
        """`step`, the state left as the handler returned it (typed values not converted)."""
        handler = self._handlers.get(step_input.schema)
        if handler is None:
            raise UnhandledEventError(
                f"{self.name} has no handler for {step_input.schema} (it handles {self.schemas})"
            )
        ctx = Context(step_input)
        state = self._read_state(step_input)
        event = schema.from_value(handler.event_type, step_input.value, "$event")
        try:
            result = handler.fn(state, event, ctx)
        except ReadRequest as request:
            # Blobs it wrote before it stopped are hashed in the same round.
            hashes = list(ctx._unhashed)
            return StepOutput(None, False, reads=list(request.hashes), hash_request=hashes)
        if ctx._unhashed:
            return StepOutput(state=None, has_state=False, hash_request=list(ctx._unhashed))
        output = StepOutput(state=None, has_state=False)
        if result is None:
            raise StepError(
                f"the {step_input.schema} handler returned None: return the new state, "
                "or aos_sdk.DELETE to delete the cell"
            )
        if result is not DELETE:
            output.state, output.has_state = result, True
        output.domain_events = ctx._events
        output.effects = ctx._effects
        output.ann, output.has_ann = ctx._ann, ctx._has_ann
        output.cancel = ctx._cancel
        output.writes = ctx._writes
        return output

    def step_bytes(self, data: bytes) -> bytes:
        """Run one step from input envelope bytes to output envelope bytes (the ABI)."""
        # The state is converted to its CBOR form while it is encoded, not walked once more
        # before (`envelope.encode_output`): most states are plain data already.
        output = self._step(envelope.decode_input(bytes(data), self.state_memo))
        return envelope.encode_output(output, typed_state=True, states=self.state_memo)

    def _read_state(self, step_input: StepInput) -> Any:
        if not step_input.has_state:
            return self.initial() if self.initial is not None else None
        return schema.from_value(self.state_type, step_input.state, "$state")


def _constructible_without_arguments(state: Any) -> bool:
    if not (isinstance(state, type) and dataclasses.is_dataclass(state)):
        return False
    missing = dataclasses.MISSING
    return all(
        f.default is not missing or f.default_factory is not missing
        for f in dataclasses.fields(state)
        if f.init
    )


class _DiscardText:
    """stdout inside a component: with WASI stubbed, a write would trap, and printing is not
    an effect a workflow may have, so `print` does nothing there."""

    def write(self, text: str) -> int:
        return len(text)

    def flush(self) -> None:
        return None


def export(workflow: Workflow[Any]) -> type:
    """The class componentize-py binds to the world's `step` export: assign it to a
    module-level name `WitWorld` in the module you build."""
    if IN_COMPONENT:
        sys.stdout = _DiscardText()

    class WitWorld:
        def step(self, input: bytes) -> bytes:
            try:
                return workflow.step_bytes(input)
            except BaseException as error:
                # An exception is reported, not trapped, so the step fault carries it; running
                # out of memory still traps, since the host tells memory faults by the trap.
                if isinstance(error, Exception) and not isinstance(error, MemoryError):
                    return envelope.encode_fault(type(error).__name__, str(error), _where(error))
                if IN_COMPONENT:
                    _report_and_trap(error)
                raise

    WitWorld.__qualname__ = f"WitWorld[{workflow.name}]"
    return WitWorld


def _report_and_trap(error: BaseException) -> None:
    """The component ABI has no error channel: the step must trap. Write one short line to
    stderr first. With --stub-wasi that write is itself the trap (the backtrace then shows
    `stderr`, which marks a guest exception); under a host that wires stderr the line is
    readable. Nothing here may import or read files: the filesystem is stubbed too."""
    line = f"{GUEST_ERROR_PREFIX}{type(error).__name__}: {error} (at {_where(error)})"
    os.write(2, line[:500].encode("utf-8", "replace") + b"\n")


def _where(error: BaseException) -> str:
    """The innermost frame of the exception: `function:line`."""
    where = ""
    tb = error.__traceback__
    while tb is not None:
        where = f"{tb.tb_frame.f_code.co_name}:{tb.tb_lineno}"
        tb = tb.tb_next
    return where
