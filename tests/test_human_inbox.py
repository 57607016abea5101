"""The human task inbox (spec/04-effects.md §7): task fields from params, claim / release /
reassign / complete with a user, every refusal (which changes nothing, in memory or on disk),
role and assignee checks, filters, each task's history, and its file: replayed on restart,
tolerant of a torn last line, compacted when it holds too many closed tasks."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from aos.kernel.node import Node
from aos.kernel.node.app import create_app
from aos.kernel.node.errors import NodeConfigError, NodeLimitExceededError, RequestInvalidError
from aos.kernel.node.human import (
    INBOX_FILE_NAME,
    HumanAdapter,
    InboxCorruptError,
    InboxLimits,
    TaskClaimedError,
    TaskFields,
    TaskForbiddenError,
    TaskHistoryFullError,
    TaskInbox,
    TaskNotAssigneeError,
    TaskNotHolderError,
    check_name,
    check_roles,
    task_fields,
)
from aos.kernel.node.identities import Authority, IdentityStore
from aos.kernel.node.leases import PublishedIntent
from tests.auth_fixtures import authorize
from tests.test_node import (
    ADAPTER,
    TestClient,
    error_of,
    journal,
    make_world,
    open_node,
    post_receipt,
    receipt,
    send,
    signed_client,
)
from tests.test_receipts import ADAPTER_SEED

FLOW_TASK = "aos/human.task@1"


def synthetic(intent: str, **params: Any) -> PublishedIntent:
    """A task as `aos/human.task@1` will publish it (the scripted world's have only `n`)."""
    return PublishedIntent(
        intent=intent,
        effect=FLOW_TASK,
        adapters=frozenset({ADAPTER}),
        params=params,
        issuer_ref=None,
        workflow="aos/FlowExec@1",
        key="exec-1",
        seq=1,
        published_unix_ms=1_000,
    )


def clock(start_ms: int = 10_000) -> Callable[[], int]:
    ticks = itertools.count(start_ms)
    return lambda: next(ticks)


def new_inbox(
    path: Path | None, opened: list[PublishedIntent] | None = None, **limits: int
) -> TaskInbox:
    inbox = TaskInbox(ADAPTER, path, limits=InboxLimits(**limits), sync=True, wall_ms=clock())
    inbox.load()
    inbox.opened(opened or [])
    return inbox


def events(inbox: TaskInbox, intent: str) -> list[tuple[str, str | None]]:
    return [(e["kind"], e["user"]) for e in inbox.history(intent)["entries"]]


# --------------------------------------------------------------------------------------------
# A node with a human adapter


@pytest.fixture
def world_path(tmp_path: Path) -> Path:
    return make_world(tmp_path / "w")


@contextmanager
def human_node(path: Path, **limits: int) -> Iterator[tuple[Node, TestClient]]:
    """A node whose requests name their own user and roles: the inbox's mechanics, as an
    --insecure-local node runs them (tests/test_human_identities.py checks them against
    identities)."""
    human = HumanAdapter(ADAPTER, ADAPTER_SEED, limits=InboxLimits(**limits))
    trusting = Authority(IdentityStore.of_world(path), insecure_local=True)
    with open_node(path, human=human, authority=trusting) as node:
        yield node, signed_client(node)  # an adapter's receipts are signed requests


def publish(node: Node, *tasks: PublishedIntent) -> None:
    """Publish tasks no workflow opened, on the host thread as the host would (they can be
    claimed, not completed: the world knows no such intent)."""
    assert node.inbox is not None
    inbox = node.inbox

    def run(_: Any) -> None:
        node.leases.publish(tasks)
        inbox.published(tasks, {}, ())

    node.host.call(run)


def open_tasks(client: TestClient, n: int, key: str = "x") -> list[str]:
    send(client, key, "effect", n)
    return [t["intent"] for t in client.get("/v1/tasks").json()["tasks"]]


def post(client: TestClient, intent: str, action: str, **body: Any) -> Any:
    return client.post(f"/v1/tasks/{intent}/{action}", json=body)


def ok(response: Any) -> dict[str, Any]:
    assert response.status_code == 200, response.text
    return dict(response.json())


def history(client: TestClient, intent: str) -> dict[str, Any]:
    return ok(client.get(f"/v1/tasks/{intent}/history"))


def inbox_file(world: Path) -> Path:
    return world / INBOX_FILE_NAME


# --------------------------------------------------------------------------------------------
# Task fields


def test_task_fields_come_from_params_and_none_is_required() -> None:
    params = {
        "exec": "e1",
        "step": "review",
        "task": "t1",
        "title": "Approve order 7",
        "description": "Check the amount",
        "assignee": "ann",
        "roles": ["reviewer", "lead"],
        "form": {"approve": "bool"},
        "data": {"order": 7},
    }
    assert task_fields(params) == TaskFields(
        "Approve order 7",
        "Check the amount",
        "ann",
        ("reviewer", "lead"),
        {"approve": "bool"},
        {"order": 7},
    )
    assert task_fields({"n": 0}) == TaskFields()
    assert task_fields([1, 2]) == task_fields(None) == TaskFields()
    # Fields of another type count as absent; an option left null or empty is no assignee.
    odd = {"title": 3, "assignee": "", "roles": ["a", 1], "description": None}
    assert task_fields(odd) == TaskFields(roles=("a",))


def test_names_and_limits_are_checked() -> None:
    limits = InboxLimits(task_user_chars_max=4, task_roles_max=2)
    assert check_name("abcd", "$.user", limits) == "abcd"
    with pytest.raises(RequestInvalidError):
        check_name("", "$.user", limits)
    with pytest.raises(NodeLimitExceededError):
        check_name("abcde", "$.user", limits)
    assert check_roles(["a", "b"], limits) == ("a", "b")
    with pytest.raises(NodeLimitExceededError):
        check_roles(["a", "b", "c"], limits)
    for bad in ({"task_history_max": 1}, {"inbox_closed_tasks_max": 0}, {"task_roles_max": -1}):
        with pytest.raises(NodeConfigError):
            InboxLimits(**bad)


# --------------------------------------------------------------------------------------------
# The inbox itself (synthetic tasks)


def test_claims_follow_assignee_roles_and_holder(tmp_path: Path) -> None:
    inbox = new_inbox(tmp_path / "inbox.jsonl")
    free = synthetic("i-free", title="Anyone")
    ann = synthetic("i-ann", assignee="ann")
    gated = synthetic("i-gated", roles=["reviewer", "lead"])
    inbox.published([free, ann, gated], {}, ())
    inbox.claim(free, "bob", ())
    inbox.claim(free, "bob", ())  # idempotent: no second entry
    assert events(inbox, "i-free") == [("created", None), ("claimed", "bob")]
    with pytest.raises(TaskClaimedError):
        inbox.claim(free, "carol", ())
    with pytest.raises(TaskNotAssigneeError):
        inbox.claim(ann, "bob", ())
    inbox.claim(ann, "ann", ())
    with pytest.raises(TaskForbiddenError):
        inbox.claim(gated, "dan", ())
    with pytest.raises(TaskForbiddenError):
        inbox.claim(gated, "dan", ("intern",))
    inbox.claim(gated, "dan", ("intern", "lead"))
    with pytest.raises(TaskNotHolderError):
        inbox.release(gated, "ann")
    inbox.release(gated, "dan")
    with pytest.raises(TaskNotHolderError):
        inbox.release(gated, "dan")  # nobody holds it now
    assert inbox.shown(gated)["status"] == "open"
    assert inbox.shown(ann) == {
        "title": None,
        "description": None,
        "assignee": "ann",
        "roles": [],
        "form": None,
        "data": None,
        "status": "claimed",
        "holder": "ann",
    }


def test_reassigning_hands_a_task_over(tmp_path: Path) -> None:
    inbox = new_inbox(tmp_path / "inbox.jsonl")
    task = synthetic("i-1", assignee="ann")
    inbox.published([task], {}, ())
    inbox.reassign(task, "zed", "bob")  # anyone, while it is unclaimed
    assert inbox.shown(task)["assignee"] == "bob"
    inbox.claim(task, "bob", ())
    with pytest.raises(TaskNotHolderError):
        inbox.reassign(task, "ann", "ann")  # claimed: only the holder
    inbox.reassign(task, "bob", "bob")  # nothing changes: no entry
    inbox.reassign(task, "bob", "carol")  # handed over: released
    shown = inbox.shown(task)
    assert (shown["assignee"], shown["holder"], shown["status"]) == ("carol", None, "open")
    inbox.reassign(task, "carol", None)  # to nobody: anyone may claim it
    inbox.claim(task, "dan", ())
    assert [(e["kind"], e["user"], e["to"]) for e in inbox.history("i-1")["entries"]] == [
        ("created", None, None),
        ("reassigned", "zed", "bob"),
        ("claimed", "bob", None),
        ("reassigned", "bob", "carol"),
        ("reassigned", "carol", None),
        ("claimed", "dan", None),
    ]


def test_history_is_ordered_and_closes_with_the_receipt(tmp_path: Path) -> None:
    inbox = new_inbox(tmp_path / "inbox.jsonl")
    one, two, three = synthetic("i-1"), synthetic("i-2"), synthetic("i-3")
    inbox.published([one, two, three], {}, ())
    inbox.claim(one, "ann", ())
    with pytest.raises(TaskNotHolderError):
        inbox.completing(one, None)
    with pytest.raises(TaskNotHolderError):
        inbox.completing(one, "bob")
    inbox.completing(one, "ann")
    inbox.note_completion("i-1", "ann", "ok")
    inbox.published([], {"i-1": 41, "i-2": 42}, {"i-3"})
    first = inbox.history("i-1")
    assert first["status"] == "completed"
    assert [(e["kind"], e["user"], e["status"], e["receipt_seq"]) for e in first["entries"]] == [
        ("created", None, None, None),
        ("claimed", "ann", None, None),
        ("completed", "ann", "ok", 41),
    ]
    at = [e["at_unix_ms"] for e in first["entries"]]
    assert at[0] == 1_000 and at[1] < at[2]  # created when published; wall clock after
    assert inbox.history("i-2")["status"] == "closed"  # a receipt from elsewhere
    assert inbox.history("i-2")["entries"][-1]["receipt_seq"] == 42
    assert inbox.history("i-3")["status"] == "cancelled"
    assert inbox.shown(one)["status"] == "open"  # a closed task has no holder


def test_history_is_bounded_and_completion_always_fits(tmp_path: Path) -> None:
    path = tmp_path / "inbox.jsonl"
    inbox = new_inbox(path, task_history_max=4)
    task = synthetic("i-1")
    inbox.published([task], {}, ())
    inbox.claim(task, "ann", ())
    inbox.release(task, "ann")
    before = path.read_bytes()
    with pytest.raises(TaskHistoryFullError) as refused:
        inbox.claim(task, "ann", ())
    assert refused.value.detail == {"limit": 4, "limit_name": "task_history_max"}
    assert path.read_bytes() == before
    inbox.completing(task, "ann")
    inbox.note_completion("i-1", "ann", "error")
    inbox.published([], {"i-1": 9}, ())
    assert len(inbox.history("i-1")["entries"]) == 4


def test_refused_changes_leave_memory_and_file_alone(tmp_path: Path) -> None:
    path = tmp_path / "inbox.jsonl"
    inbox = new_inbox(path)
    held = synthetic("i-held")
    gated = synthetic("i-gated", roles=["lead"], assignee="ann")
    inbox.published([held, gated], {}, ())
    inbox.claim(held, "bob", ())
    refusals: list[Callable[[], None]] = [
        lambda: inbox.claim(held, "carol", ()),
        lambda: inbox.release(held, "carol"),
        lambda: inbox.reassign(held, "carol", "carol"),
        lambda: inbox.completing(held, "carol"),
        lambda: inbox.claim(gated, "bob", ("lead",)),
        lambda: inbox.claim(gated, "ann", ("intern",)),
        lambda: inbox.release(gated, "ann"),
    ]
    for refuse in refusals:
        before = (path.read_bytes(), inbox.history("i-held"), inbox.history("i-gated"))
        shown = (inbox.shown(held), inbox.shown(gated))
        with pytest.raises(
            (TaskClaimedError, TaskNotHolderError, TaskNotAssigneeError, TaskForbiddenError)
        ):
            refuse()
        assert (path.read_bytes(), inbox.history("i-held"), inbox.history("i-gated")) == before
        assert (inbox.shown(held), inbox.shown(gated)) == shown


def test_filters_select_by_assignee_role_and_status(tmp_path: Path) -> None:
    inbox = new_inbox(None)
    tasks = [
        synthetic("i-1", assignee="ann", roles=["lead"]),
        synthetic("i-2", roles=["lead", "ops"]),
        synthetic("i-3", assignee="ann"),
        synthetic("i-4"),
    ]
    inbox.published(tasks, {}, ())
    inbox.claim(tasks[2], "ann", ())
    inbox.claim(tasks[3], "bob", ())

    def select(limit: int = 10, **filters: Any) -> list[str]:
        filters = {"assignee": None, "role": None, "status": None} | filters
        return [t.intent for t, _ in inbox.select(tasks, limit=limit, **filters)]

    assert select() == ["i-1", "i-2", "i-3", "i-4"]
    assert select(assignee="ann") == ["i-1", "i-3"]
    assert select(role="lead") == ["i-1", "i-2"]
    assert select(role="ops", assignee="ann") == []
    assert select(status="claimed") == ["i-3", "i-4"]
    assert select(status="open") == ["i-1", "i-2"]
    assert select(status="claimed", assignee="ann") == ["i-3"]
    assert select(limit=1, status="open") == ["i-1"]


# --------------------------------------------------------------------------------------------
# The file


def test_the_file_is_replayed_and_reconciled_with_the_open_tasks(tmp_path: Path) -> None:
    path = tmp_path / "inbox.jsonl"
    first = new_inbox(path)
    kept, gone = synthetic("i-kept", assignee="ann"), synthetic("i-gone")
    first.published([kept, gone], {}, ())
    first.reassign(kept, "ann", "bob")
    first.claim(kept, "bob", ())
    first.claim(gone, "carol", ())
    later = synthetic("i-later")
    again = new_inbox(path, opened=[kept, later])  # i-gone was settled while it was down
    assert again.shown(kept)["holder"] == "bob" and again.shown(kept)["assignee"] == "bob"
    assert again.history("i-kept") == first.history("i-kept")
    assert again.history("i-gone")["status"] == "closed"
    assert events(again, "i-gone")[-1] == ("closed", None)
    assert events(again, "i-later") == [("created", None)]
    third = new_inbox(path, opened=[kept, later])  # nothing new: nothing appended
    size = path.stat().st_size
    assert third.history("i-gone") == again.history("i-gone")
    assert path.stat().st_size == size


def test_a_torn_last_line_is_dropped_and_cut_off(tmp_path: Path) -> None:
    path = tmp_path / "inbox.jsonl"
    first = new_inbox(path)
    task = synthetic("i-1")
    first.published([task], {}, ())
    first.claim(task, "ann", ())
    whole = path.read_bytes()
    path.write_bytes(whole + b'{"at_unix_ms":1,"intent":"i-1","kind":"rel')  # a crash mid-append
    again = new_inbox(path, opened=[task])
    assert path.read_bytes() == whole
    assert again.shown(task)["holder"] == "ann"
    again.release(task, "ann")  # appends whole lines after the cut
    assert [line[-1:] for line in path.read_bytes().splitlines(keepends=True)] == [b"\n"] * 3
    assert events(new_inbox(path, opened=[task]), "i-1") == [
        ("created", None),
        ("claimed", "ann"),
        ("released", "ann"),
    ]
    # A last line that is whole but garbage (zeros after a crash) is torn too.
    path.write_bytes(path.read_bytes() + b"\x00\x00\x00\n")
    assert events(new_inbox(path, opened=[task]), "i-1")[-1] == ("released", "ann")
    # A bad line before the last is not a torn append: the inbox refuses to guess.
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(lines[0] + b"not json\n" + b"".join(lines[1:]))
    with pytest.raises(InboxCorruptError) as corrupt:
        new_inbox(path, opened=[task])
    assert corrupt.value.code == "node.inbox_corrupt" and corrupt.value.detail == {"line": 2}


def test_the_file_is_compacted_on_start_when_it_holds_too_many_closed_tasks(
    tmp_path: Path,
) -> None:
    path = tmp_path / "inbox.jsonl"
    inbox = new_inbox(path, inbox_closed_tasks_max=2)
    tasks = [synthetic(f"i-{n}") for n in range(5)]
    inbox.published(tasks, {}, ())
    for n, task in enumerate(tasks[:4]):
        inbox.claim(task, "ann", ())
        inbox.published([], {task.intent: 100 + n}, ())
    # In memory, only the newest closed tasks are remembered.
    with pytest.raises(Exception, match="knows no task"):
        inbox.history("i-0")
    assert inbox.history("i-2")["status"] == "closed"
    lines_before = len(path.read_bytes().splitlines())
    assert lines_before == 5 + 4 + 4
    again = new_inbox(path, opened=[tasks[4]], inbox_closed_tasks_max=2)
    lines = path.read_bytes().splitlines()
    assert len(lines) == 3 + 3 + 1  # two closed tasks (3 entries each) and the open one
    assert again.history("i-3") == inbox.history("i-3")
    assert events(again, "i-4") == [("created", None)]
    with pytest.raises(Exception, match="knows no task"):
        again.history("i-1")
    # Under the bound, a start rewrites nothing.
    new_inbox(path, opened=[tasks[4]], inbox_closed_tasks_max=2)
    assert len(path.read_bytes().splitlines()) == 7


# --------------------------------------------------------------------------------------------
# Over HTTP, with a real world


def test_claim_release_reassign_and_complete_over_http(world_path: Path) -> None:
    with human_node(world_path) as (_, client):
        first, second = open_tasks(client, 2)
        listed = ok(client.get("/v1/tasks"))["tasks"][0]
        assert (listed["status"], listed["holder"], listed["assignee"]) == ("open", None, None)
        assert listed["title"] is None and listed["roles"] == [] and listed["params"] == {"n": 0}
        claimed = ok(post(client, first, "claim", user="ann"))
        assert (claimed["status"], claimed["holder"]) == ("claimed", "ann")
        assert ok(post(client, first, "claim", user="ann")) == claimed  # idempotent
        assert ok(client.get(f"/v1/tasks/{first}")) == claimed
        ok(post(client, first, "release", user="ann"))
        ok(post(client, first, "claim", user="bob"))
        handed = ok(post(client, first, "reassign", user="bob", to="carol"))
        assert (handed["assignee"], handed["holder"], handed["status"]) == ("carol", None, "open")
        refused = post(client, first, "claim", user="ann")
        assert error_of(refused, 409)["code"] == "node.task_not_assignee"
        ok(post(client, first, "claim", user="carol"))
        for user in (None, "ann"):
            body: dict[str, Any] = {"status": "ok", "payload": {"ok": True}}
            if user is not None:
                body["user"] = user
            refused = client.post(f"/v1/tasks/{first}/complete", json=body)
            assert error_of(refused, 409)["code"] == "node.task_not_holder"
        done = ok(post(client, first, "complete", status="ok", payload={"ok": True}, user="carol"))
        [receipt_record] = journal(client, kind="effect_receipt")
        assert done["seq"] == receipt_record["seq"]
        found = history(client, first)
        assert found["status"] == "completed"
        assert [(e["kind"], e["user"], e["to"]) for e in found["entries"]] == [
            ("created", None, None),
            ("claimed", "ann", None),
            ("released", "ann", None),
            ("claimed", "bob", None),
            ("reassigned", "bob", "carol"),
            ("claimed", "carol", None),
            ("completed", "carol", None),
        ]
        last = found["entries"][-1]
        assert (last["status"], last["receipt_seq"]) == ("ok", done["seq"])
        times = [e["at_unix_ms"] for e in found["entries"]]
        assert times == sorted(times)
        assert [t["intent"] for t in ok(client.get("/v1/tasks"))["tasks"]] == [second]
        assert error_of(client.get(f"/v1/tasks/{first}"), 404)["code"] == "node.task_unknown"
        # Unclaimed: completing without a user still works (as before the inbox).
        ok(post(client, second, "complete", status="error", payload={"reason": "no"}))
        last = history(client, second)["entries"][-1]
        assert (last["kind"], last["user"], last["status"]) == ("completed", None, "error")


def test_a_receipt_from_elsewhere_closes_the_task(world_path: Path) -> None:
    with human_node(world_path) as (node, client):
        [intent] = open_tasks(client, 1)
        ok(post(client, intent, "claim", user="ann"))
        settled = ok(post_receipt(client, receipt(node.world_id, intent)))
        found = history(client, intent)
        assert found["status"] == "closed"
        assert found["entries"][-1] | {"at_unix_ms": 0} == {
            "kind": "closed",
            "at_unix_ms": 0,
            "user": None,
            "to": None,
            "status": None,
            "receipt_seq": settled["seq"],
        }
        assert ok(client.get("/v1/tasks"))["tasks"] == []


def test_roles_assignees_and_filters_over_http(world_path: Path) -> None:
    with human_node(world_path) as (node, client):
        [real] = open_tasks(client, 1)
        publish(
            node,
            synthetic("i-gated", title="Approve", roles=["reviewer", "lead"], data={"n": 1}),
            synthetic("i-ann", title="For Ann", assignee="ann", roles=["lead"]),
        )
        gated = ok(client.get("/v1/tasks/i-gated"))
        assert (gated["title"], gated["roles"], gated["data"]) == (
            "Approve",
            ["reviewer", "lead"],
            {"n": 1},
        )
        for roles in ([], ["intern"]):
            refused = post(client, "i-gated", "claim", user="bob", roles=roles)
            assert error_of(refused, 403)["code"] == "node.task_forbidden"
            assert error_of(refused, 403)["detail"] == {"roles": ["reviewer", "lead"]}
        ok(post(client, "i-gated", "claim", user="bob", roles=["intern", "lead"]))

        def listed(**query: Any) -> list[str]:
            return [t["intent"] for t in ok(client.get("/v1/tasks", params=query))["tasks"]]

        assert listed() == [real, "i-gated", "i-ann"]
        assert listed(assignee="ann") == ["i-ann"]
        assert listed(role="lead") == ["i-gated", "i-ann"]
        assert listed(role="reviewer", status="claimed") == ["i-gated"]
        assert listed(status="open") == [real, "i-ann"]
        assert listed(status="open", limit=1) == [real]
        assert listed(assignee="nobody") == []
        bad = client.get("/v1/tasks", params={"status": "done"})
        assert error_of(bad, 422)["code"] == "request.invalid"
        big = client.get("/v1/tasks", params={"limit": node.limits.tasks_per_request_max + 1})
        assert error_of(big, 400)["code"] == "node.limit_exceeded"


def test_every_refusal_over_http_changes_nothing(world_path: Path) -> None:
    with human_node(world_path, task_user_chars_max=8, task_roles_max=2) as (node, client):
        held, free = open_tasks(client, 2)
        publish(node, synthetic("i-ann", assignee="ann", roles=["lead"]))
        ok(post(client, held, "claim", user="bob"))
        path = inbox_file(world_path)

        def snapshot() -> Any:
            return (
                path.read_bytes(),
                client.get("/v1/tasks").json(),
                [history(client, i) for i in (held, free, "i-ann")],
                journal(client),
            )

        refusals: list[tuple[Callable[[], Any], int, str]] = [
            (lambda: post(client, held, "claim", user="carol"), 409, "node.task_claimed"),
            (lambda: post(client, held, "release", user="carol"), 409, "node.task_not_holder"),
            (lambda: post(client, free, "release", user="carol"), 409, "node.task_not_holder"),
            (
                lambda: post(client, held, "reassign", user="carol", to="carol"),
                409,
                "node.task_not_holder",
            ),
            (
                lambda: post(client, held, "complete", status="ok", user="carol"),
                409,
                "node.task_not_holder",
            ),
            (
                lambda: post(client, "i-ann", "claim", user="bob", roles=["lead"]),
                409,
                "node.task_not_assignee",
            ),
            (lambda: post(client, "i-ann", "claim", user="ann"), 403, "node.task_forbidden"),
            (lambda: post(client, "nope", "claim", user="ann"), 404, "node.task_unknown"),
            (lambda: post(client, "nope", "release", user="ann"), 404, "node.task_unknown"),
            (
                lambda: post(client, "nope", "reassign", user="ann", to="bob"),
                404,
                "node.task_unknown",
            ),
            (lambda: client.get("/v1/tasks/nope/history"), 404, "node.task_unknown"),
            (lambda: post(client, free, "claim", user=""), 422, "request.invalid"),
            (lambda: post(client, free, "claim"), 422, "request.invalid"),
            (lambda: post(client, free, "claim", user="ann", extra=1), 422, "request.invalid"),
            (lambda: post(client, free, "claim", user="a" * 9), 400, "node.limit_exceeded"),
            (
                lambda: post(client, free, "claim", user="ann", roles=["a", "b", "c"]),
                400,
                "node.limit_exceeded",
            ),
            (lambda: post(client, free, "claim", user="ann", roles=[""]), 422, "request.invalid"),
            (
                lambda: post(client, free, "reassign", user="ann", to="b" * 9),
                400,
                "node.limit_exceeded",
            ),
            (lambda: post(client, free, "reassign", user="ann"), 422, "request.invalid"),
            (lambda: post(client, free, "complete", status="ok", user=""), 422, "request.invalid"),
        ]
        for request, status, code in refusals:
            before = snapshot()
            response = request()
            assert error_of(response, status)["code"] == code, response.text
            assert snapshot() == before, code


def test_a_history_at_its_limit_refuses_changes_but_completes(world_path: Path) -> None:
    with human_node(world_path, task_history_max=3) as (_, client):
        [intent] = open_tasks(client, 1)
        ok(post(client, intent, "claim", user="ann"))
        before = inbox_file(world_path).read_bytes()
        refused = post(client, intent, "release", user="ann")
        assert error_of(refused, 409)["code"] == "node.task_history_full"
        assert inbox_file(world_path).read_bytes() == before
        ok(post(client, intent, "complete", status="ok", payload={"ok": True}, user="ann"))
        assert [e["kind"] for e in history(client, intent)["entries"]] == [
            "created",
            "claimed",
            "completed",
        ]


def test_an_unwritable_inbox_refuses_with_nothing_changed(
    world_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with human_node(world_path) as (node, client):
        [intent] = open_tasks(client, 1)
        assert node.inbox is not None
        inbox_io = node.inbox._file
        assert inbox_io is not None

        def full(*_: Any) -> None:
            raise OSError(28, "No space left on device")

        monkeypatch.setattr(inbox_io, "append", full)
        refused = post(client, intent, "claim", user="ann")
        assert error_of(refused, 503)["code"] == "node.inbox_unwritable"
        assert ok(client.get(f"/v1/tasks/{intent}"))["status"] == "open"
        assert [e["kind"] for e in history(client, intent)["entries"]] == ["created"]


def test_the_inbox_survives_a_node_restart(world_path: Path) -> None:
    with human_node(world_path) as (_, client):
        first, second = open_tasks(client, 2)
        ok(post(client, first, "claim", user="ann"))
        ok(post(client, second, "reassign", user="ann", to="bob"))
        before = [history(client, i) for i in (first, second)]
    with human_node(world_path) as (_, client):
        assert [history(client, i) for i in (first, second)] == before
        shown = ok(client.get(f"/v1/tasks/{first}"))
        assert (shown["status"], shown["holder"]) == ("claimed", "ann")
        assert ok(client.get(f"/v1/tasks/{second}"))["assignee"] == "bob"
        refused = post(client, first, "claim", user="bob")
        assert error_of(refused, 409)["code"] == "node.task_claimed"
        ok(post(client, first, "complete", status="ok", payload={"ok": True}, user="ann"))
    with human_node(world_path) as (_, client):
        assert history(client, first)["status"] == "completed"
        assert [t["intent"] for t in ok(client.get("/v1/tasks"))["tasks"]] == [second]


def test_a_corrupt_inbox_file_stops_the_node_from_starting(world_path: Path) -> None:
    with human_node(world_path) as (_, client):
        open_tasks(client, 1)
    path = inbox_file(world_path)
    path.write_bytes(b"garbage\n" + path.read_bytes())
    human = HumanAdapter(ADAPTER, ADAPTER_SEED)
    node = open_node(world_path, human=human)
    with pytest.raises(InboxCorruptError):
        node.start()


def test_without_a_human_adapter_the_new_endpoints_are_disabled(world_path: Path) -> None:
    with open_node(world_path) as node:
        client = authorize(TestClient(create_app(node)), node)
        for response in (
            post(client, "x", "claim"),  # as the client's identity
            post(client, "x", "release"),
            post(client, "x", "reassign", to="bob"),
            client.get("/v1/tasks/x/history"),
        ):
            assert error_of(response, 409)["code"] == "node.human_disabled"
    assert not inbox_file(world_path).exists()


def test_openapi_describes_the_inbox(world_path: Path) -> None:
    with human_node(world_path) as (_, client):
        document = ok(client.get("/openapi.json"))
        for path in ("claim", "release", "reassign"):
            assert "post" in document["paths"][f"/v1/tasks/{{intent}}/{path}"]
        assert "get" in document["paths"]["/v1/tasks/{intent}/history"]
        schemas = document["components"]["schemas"]
        assert {"holder", "assignee", "roles", "title"} <= set(schemas["TaskBody"]["properties"])
        assert "TaskHistoryResponse" in schemas
