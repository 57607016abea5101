"""How the CLI writes a world's things in text: cells and keys, hashes, values and logical
times. Light (no world machinery), so that `aos world status` imports it alone."""

from __future__ import annotations

import datetime
import json
from typing import Any

from aos.kernel import cbor

SUMMARY_CHARS_MAX = 100
HASH_DIGITS_SHORT = 12


def compact_text(value: Any) -> str:
    return json.dumps(
        cbor.to_json(value), sort_keys=True, ensure_ascii=False, separators=(",", ":")
    )


def clip(text: str) -> str:
    return text if len(text) <= SUMMARY_CHARS_MAX else text[: SUMMARY_CHARS_MAX - 3] + "..."


def short(hash_text: str) -> str:
    prefix, _, digits = hash_text.partition(":")
    return f"{prefix}:{digits[:HASH_DIGITS_SHORT]}"


def key_value(key_bytes: Any) -> Any:
    """Decode canonical key bytes as journaled (None for an unkeyed cell)."""
    return cbor.decode(key_bytes) if isinstance(key_bytes, bytes) and key_bytes else None


def key_json(key_bytes: Any) -> Any:
    return cbor.to_json(key_value(key_bytes))


def key_text(key: Any) -> str:
    if key is None:
        return "-"
    return key if isinstance(key, str) else compact_text(key)


def cell_text(workflow: str, key: Any) -> str:
    return workflow if key is None else f"{workflow}[{key_text(key)}]"


def time_text(ns: int) -> str:
    moment = datetime.datetime.fromtimestamp(ns // 1_000_000_000, tz=datetime.UTC)
    return f"{ns}  ({moment.strftime('%Y-%m-%dT%H:%M:%SZ')})"
