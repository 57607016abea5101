"""The task inbox of a real `aos node up` process, driven by the `aos task` commands: claims,
assignees and history survive the node being killed (SIGKILL) and started again."""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from aos.cli.main import main
from aos.kernel.node.identities import SCOPES, IdentityStore
from aos.kernel.signing.keys import write_seed
from tests.auth_fixtures import node_http, remember_node
from tests.test_node_process import _AOS, START_TIMEOUT_S, _readline, make_world, node_process
from tests.test_receipts import ADAPTER_SEED
from tests.test_world import ping

ADAPTER = "demo/adapter@1"


TOKENS: dict[str, str] = {}
"""Each user's token (identities of the test's world, made before its node starts)."""


def make_people(world: Path) -> None:
    """`admin`, and `ann` and `bob`, who hold the role `lead` and may work on tasks."""
    store = IdentityStore.of_world(world)
    TOKENS["admin"] = store.create("admin", SCOPES)[1]
    for user in ("ann", "bob"):
        TOKENS[user] = store.create(user, ["task", "read"], ["lead"])[1]


def _as(args: tuple[str, ...]) -> list[str]:
    """The token of the user `--user` names (a request acts as its identity), else admin's."""
    user = args[args.index("--user") + 1] if "--user" in args else "admin"
    return ["--token", TOKENS[user]]


def aos_task(url: str, *args: str) -> tuple[int, Any]:
    """Run `aos task ... --json` against the node: (exit code, its JSON)."""
    result = CliRunner().invoke(main, ["task", *args, "--node", url, "--json", *_as(args)])
    return result.exit_code, json.loads(result.output)


def aos_task_text(url: str, *args: str) -> str:
    result = CliRunner().invoke(main, ["task", *args, "--node", url, *_as(args)])
    assert result.exit_code == 0, result.output
    return result.output


def test_claims_and_history_survive_a_killed_node(tmp_path: Path) -> None:
    world = make_world(tmp_path / "w")
    make_people(world)
    key_file = tmp_path / "human.key"
    write_seed(key_file, ADAPTER_SEED)
    options = ["--human-adapter", ADAPTER, "--human-key", str(key_file)]
    command = [*_AOS, "node", "up", "--world", str(world), "--bind", "127.0.0.1:0"]
    command += ["--no-sync", "--json"]
    process = subprocess.Popen(
        [*command, *options], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        url = json.loads(_readline(process, START_TIMEOUT_S))["url"]
        remember_node(url, TOKENS["admin"])
        sent = node_http.post(
            f"{url}/v1/events",
            json={"schema": "demo/Ping@1", "value": ping("x", "effect", 2)},
            timeout=60,
        )
        assert sent.status_code == 200, sent.text
        code, listed = aos_task(url, "ls")
        assert code == 0
        first, second = (task["intent"] for task in listed["tasks"])
        code, claimed = aos_task(url, "claim", first, "--user", "ann", "--role", "lead")
        assert code == 0 and (claimed["status"], claimed["holder"]) == ("claimed", "ann")
        code, handed = aos_task(url, "reassign", second, "--user", "ann", "--to", "bob")
        assert code == 0 and handed["assignee"] == "bob"
        code, mine = aos_task(url, "ls", "--status", "claimed")
        assert [task["intent"] for task in mine["tasks"]] == [first]
        table = aos_task_text(url, "ls", "--assignee", "bob")
        assert second in table and first not in table
        before = aos_task(url, "history", first)[1]
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)
    with node_process(world, *options) as (url, _):
        remember_node(url, TOKENS["admin"])
        code, found = aos_task(url, "history", first)
        assert code == 0 and found == before
        assert [(e["kind"], e["user"]) for e in found["entries"]] == [
            ("created", None),
            ("claimed", "ann"),
        ]
        assert aos_task(url, "show", first)[1]["holder"] == "ann"
        assert aos_task(url, "show", second)[1]["assignee"] == "bob"
        code, refused = aos_task(url, "claim", first, "--user", "bob")
        assert code == 1 and refused["error"]["code"] == "node.task_claimed"
        code, refused = aos_task(url, "complete", first, "--payload-json", '{"ok": true}')
        assert code == 1 and refused["error"]["code"] == "node.task_not_holder"
        assert aos_task(url, "release", first, "--user", "ann")[0] == 0
        assert aos_task(url, "claim", first, "--user", "bob")[0] == 0
        code, done = aos_task(
            url, "complete", first, "--user", "bob", "--payload-json", '{"ok": true}'
        )
        assert code == 0 and done["delivered"] is True
        code, unassigned = aos_task(url, "reassign", second, "--user", "bob", "--unassign")
        assert code == 0 and unassigned["assignee"] is None
        text = aos_task_text(url, "history", first)
        assert "completed" in text and f"receipt seq {done['seq']}" in text and "bob" in text
        assert [task["intent"] for task in aos_task(url, "ls")[1]["tasks"]] == [second]
