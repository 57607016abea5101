"""The attacks of issue 31 on identities, against a real `aos node up` process serving a flow
world (spec/04 §9.8): the remote-code-execution pair without `deploy`; mallory, who is
neither the assignee nor holds the role, on a human task; effect params read without
`read:params`; a keychain placeholder in a workload, which must not become a secret (spec/11
§1.7). Each refusal leaves the world as it was."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.flows_world.test_flows_node import (
    START_TIMEOUT_S,
    _readline,
    aos,
    aos_json,
    running,
    waiting_for,
    waits,
)

PAY_FLOW = """
name: t/pay
steps:
  - name: approve
    tasks:
      - name: approve
        do: human
        title: "Pay order {{ workload.order }}"
        assignee: alice
        roles: [finance]
        data: {card: "{{ workload.head }}{{ workload.tail }}"}
"""
"""A payment a person approves; the card number is made only in the task's params (the
workload carries its two halves), so it is seen nowhere but where params are."""
CARD = "4111111122223333"
WORKLOAD = {"order": "A-7", "head": CARD[:8], "tail": CARD[8:]}
RCE_PLAYBOOK = """
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: t/rce}
workflow:
  - step: start
    tool:
      kind: python
      code: |
        import os
        result = os.listdir("/")
"""
POLL_S_MAX = 60.0


@dataclass
class Served:
    url: str
    world: Path
    tokens: dict[str, str]

    def headers(self, who: str | None) -> dict[str, str]:
        return {} if who is None else {"authorization": f"Bearer {self.tokens[who]}"}

    def get(self, path: str, who: str | None, **options: Any) -> httpx.Response:
        return httpx.get(self.url + path, headers=self.headers(who), timeout=30, **options)

    def post(self, path: str, who: str | None, body: Any) -> httpx.Response:
        return httpx.post(self.url + path, headers=self.headers(who), json=body, timeout=30)

    def mark(self) -> tuple[int, Any]:
        """The world's height and journal head (read as the admin)."""
        world = self.get("/v1/world", "admin").json()
        head = self.get("/v1/journal", "admin", params={"before": world["height"] + 1, "limit": 1})
        return world["height"], head.json()["records"][0]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    base = tmp_path_factory.mktemp("attacks")
    world, keys = base / "w", base / "keys"
    created = aos_json("flow", "world", "create", world, "--keys", keys, "--no-sync")
    tokens = {"admin": created["admin_token"]}
    people = {
        "alice": ["--scope", "task", "--scope", "read", "--role", "finance"],
        "mallory": ["--scope", "task", "--scope", "read", "--scope", "send"],
        "reader": ["--scope", "read"],
        "auditor": ["--scope", "read", "--scope", "read:params"],
        "operator": ["--scope", "read", "--scope", "send", "--scope", "operate"],
    }
    for name, scopes in people.items():
        made = aos_json("identity", "create", name, *scopes, "--world", world)
        tokens[name] = made["token"]
    up = ["node", "up", "--world", str(world), "--bind", "127.0.0.1:0", "--json", "--no-sync"]
    up += ["--human-adapter", "aos/human@1", "--human-key", str(keys / "human.key")]
    with running(*up) as node:
        announced = json.loads(_readline(node, START_TIMEOUT_S))
        assert announced["admin_token"] is None  # the world made its first admin already
        yield Served(str(announced["url"]), world, tokens)


def error_code(answer: httpx.Response) -> str:
    return str(answer.json()["error"]["code"])


def test_the_rce_pair_is_refused_without_deploy(served: Served) -> None:
    before = served.mark()
    for who, status, code in [
        (None, 401, "auth.unauthenticated"),
        ("operator", 403, "auth.forbidden"),
        ("mallory", 403, "auth.forbidden"),
    ]:
        deployed = served.post("/v1/flows", who, {"text": RCE_PLAYBOOK})
        assert (deployed.status_code, error_code(deployed)) == (status, code), deployed.text
        ran = served.post("/v1/flows/t%2Frce/run", who, {"workload": None})
        assert ran.status_code in (401, 404), ran.text  # nothing deployed to run
        assert served.mark() == before
    listing = served.get("/v1/flows", "admin").json()
    assert "t/rce" not in json.dumps(listing)


def start_payment(served: Served, exec_id: str) -> str:
    """Deploy (admin) and run (mallory may send) the payment; the task's intent."""
    assert served.post("/v1/flows", "admin", {"text": PAY_FLOW}).status_code == 200
    run = served.post("/v1/flows/t%2Fpay/run", "mallory", {"workload": WORKLOAD, "exec": exec_id})
    assert run.status_code == 200, run.text
    deadline = time.monotonic() + POLL_S_MAX
    while True:
        state = served.get(f"/v1/executions/{exec_id}", "admin").json()
        if waiting_for("human")(state):
            break
        assert time.monotonic() < deadline, state
        time.sleep(0.05)
    [wait] = waits(state)
    tasks = served.get("/v1/tasks", "alice").json()["tasks"]
    [task] = [t for t in tasks if t["origin"]["key"] == exec_id]
    assert wait["kind"] == "human"
    return str(task["intent"])


def test_mallory_can_neither_claim_nor_complete(served: Served) -> None:
    intent = start_payment(served, "pay-1")
    before = served.mark()
    approve = {"status": "ok", "payload": {"approved": True}}
    refusals = [
        (served.post(f"/v1/tasks/{intent}/complete", "mallory", approve), "node.task_not_assignee"),
        (served.post(f"/v1/tasks/{intent}/claim", "mallory", {}), "node.task_not_assignee"),
        (
            served.post(f"/v1/tasks/{intent}/claim", "mallory", {"user": "alice"}),
            "auth.impersonation",
        ),
        (
            served.post(f"/v1/tasks/{intent}/claim", "mallory", {"roles": ["finance"]}),
            "auth.impersonation",
        ),
        (
            served.post(f"/v1/tasks/{intent}/reassign", "mallory", {"to": "mallory"}),
            "node.task_not_assignee",
        ),
        (served.post(f"/v1/tasks/{intent}/complete", "reader", approve), "auth.forbidden"),
        (served.post(f"/v1/tasks/{intent}/complete", None, approve), "auth.unauthenticated"),
    ]
    for answer, code in refusals:
        assert answer.status_code in (401, 403, 409), answer.text
        assert error_code(answer) == code, answer.text
    # The CLI: `--user` names the identity the token is; mallory's token is mallory.
    done = aos("task", "complete", intent, "--payload-json", '{"approved": true}', "--json",
               "--node", served.url, "--token", served.tokens["mallory"])  # fmt: skip
    assert done.returncode == 1 and json.loads(done.stdout)["error"]["code"] == (
        "node.task_not_assignee"
    )
    assert served.mark() == before
    state = served.get("/v1/executions/pay-1", "admin").json()
    assert state["status"] == "running" and waiting_for("human")(state)  # the flow waits on
    history = served.get(f"/v1/tasks/{intent}/history", "alice").json()
    assert [e["kind"] for e in history["entries"]] == ["created"]


def test_alice_completes_and_the_history_names_her(served: Served) -> None:
    intent = start_payment(served, "pay-2")
    claimed = aos_json("task", "claim", intent, "--node", served.url,
                       "--token", served.tokens["alice"])  # fmt: skip
    assert claimed["holder"] == "alice"
    done = served.post(
        f"/v1/tasks/{intent}/complete", "alice", {"status": "ok", "payload": {"approved": True}}
    )
    assert done.status_code == 200, done.text
    entries = served.get(f"/v1/tasks/{intent}/history", "alice").json()["entries"]
    assert [(e["kind"], e["user"]) for e in entries][1:] == [
        ("claimed", "alice"),
        ("completed", "alice"),
    ]
    record = served.get(f"/v1/records/{done.json()['seq']}", "auditor").json()["record"]
    assert record["kind"] == "effect_receipt" and record["by"] == "alice"


def test_params_are_redacted_without_read_params(served: Served) -> None:
    intent = start_payment(served, "pay-3")
    journal = served.get("/v1/journal", "auditor", params={"kind": "effect_intent"}).json()
    [entry] = [r for r in journal["records"] if r["record"].get("intent") == intent]
    seq = entry["seq"]
    shows = [  # each shows the task's params (or its fields) in full
        f"/v1/intents/{intent}",
        f"/v1/records/{seq}",
        "/v1/journal?kind=effect_intent",
        f"/v1/trace/{intent}",
        f"/v1/tasks/{intent}",
        "/v1/tasks",
        f"/ui/records/{seq}",
    ]
    summaries = ["/v1/executions/pay-3", "/v1/executions/pay-3/events", "/ui/journal", "/ui"]
    for path in shows + summaries:
        hidden = served.get(path, "reader")
        assert hidden.status_code == 200, (path, hidden.text)
        assert CARD not in hidden.text, path
    for path in shows:
        assert CARD in served.get(path, "auditor").text, path
        assert "$redacted" in served.get(path, "reader").text, path
    streamed = _stream(served, "reader", after=seq - 1)
    assert CARD not in streamed and "$redacted" in streamed
    assert CARD in _stream(served, "auditor", after=seq - 1)
    listed = aos("task", "show", intent, "--node", served.url, "--json",
                 "--token", served.tokens["reader"])  # fmt: skip
    assert listed.returncode == 0 and CARD not in listed.stdout
    alice = served.get(f"/v1/tasks/{intent}", "alice").json()
    assert str(alice["data"]["card"]) == CARD  # the person asked to decide sees its data
    assert "$redacted" in json.dumps(alice["params"])


def _stream(served: Served, who: str, *, after: int) -> str:
    """The journal's live stream from `after`, for a moment."""
    found = []
    with httpx.stream(
        "GET",
        f"{served.url}/v1/journal/stream",
        params={"after": after},
        headers=served.headers(who),
        timeout=10,
    ) as answer:
        assert answer.status_code == 200
        started = time.monotonic()
        for line in answer.iter_lines():
            found.append(line)
            if len(found) > 4 or time.monotonic() - started > 2:
                break
    return "\n".join(found)


LEAK_FLOW = """
name: t/leak
keychain: [{name: api, kind: bearer_token}, {name: db, kind: postgres_credential}]
steps:
  - name: post
    tasks:
      - do: call
        tool:
          kind: http
          method: POST
          url: "URL"
          headers: {Authorization: "Bearer {{ keychain.api }}", X-Note: "{{ workload.note }}"}
          json: {note: "{{ workload.note }}"}
"""
"""A flow that sends its API token as a header and echoes a workload value beside it."""
API_SECRET = "api-s3cret-7f1c"
DB_SECRET = "postgresql://app:db-s3cret-9a2e@127.0.0.1/app"


class _Recorder(BaseHTTPRequestHandler):
    seen: list[str] = []  # noqa: RUF012 -- one list per server class

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.seen.append(str(self.headers) + body.decode())
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *args: Any) -> None:
        pass


def test_a_placeholder_in_a_workload_never_becomes_a_secret(
    served: Served, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """mallory may only run flows: she sends `${keychain:db}` as a workload value the flow
    renders into a header and a body. The declared use (`keychain.api` in the definition's
    header) still gets its secret; her placeholder reaches the server as the text it is."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/hook"
    keys = served.world.parent / "keys"
    config = tmp_path / "tools.yaml"
    config.write_text("keychain: {env_prefix: AOS_SECRET_}\n")
    monkeypatch.setenv("AOS_SECRET_api", API_SECRET)
    monkeypatch.setenv("AOS_SECRET_db", DB_SECRET)
    adapters = [
        ["adapter", "run", kind, "--node", served.url, "--key", str(keys / key),
         "--config", str(config)]
        for kind, key in (("keychain", "keychain.key"), ("tool-http", "http.key"))
    ]  # fmt: skip
    deployed = served.post("/v1/flows", "admin", {"text": LEAK_FLOW.replace("URL", url)})
    assert deployed.status_code == 200, deployed.text
    try:
        with running(*adapters[0]), running(*adapters[1]):
            workload = {"note": "${keychain:db}"}
            ran = served.post("/v1/flows/t%2Fleak/run", "mallory", {"workload": workload})
            assert ran.status_code == 200, ran.text
            exec_id = ran.json()["exec"]
            deadline = time.monotonic() + POLL_S_MAX
            while (state := served.get(f"/v1/executions/{exec_id}", "admin").json())[
                "status"
            ] == "running":
                assert time.monotonic() < deadline, state
                time.sleep(0.05)
    finally:
        server.shutdown()
    assert state["status"] == "completed", state
    [request] = _Recorder.seen
    assert f"Authorization: Bearer {API_SECRET}" in request
    assert "X-Note: ${keychain:db}" in request and '"note":"${keychain:db}"' in request
    assert "db-s3cret" not in request
