"""What the world's operations answer: an admitted input, a run's report, a settled
receipt, a cell's summary, and a checked step output."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

from aos.kernel.hashing import Hash

if TYPE_CHECKING:  # annotations only: the cell reads (queries.py) need no effect machinery
    from aos.kernel.world.effects import AdmittedEffect
    from aos.kernel.world.router import Delivery


@dataclass(frozen=True)
class Admitted:
    """An input the world accepted: its journal sequence, record hash and deliveries;
    `duplicate` when an idempotency key named an event admitted before (this is that one's
    admission, and nothing was journaled)."""

    seq: int
    event_hash: Hash
    deliveries: int
    duplicate: bool = False


FAULT_CODES_KEPT_MAX = 100
"""Fault codes a run report lists (in order; `faults` counts them all), so a run that faults
a million cells does not carry a million strings."""


@dataclass
class RunReport:
    """What one `run_to_idle` did."""

    steps: int = 0
    faults: int = 0
    dropped: int = 0
    events: int = 0
    intents: int = 0
    fuel: int = 0
    first_seq: int = 0
    last_seq: int = 0
    fault_codes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class CellInfo:
    workflow: str
    key: Any  # the decoded key value, None for an unkeyed workflow
    key_bytes: bytes | None
    state_hash: Hash
    status: str
    last_active_seq: int
    faulted: bool = False  # the kernel failed it (a step fault); `status` may say failed too
    # when the workflow's own state says so (state_status.status_from_state)


@dataclass(frozen=True)
class Settlement:
    """What `settle` did with a receipt: the journal sequence of its `effect_receipt`, or
    `duplicate` when the intent was already settled (nothing was written)."""

    intent: str
    seq: int | None
    duplicate: bool = False
    delivered: bool = True


class StepEvent(NamedTuple):
    """A domain event a step emitted, checked: its normalized value, that value's canonical
    stored form (encoded once, carried to its record and its deliveries) and its
    deliveries."""

    schema: str
    value: Any
    deliveries: list[Delivery]
    encoded: bytes


@dataclass(frozen=True)
class StepOutcome:
    state: bytes | None
    events: list[StepEvent]
    effects: list[AdmittedEffect]
    fuel: int
    ann: Any = None  # the annotation the step record carries (normalized), or None
    cancel: tuple[str, ...] = ()  # issuer_refs of the cell's open intents to close
    writes: tuple[bytes, ...] = ()  # blobs the step stores in the CAS (spec/08 §4.4)
