"""`aos flow --node URL`: the flow operations over a node's HTTP API (`/v1/flows`,
`/v1/executions`; spec/11-flows.md §9.1). Answers are JSON; a refusal is raised as the
node's own error code, so the CLI reports it exactly as when it opens the world itself.

One client keeps one HTTP connection pool for its life (made at the first request): polling
an execution's status reuses a connection instead of opening one per request, and a plain
`http://` node needs no TLS context, whose certificate store costs tens of milliseconds to
load. An `https://` node is verified (kernel/node/tls.py: `AOS_CA`, `AOS_CLIENT_CERT/KEY`)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote, urlencode

import httpx

from aos.flows.operations import TERMINAL_STATUSES
from aos.kernel import cbor
from aos.kernel.node.errors import NodeUnreachableError, refused
from aos.kernel.node.tls import client_verify

REQUEST_TIMEOUT_S = 60.0
SHADOW_TIMEOUT_S = 900.0
"""How long a shadow or a migration may take over HTTP (the node bounds it by its own
`shadow_ms_max`, 10 minutes by default)."""
WAIT_MS_PER_REQUEST = 20_000
"""Longest one long-poll asks the node to wait (below its default `long_poll_ms_max`, 30 s,
and the request timeout); a longer wait is several requests."""


class FlowNodeClient:
    def __init__(
        self, url: str, *, timeout_s: float = REQUEST_TIMEOUT_S, token: str | None = None
    ) -> None:
        """`token`: the identity's bearer token (spec/04 §9.8), sent with every request."""
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s
        self._headers = {} if token is None else {"authorization": f"Bearer {token}"}
        self._http: httpx.Client | None = None

    def close(self) -> None:
        if self._http is not None:
            self._http.close()
            self._http = None

    def __enter__(self) -> FlowNodeClient:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def deploy(self, text: str, *, source: str = "") -> dict[str, Any]:
        """Deploy a definition's text (YAML or JSON); `source` names it in errors."""
        return self._call("POST", "/v1/flows", {"text": text, "source": source})

    def listing(
        self,
        *,
        flow: str | None = None,
        status: str | None = None,
        after: str | None = None,
        limit: int | None = None,
    ) -> dict[str, Any]:
        """Deployed flows, and one page of executions (`next_after` continues it)."""
        given = {"flow": flow, "status": status, "after": after, "limit": limit}
        query = urlencode({name: value for name, value in given.items() if value is not None})
        return self._call("GET", "/v1/flows" + (f"?{query}" if query else ""))

    def run(
        self,
        name: str,
        workload: Any,
        *,
        exec_id: str | None = None,
        version: int | None = None,
        wait_ms: int = 0,
    ) -> dict[str, Any]:
        """Start an execution; with `wait_ms` (at most the node's `long_poll_ms_max`), the
        answer comes once it ended or after that many ms, with its status then."""
        body = {"workload": cbor.to_json(workload), "exec": exec_id, "version": version}
        if wait_ms:
            body["wait_ms"] = wait_ms
        return self._call("POST", f"/v1/flows/{quote(name, safe='')}/run", body)

    def status(self, exec_id: str, *, wait_ms: int = 0) -> dict[str, Any]:
        """The execution's state; with `wait_ms`, once it ended or after that many ms."""
        query = f"?wait_ms={wait_ms}" if wait_ms else ""
        return self._call("GET", f"/v1/executions/{quote(exec_id, safe='')}{query}")

    def run_to_end(
        self,
        name: str,
        workload: Any,
        *,
        wait_s: float,
        exec_id: str | None = None,
        version: int | None = None,
    ) -> dict[str, Any]:
        """Start an execution of `name` and wait (long-polls) up to `wait_s` in all for its
        end: the run's answer, with the status then."""
        wait_ms = min(int(wait_s * 1000), WAIT_MS_PER_REQUEST)
        started = self.run(name, workload, exec_id=exec_id, version=version, wait_ms=wait_ms)
        if started["status"] not in TERMINAL_STATUSES:
            started["status"] = self.wait(str(started["exec"]), wait_s - wait_ms / 1000)["status"]
        return started

    def wait(self, exec_id: str, wait_s: float) -> dict[str, Any]:
        """The execution's state once it ended, or when `wait_s` passed: long-polls of at most
        `WAIT_MS_PER_REQUEST` each, so the answer comes as soon as its last step is durable."""
        deadline = time.monotonic() + wait_s
        while True:
            left_ms = int((deadline - time.monotonic()) * 1000)
            state = self.status(exec_id, wait_ms=max(0, min(left_ms, WAIT_MS_PER_REQUEST)))
            if state.get("status") in TERMINAL_STATUSES or left_ms <= 0:
                return state

    def events(self, exec_id: str) -> list[dict[str, Any]]:
        """The execution's whole history as journaled so far (page after page)."""
        found: list[dict[str, Any]] = []
        after = 0
        while True:
            page = self.events_page(exec_id, after=after)
            found.extend(page["events"])
            if not page["more"]:
                return found
            after = int(page["last_seq"])

    def events_page(self, exec_id: str, *, after: int = 0, wait_ms: int = 0) -> dict[str, Any]:
        """The events of the execution's step records after journal sequence `after`: a
        page (`last_seq` is where the next starts); with `wait_ms`, an empty page of a
        running execution is answered after its next step or after that many ms."""
        query = f"?after={after}" + (f"&wait_ms={wait_ms}" if wait_ms else "")
        return self._call("GET", f"/v1/executions/{quote(exec_id, safe='')}/events{query}")

    def follow(self, exec_id: str) -> Iterator[dict[str, Any]]:
        """The execution's events, each once, as the node journals them (long-polls: no
        polling interval), until it has ended and every event was given."""
        after = 0
        while True:
            page = self.events_page(exec_id, after=after, wait_ms=WAIT_MS_PER_REQUEST)
            yield from page["events"]
            after = int(page["last_seq"])
            if page["status"] in TERMINAL_STATUSES and not page["more"]:
                return

    def signal(
        self, exec_id: str, name: str, payload: Any, expect_version: int | None
    ) -> dict[str, Any]:
        body = {"name": name, "payload": cbor.to_json(payload), "expect_version": expect_version}
        return self._call("POST", f"/v1/executions/{quote(exec_id, safe='')}/signal", body)

    def cancel(self, exec_id: str, reason: str | None) -> dict[str, Any]:
        body = {"reason": reason}
        return self._call("POST", f"/v1/executions/{quote(exec_id, safe='')}/cancel", body)

    def shadow(
        self,
        name: str,
        *,
        version: int | None = None,
        text: str | None = None,
        source: str = "",
        execs: tuple[str, ...] = (),
        executions_max: int,
    ) -> dict[str, Any]:
        """The shadow report of a deployed version of `name`, or of the definition `text`
        (spec/11 §10.1). It replays the world's history: it may take as long as the node's
        `shadow_ms_max` allows."""
        body = {
            "version": version,
            "text": text,
            "source": source,
            "exec": list(execs),
            "executions_max": executions_max,
        }
        path = f"/v1/flows/{quote(name, safe='')}/shadow"
        return self._call("POST", path, body, timeout_s=SHADOW_TIMEOUT_S)

    def migrate(self, exec_id: str, version: int | None) -> dict[str, Any]:
        """Move a running execution to another deployed version (spec/11 §10.2)."""
        path = f"/v1/executions/{quote(exec_id, safe='')}/migrate"
        return self._call("POST", path, {"version": version}, timeout_s=SHADOW_TIMEOUT_S)

    def migrate_flow(
        self, name: str, version: int | None, *, executions_max: int
    ) -> dict[str, Any]:
        """Move every running execution of `name` that a shadow allows (spec/11 §10.2)."""
        path = f"/v1/flows/{quote(name, safe='')}/migrate"
        body = {"version": version, "executions_max": executions_max}
        return self._call("POST", path, body, timeout_s=SHADOW_TIMEOUT_S)

    def _call(
        self, method: str, path: str, body: Any = None, *, timeout_s: float | None = None
    ) -> dict[str, Any]:
        if self._http is None:
            self._http = httpx.Client(
                timeout=self.timeout_s, verify=client_verify(self.url), headers=self._headers
            )
        try:
            response = self._http.request(
                method, self.url + path, json=body, timeout=timeout_s or self.timeout_s
            )
        except httpx.HTTPError as failure:
            raise NodeUnreachableError(f"{self.url}: {failure}") from None
        try:
            answer = response.json() if response.content else {}
        except ValueError:
            answer = {}
        if not isinstance(answer, dict):
            answer = {}
        if response.is_success:
            return answer
        error = answer.get("error")
        raise refused(error if isinstance(error, dict) else {}, response.text[:500])
