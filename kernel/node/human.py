"""The `human` adapter, hosted by the node: open intents of effects that list it are tasks in
an inbox; completing one signs a receipt with the adapter's key and settles the intent like
any other receipt (so the journal shows who vouched for the human's answer).

The **inbox** is a projection kept beside the world, not in it: who holds (has claimed) each
task, who it is assigned to, and each task's history (created, claimed, released,
reassigned, and how it closed). Claims are scheduling, like leases: the journal records only
the receipt. The projection is an append-only JSON-lines file in the world directory
(`human-inbox.jsonl`), one history entry a line, fsynced after each append and replayed on
start; the world stays the truth about which tasks are open.

Threads: every change runs on the world host's thread (requests through `WorldHost.run`,
publishing through the `PublishWatcher` calls), so a claim and a completion never interleave;
request handlers read under a lock.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from aos.kernel import cbor
from aos.kernel.air.model import DefAdapter
from aos.kernel.node.errors import (
    HumanAdapterError,
    NodeConfigError,
    NodeError,
    NodeLimitExceededError,
    RequestInvalidError,
    TaskUnknownError,
)
from aos.kernel.node.leases import PublishedIntent
from aos.kernel.signing.signatures import public_key_of, signed_receipt

TASK_STATUSES = ("ok", "error")
INBOX_FILE_NAME = "human-inbox.jsonl"
"""The inbox file, in the world directory beside `store`."""

log = logging.getLogger("aos.node")

# --------------------------------------------------------------------------------------------
# Limits

TASK_HISTORY_MAX_DEFAULT = 1000
"""Most history entries one task keeps. A claim, release or reassign that would leave no room
for the entry that closes the task is refused (`node.task_history_full`)."""
INBOX_CLOSED_TASKS_MAX_DEFAULT = 10_000
"""Most closed tasks whose history the inbox remembers (the oldest are forgotten first). On
start, a file that holds more is compacted to the open tasks and the remembered closed ones."""
TASK_USER_CHARS_MAX_DEFAULT = 256
"""Longest user or role name."""
TASK_ROLES_MAX_DEFAULT = 64
"""Most roles one claim may present."""


@dataclass(frozen=True)
class InboxLimits:
    task_history_max: int = TASK_HISTORY_MAX_DEFAULT
    inbox_closed_tasks_max: int = INBOX_CLOSED_TASKS_MAX_DEFAULT
    task_user_chars_max: int = TASK_USER_CHARS_MAX_DEFAULT
    task_roles_max: int = TASK_ROLES_MAX_DEFAULT

    def __post_init__(self) -> None:
        for name, value in vars(self).items():
            if type(value) is not int or value < 1:
                raise NodeConfigError(
                    f"inbox limit {name} must be a positive integer, not {value!r}"
                )
        if self.task_history_max < 2:
            raise NodeConfigError("task_history_max must be at least 2: created, and closed")


# --------------------------------------------------------------------------------------------
# Errors


class InboxError(NodeError):
    """An error of the task inbox, with its own HTTP status (app.py). A refused task request
    changes nothing: neither the inbox nor its file."""

    code = "node.inbox_error"
    http_status: ClassVar[int] = 409


class TaskClaimedError(InboxError):
    code = "node.task_claimed"
    hint = "someone else holds the task: they may release or reassign it"


class TaskNotAssigneeError(InboxError):
    code = "node.task_not_assignee"
    hint = "the task is assigned to someone else; `aos task reassign` changes that"


class TaskNotHolderError(InboxError):
    code = "node.task_not_holder"
    hint = "only the user who claimed the task may do this (detail: holder)"


class TaskForbiddenError(InboxError):
    code = "node.task_forbidden"
    hint = "the task names roles; claim it presenting one of them (detail: roles)"
    http_status = 403


class TaskHistoryFullError(InboxError):
    code = "node.task_history_full"
    hint = "the task's history is at task_history_max; it can still be completed"


class InboxUnwritableError(InboxError):
    code = "node.inbox_unwritable"
    hint = "the inbox file could not be written (disk full?); nothing changed, retry later"
    http_status = 503


class InboxCorruptError(InboxError):
    code = "node.inbox_corrupt"
    hint = "a line before the last is not an inbox entry; move the file aside to start afresh"
    http_status = 503


# --------------------------------------------------------------------------------------------
# The adapter


@dataclass(frozen=True)
class HumanAdapter:
    name: str
    seed: bytes
    limits: InboxLimits = field(default_factory=InboxLimits)

    def check(self, adapters: Mapping[str, DefAdapter]) -> None:
        """Refuse to start with a key the manifest would not accept: every completion would
        be rejected as forged."""
        definition = adapters.get(self.name)
        if definition is None:
            raise HumanAdapterError(f"the manifest defines no adapter {self.name}")
        if definition.public_key_bytes != public_key_of(self.seed):
            raise HumanAdapterError(f"the key file is not {self.name}'s key (public keys differ)")

    def receipt(
        self, world_id: str, task: PublishedIntent, status: str, payload: Any
    ) -> dict[str, Any]:
        """A signed receipt for a completed task: it started when the task was published and
        finished now."""
        finished_ns = time.time_ns()
        started_ns = min(task.published_unix_ms * 1_000_000, finished_ns)
        body = {
            "world": world_id,
            "intent": task.intent,
            "status": status,
            "payload": payload,
            "adapter": self.name,
            "started_ns": started_ns,
            "finished_ns": finished_ns,
        }
        return signed_receipt(self.seed, body)


# --------------------------------------------------------------------------------------------
# Task fields


@dataclass(frozen=True)
class TaskFields:
    """What the inbox shows of a task's params (`aos/human.task@1` has them all; any effect's
    params may carry some). A field of another type than expected counts as absent."""

    title: str | None = None
    description: str | None = None
    assignee: str | None = None
    roles: tuple[str, ...] = ()
    form: Any = None
    data: Any = None


def task_fields(params: Any) -> TaskFields:
    if not isinstance(params, dict):
        return TaskFields()
    roles = params.get("roles")
    return TaskFields(
        title=_text(params.get("title")),
        description=_text(params.get("description")),
        assignee=_text(params.get("assignee")) or None,
        roles=tuple(r for r in roles if isinstance(r, str)) if isinstance(roles, list) else (),
        form=params.get("form"),
        data=params.get("data"),
    )


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def check_name(value: str, path: str, limits: InboxLimits) -> str:
    """A user or role name: non-empty text, at most `task_user_chars_max` characters."""
    if not value:
        raise RequestInvalidError("a user or role name is not empty", path=path)
    if len(value) > limits.task_user_chars_max:
        raise NodeLimitExceededError(
            f"the name is {len(value)} characters; the limit is {limits.task_user_chars_max}",
            path=path,
            limit=limits.task_user_chars_max,
            value=len(value),
        )
    return value


def check_roles(roles: Sequence[str], limits: InboxLimits) -> tuple[str, ...]:
    if len(roles) > limits.task_roles_max:
        raise NodeLimitExceededError(
            f"{len(roles)} roles; a claim presents at most {limits.task_roles_max}",
            path="$.roles",
            limit=limits.task_roles_max,
            value=len(roles),
        )
    return tuple(check_name(role, f"$.roles[{i}]", limits) for i, role in enumerate(roles))


# --------------------------------------------------------------------------------------------
# History entries and the projection

CREATED = "created"
CLAIMED = "claimed"
RELEASED = "released"
REASSIGNED = "reassigned"
COMPLETED = "completed"  # through the inbox: user and status known
CLOSED = "closed"  # settled by a receipt from elsewhere, or found closed on start
CANCELLED = "cancelled"  # the workflow cancelled the intent
ENTRY_KINDS = (CREATED, CLAIMED, RELEASED, REASSIGNED, COMPLETED, CLOSED, CANCELLED)
CLOSING_KINDS = frozenset({COMPLETED, CLOSED, CANCELLED})
_ENTRY_FIELDS = ("kind", "at_unix_ms", "user", "to", "status", "receipt_seq")

Entry = dict[str, Any]
Change = tuple[str, Entry]  # (intent, entry)


def _entry(
    kind: str,
    at_unix_ms: int,
    *,
    user: str | None = None,
    to: str | None = None,
    status: str | None = None,
    receipt_seq: int | None = None,
) -> Entry:
    return {
        "kind": kind,
        "at_unix_ms": at_unix_ms,
        "user": user,
        "to": to,
        "status": status,
        "receipt_seq": receipt_seq,
    }


@dataclass
class _TaskState:
    history: list[Entry] = field(default_factory=list)
    holder: str | None = None
    assignee: str | None = None
    reassigned: bool = False  # `assignee` overrides the one in the params
    closing: str | None = None  # the kind of the entry that closed it; None while open


def _apply(state: _TaskState, entry: Entry) -> None:
    """The projection: one entry's effect on a task's state."""
    state.history.append(entry)
    kind = entry["kind"]
    if kind == CLAIMED:
        state.holder = entry["user"]
    elif kind == RELEASED:
        state.holder = None
    elif kind == REASSIGNED:
        state.assignee = entry["to"]
        state.reassigned = True
        if state.holder != entry["to"]:
            state.holder = None  # handed over: the new assignee claims it
    elif kind in CLOSING_KINDS:
        state.closing = kind
        state.holder = None


def _assignee(state: _TaskState | None, fields_: TaskFields) -> str | None:
    if state is not None and state.reassigned:
        return state.assignee
    return fields_.assignee


# --------------------------------------------------------------------------------------------
# The file


def _line(intent: str, entry: Entry) -> str:
    text = json.dumps({"intent": intent, **entry}, sort_keys=True, separators=(",", ":"))
    return text + "\n"


def _parsed(raw: bytes) -> Change | None:
    """One line of the file as (intent, entry); None if it is not one."""
    try:
        value = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None
    if not isinstance(value, dict) or set(value) != {"intent", *_ENTRY_FIELDS}:
        return None
    intent = value.pop("intent")
    if (
        not isinstance(intent, str)
        or value["kind"] not in ENTRY_KINDS
        or not _is_int(value["at_unix_ms"])
        or not all(_is_text_or_none(value[k]) for k in ("user", "to", "status"))
        or not (value["receipt_seq"] is None or _is_int(value["receipt_seq"]))
    ):
        return None
    return intent, value


def _is_int(value: Any) -> bool:
    return type(value) is int


def _is_text_or_none(value: Any) -> bool:
    return value is None or isinstance(value, str)


class _InboxFile:
    """Append-only JSON lines. `size` is the length of the file's whole lines: an append that
    fails is cut back to it, so a torn line can only ever be the last one."""

    def __init__(self, path: Path, *, sync: bool) -> None:
        self.path = path
        self.sync = sync
        self.size = 0

    def read(self) -> list[Change]:
        """Every entry; a torn last line (a crash mid-append) is dropped and cut off."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return []
        except OSError as error:
            raise InboxCorruptError(f"cannot read {self.path}: {error}") from None
        *whole, tail = data.split(b"\n")
        found: list[Change] = []
        good = 0
        for number, raw in enumerate(whole, start=1):
            change = _parsed(raw)
            if change is None:
                if number == len(whole) and not tail:
                    break  # the last line, torn after all (say, zeros after a crash)
                raise InboxCorruptError(
                    f"{self.path} line {number} is not an inbox entry", line=number
                )
            found.append(change)
            good += len(raw) + 1
        if good < len(data):
            log.warning("%s: dropping a torn last line (%d bytes)", self.path, len(data) - good)
            self._cut(good)
        self.size = good
        return found

    def append(self, changes: Sequence[Change]) -> None:
        data = "".join(_line(intent, entry) for intent, entry in changes).encode("utf-8")
        fresh = not self.path.exists()
        try:
            with open(self.path, "ab") as file:
                file.write(data)
                file.flush()
                if self.sync:
                    os.fsync(file.fileno())
            if fresh:
                self._sync_directory()
        except OSError:
            try:
                self._cut(self.size)
            except OSError:
                log.exception("cannot cut %s back after a failed append", self.path)
            raise
        self.size += len(data)

    def rewrite(self, changes: Sequence[Change]) -> None:
        """Replace the file by these entries (compaction): a temporary file renamed over it."""
        data = "".join(_line(intent, entry) for intent, entry in changes).encode("utf-8")
        temporary = self.path.with_name(self.path.name + ".tmp")
        with open(temporary, "wb") as file:
            file.write(data)
            file.flush()
            if self.sync:
                os.fsync(file.fileno())
        os.replace(temporary, self.path)
        self._sync_directory()
        self.size = len(data)

    def _cut(self, size: int) -> None:
        with open(self.path, "r+b") as file:
            file.truncate(size)
            if self.sync:
                os.fsync(file.fileno())

    def _sync_directory(self) -> None:
        if not self.sync:
            return
        descriptor = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(descriptor)
        finally:
            os.close(descriptor)


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


# --------------------------------------------------------------------------------------------
# The inbox


class TaskInbox:
    """Claims, assignees and history of one human adapter's tasks; the node's
    `PublishWatcher`. Without a `path` it keeps nothing across restarts."""

    def __init__(
        self,
        adapter: str,
        path: Path | None,
        *,
        limits: InboxLimits,
        sync: bool = True,
        wall_ms: Callable[[], int] = _wall_ms,
    ) -> None:
        self.adapter = adapter
        self.limits = limits
        self._file = _InboxFile(path, sync=sync) if path is not None else None
        self._wall_ms = wall_ms
        self._lock = threading.Lock()
        self._open: dict[str, _TaskState] = {}
        self._closed: OrderedDict[str, _TaskState] = OrderedDict()  # oldest first
        self._closed_in_file = 0
        # Completions settled through the inbox, until their receipt is seen journaled.
        self._completing: dict[str, tuple[str | None, str]] = {}

    # -- opening (the host thread) -----------------------------------------------------------

    def load(self) -> None:
        """Replay the file (before the world's open intents are published)."""
        if self._file is None:
            return
        for intent, entry in self._file.read():
            self._apply_change(intent, entry)

    def opened(self, intents: Sequence[PublishedIntent]) -> None:
        """The world's open intents: tasks the file has open that are not are closed now;
        open ones the file does not know are created. Compacts the file if it is due."""
        now = self._wall_ms()
        open_now = {p.intent: p for p in intents if self.adapter in p.adapters}
        changes = [(i, _entry(CLOSED, now)) for i in self._open if i not in open_now]
        changes += [
            (i, _entry(CREATED, p.published_unix_ms))
            for i, p in open_now.items()
            if i not in self._open
        ]
        closing = sum(1 for _, entry in changes if entry["kind"] in CLOSING_KINDS)
        if self._closed_in_file + closing <= self.limits.inbox_closed_tasks_max:
            self._commit(changes, from_world=True)
            return
        with self._lock:
            for intent, entry in changes:
                self._apply_change(intent, entry)
        if self._file is not None:
            try:
                self._file.rewrite(self._all_changes())
            except OSError:
                # Opening must not fail here (the host thread is starting): the old file and
                # what it lacks are reconciled again at the next start.
                log.exception("cannot compact %s", self._file.path)
                return
            log.info("%s: compacted (%d open tasks)", self._file.path, len(self._open))
        self._closed_in_file = len(self._closed)

    # -- publishing (the host thread) --------------------------------------------------------

    def published(
        self,
        fresh: Sequence[PublishedIntent],
        settled: Mapping[str, int],
        cancelled: Collection[str],
    ) -> None:
        changes = [
            (p.intent, _entry(CREATED, p.published_unix_ms))
            for p in fresh
            if self.adapter in p.adapters and p.intent not in self._open
        ]
        known = set(self._open) | {intent for intent, _ in changes}
        now = self._wall_ms()
        for intent, seq in settled.items():
            noted = self._completing.pop(intent, None)
            if intent not in known:
                continue
            if noted is None:
                changes.append((intent, _entry(CLOSED, now, receipt_seq=seq)))
            else:
                user, status = noted
                entry = _entry(COMPLETED, now, user=user, status=status, receipt_seq=seq)
                changes.append((intent, entry))
        changes += [(i, _entry(CANCELLED, now)) for i in cancelled if i in known]
        self._commit(changes, from_world=True)

    # -- requests (the host thread) ----------------------------------------------------------

    def claim(self, task: PublishedIntent, user: str, roles: Collection[str]) -> None:
        state = self._state(task)
        if state.holder == user:
            return  # already theirs
        if state.holder is not None:
            raise TaskClaimedError(
                f"{user} cannot claim: {state.holder} holds the task", holder=state.holder
            )
        self._check_may_claim(task, state, user, roles)
        self._make_room(task.intent, state)
        self._commit([(task.intent, _entry(CLAIMED, self._wall_ms(), user=user))])

    def _check_may_claim(
        self, task: PublishedIntent, state: _TaskState, user: str | None, roles: Collection[str]
    ) -> None:
        """`user`, holding `roles`, is the task's assignee (or it has none) and holds one of
        its roles (or it names none)."""
        fields_ = task_fields(task.params)
        assignee = _assignee(state, fields_)
        if assignee is not None and assignee != user:
            raise TaskNotAssigneeError(
                f"the task is assigned to {assignee}, not {user}", assignee=assignee
            )
        if fields_.roles and not set(fields_.roles) & set(roles):
            raise TaskForbiddenError(
                f"{user} presents none of the task's roles", roles=list(fields_.roles)
            )

    def release(self, task: PublishedIntent, user: str) -> None:
        state = self._state(task)
        self._check_holder(state, user, "release")
        self._make_room(task.intent, state)
        self._commit([(task.intent, _entry(RELEASED, self._wall_ms(), user=user))])

    def reassign(
        self,
        task: PublishedIntent,
        user: str,
        to: str | None,
        roles: Collection[str] | None = None,
    ) -> None:
        """Assign the task to `to`: by its holder, or while unclaimed by anyone (`roles`
        None: an insecure-local node, or an admin) or by whoever may claim it (`roles`: what
        the caller's identity holds)."""
        state = self._state(task)
        if state.holder is not None:
            self._check_holder(state, user, "reassign")
        elif roles is not None:
            self._check_may_claim(task, state, user, roles)
        if _assignee(state, task_fields(task.params)) == to and state.holder in (None, to):
            return  # nothing would change
        self._make_room(task.intent, state)
        self._commit([(task.intent, _entry(REASSIGNED, self._wall_ms(), user=user, to=to))])

    def completing(
        self, task: PublishedIntent, user: str | None, roles: Collection[str] | None = None
    ) -> None:
        """Check that `user` may complete the task (before its receipt is settled): a claimed
        task only its holder; an unclaimed one whoever may claim it (with `roles`, what the
        caller's identity holds; None: an insecure-local node, which trusts the request)."""
        state = self._state(task)
        if state.holder is not None:
            self._check_holder(state, user, "complete")
        elif roles is not None:
            self._check_may_claim(task, state, user, roles)

    def note_completion(self, intent: str, user: str | None, status: str) -> None:
        """The task's receipt was settled: its `completed` entry is written when the receipt
        is seen journaled (`published`)."""
        self._completing[intent] = (user, status)

    # -- reading (any thread) ----------------------------------------------------------------

    def shown(self, task: PublishedIntent) -> dict[str, Any]:
        """What the inbox adds to a task's body."""
        fields_ = task_fields(task.params)
        with self._lock:
            state = self._open.get(task.intent)
            holder = state.holder if state is not None else None
            assignee = _assignee(state, fields_)
        return {
            "title": fields_.title,
            "description": fields_.description,
            "assignee": assignee,
            "roles": list(fields_.roles),
            "form": cbor.to_json(fields_.form),
            "data": cbor.to_json(fields_.data),
            "status": "open" if holder is None else "claimed",
            "holder": holder,
        }

    def select(
        self,
        tasks: Sequence[PublishedIntent],
        *,
        assignee: str | None,
        role: str | None,
        status: str | None,
        limit: int,
    ) -> list[tuple[PublishedIntent, dict[str, Any]]]:
        """The tasks that pass every filter given, at most `limit`, in the order given."""
        found = []
        for task in tasks:
            shown = self.shown(task)
            if assignee is not None and shown["assignee"] != assignee:
                continue
            if role is not None and role not in shown["roles"]:
                continue
            if status is not None and shown["status"] != status:
                continue
            found.append((task, shown))
            if len(found) == limit:
                break
        return found

    def history(self, intent: str) -> dict[str, Any]:
        with self._lock:
            state = self._open.get(intent) or self._closed.get(intent)
            if state is None:
                raise TaskUnknownError(f"the inbox knows no task {intent}")
            if state.closing is not None:
                status = state.closing
            else:
                status = "open" if state.holder is None else "claimed"
            return {"intent": intent, "status": status, "entries": list(state.history)}

    # -- internals ---------------------------------------------------------------------------

    def _state(self, task: PublishedIntent) -> _TaskState:
        state = self._open.get(task.intent)
        if state is None:  # published before the inbox heard of it: cannot be, but be kind
            self._commit([(task.intent, _entry(CREATED, task.published_unix_ms))], from_world=True)
            state = self._open[task.intent]
        return state

    def _check_holder(self, state: _TaskState, user: str | None, action: str) -> None:
        if state.holder != user:
            who = state.holder or "nobody"
            raise TaskNotHolderError(
                f"{user or 'a user not named'} cannot {action}: {who} holds the task",
                holder=state.holder,
            )

    def _make_room(self, intent: str, state: _TaskState) -> None:
        """Keep one entry free for the one that closes the task."""
        most = self.limits.task_history_max
        if len(state.history) + 2 > most:
            raise TaskHistoryFullError(
                f"task {intent} has {len(state.history)} history entries; the limit is {most}",
                limit=most,
                limit_name="task_history_max",
            )

    def _commit(self, changes: Sequence[Change], *, from_world: bool = False) -> None:
        """Write, then apply. A request's change that cannot be written is refused; what the
        world did is applied even so (the world is the truth; a restart reconciles)."""
        if not changes:
            return
        if self._file is not None:
            try:
                self._file.append(changes)
            except OSError as error:
                if not from_world:
                    raise InboxUnwritableError(f"cannot write {self._file.path}: {error}") from None
                log.exception("cannot write %s; the inbox goes on in memory", self._file.path)
        with self._lock:
            for intent, entry in changes:
                self._apply_change(intent, entry)

    def _apply_change(self, intent: str, entry: Entry) -> None:
        if entry["kind"] == CREATED:
            self._closed.pop(intent, None)
            self._open[intent] = _TaskState()
        state = self._open.get(intent)
        if state is None:
            return  # a task closed already (an entry of a forgotten task)
        _apply(state, entry)
        del state.history[: -self.limits.task_history_max]  # a file from a larger limit
        if state.closing is not None:
            del self._open[intent]
            self._closed[intent] = state
            self._closed_in_file += 1
            while len(self._closed) > self.limits.inbox_closed_tasks_max:
                self._closed.popitem(last=False)

    def _all_changes(self) -> list[Change]:
        """The inbox as entries: closed tasks oldest first, then the open ones."""
        found: list[Change] = []
        for intent, state in [*self._closed.items(), *self._open.items()]:
            found += [(intent, entry) for entry in state.history]
        return found
