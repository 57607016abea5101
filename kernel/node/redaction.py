"""Redaction (spec/04-effects.md §9.8): a caller without `read:params` sees an effect's
params and a receipt's payload as `{"$redacted": "blake3:<hash>"}`, the hash of the value's
canonical CBOR, so two answers can still be compared, and nothing of the value itself.

What is redacted, wherever it appears in an answer (the JSON API, the journal's live stream,
the inspector's pages, the CLI reading through a node):
- an `effect_intent` record's `params`;
- an `effect_receipt` record's `body.payload`;
- a `receipt_rejected` record's `receipt` (the raw receipt, as sent);
- the `params` of an intent, lease or task answer (an object with `intent`, `effect` and
  `params`), and, for a caller without `task` either, a task's `title`, `description`,
  `form` and `data` (which come from its params: a person with `task` sees what they are
  asked to decide).
Redaction is of the answer, never of the world: the journal keeps every value.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from aos.kernel import cbor
from aos.kernel.hashing import hash_bytes, hash_value
from aos.kernel.world import records

REDACTED_KEY = "$redacted"
_MARKERS = (b'"params"', b'"payload"', b'"receipt"')
"""A JSON answer without any of these shows nothing to redact, and is sent as it is."""

Message = MutableMapping[str, Any]
Send = Callable[[Message], Awaitable[None]]


def redacted(value: Any) -> dict[str, str]:
    """The stand-in for a JSON-form value: the hash of its canonical CBOR."""
    try:
        digest = str(hash_value(cbor.from_json(value)))
    except cbor.CborError:
        text = json.dumps(value, sort_keys=True, separators=(",", ":"))
        digest = str(hash_bytes(text.encode("utf-8")))
    return {REDACTED_KEY: digest}


TASK_FIELDS = ("title", "description", "form", "data")


def redact(value: Any, *, tasks: bool = True) -> Any:
    """`value` (JSON form) with every param and payload it shows replaced by `redacted`; with
    `tasks`, a task's fields from its params too."""
    if isinstance(value, list):
        return [redact(item, tasks=tasks) for item in value]
    if not isinstance(value, dict):
        return value
    found = {key: redact(item, tasks=tasks) for key, item in value.items()}
    kind = value.get("kind")
    if kind == records.EFFECT_INTENT and "params" in found:
        found["params"] = redacted(value["params"])
    elif kind == records.EFFECT_RECEIPT and isinstance(found.get("body"), dict):
        if "payload" in found["body"]:
            found["body"] = {**found["body"], "payload": redacted(value["body"]["payload"])}
    elif kind == records.RECEIPT_REJECTED and "receipt" in found:
        found["receipt"] = redacted(value["receipt"])
    elif "params" in found and "intent" in found and "effect" in found:
        found["params"] = redacted(value["params"])
        for name in TASK_FIELDS if tasks else ():
            if found.get(name) is not None:
                found[name] = redacted(value[name])
    return found


def redacting(send: Send, *, tasks: bool = True) -> Send:
    """`send` with every JSON answer and server-sent event redacted on the way out (with
    `tasks`, tasks' fields too)."""
    held: list[Message] = []
    chunks: list[bytes] = []
    mode = ""

    async def sending(message: Message) -> None:
        nonlocal mode
        if message["type"] == "http.response.start":
            media = _content_type(message).split(";")[0].strip()
            mode = {"application/json": "json", _EVENTS: "events"}.get(media, "")
            if mode == "json":
                held.append(message)
                return
            await send(message)
            return
        if message["type"] != "http.response.body" or not mode:
            await send(message)
            return
        if mode == "events":
            body = bytes(message.get("body", b""))
            await send({**message, "body": _redact_events(body, tasks)})
            return
        chunks.append(bytes(message.get("body", b"")))
        if message.get("more_body", False):
            return
        body = _redact_json(b"".join(chunks), tasks)
        start = held.pop()
        headers = [(k, v) for k, v in start.get("headers", []) if k.lower() != b"content-length"]
        headers.append((b"content-length", str(len(body)).encode()))
        await send({**start, "headers": headers})
        await send({"type": "http.response.body", "body": body, "more_body": False})

    return sending


_EVENTS = "text/event-stream"


def _content_type(start: Message) -> str:
    for name, value in start.get("headers", []):
        if name.lower() == b"content-type":
            return bytes(value).decode("latin-1").lower()
    return ""


def _redact_json(body: bytes, tasks: bool) -> bytes:
    if not any(marker in body for marker in _MARKERS):
        return body
    try:
        value = json.loads(body)
    except ValueError:
        return body
    return json.dumps(
        redact(value, tasks=tasks), ensure_ascii=False, separators=(",", ":")
    ).encode()


def _redact_events(body: bytes, tasks: bool) -> bytes:
    """Each `data:` line of a server-sent event chunk, redacted."""
    if not any(marker in body for marker in _MARKERS):
        return body
    lines = body.split(b"\n")
    for index, line in enumerate(lines):
        if line.startswith(b"data: "):
            lines[index] = b"data: " + _redact_json(line[len(b"data: ") :], tasks)
    return b"\n".join(lines)
