"""Reading a proposal's body (`POST /v1/gov/proposals`, spec/04 §9.3), bounded and off the
writer thread.

The body is `{"patch": ..., "modules": [binary, ...], "expected_hash": HASH or null}`: CBOR
(module binaries are byte strings, up to `proposal_bytes_max`), or JSON without binaries (a
JSON body is bound like any other, by `request_bytes_max`: the request guard sees to both).
Decoding may allocate far more than the bytes it reads (a small item becomes a Python object
of tens of bytes), so a CBOR body's items are counted first, by a walk of their heads that
allocates nothing, and a body of more than `proposal_values_max` is refused before it is
decoded. Then the patch is hashed and validated, and each binary hashed: all of it needs no
world, so the node runs it in a worker thread, one proposal at a time (`read_proposal`), and
the writer thread only stores and journals.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aos.kernel import cbor
from aos.kernel.governance.proposals import PreparedPatch, prepare_patch
from aos.kernel.hashing import Hash, hash_bytes
from aos.kernel.node.errors import NodeLimitExceededError, RequestInvalidError
from aos.kernel.text import jsontext

_HEAD_LENGTH = {24: 1, 25: 2, 26: 4, 27: 8}
"""Bytes of the argument that follows a CBOR item's first byte, by its low five bits."""


@dataclass(frozen=True)
class ProposalRequest:
    patch: Any
    prepared: PreparedPatch
    blobs: dict[Hash, bytes]
    """The module binaries, by hash."""


def read_proposal(body: bytes, *, is_cbor: bool, values_max: int) -> ProposalRequest:
    """The proposal a body holds (CBOR, or JSON), its patch hashed and validated, or a typed
    error."""
    if is_cbor:
        values = count_cbor_values(body, values_max)
        if values > values_max:
            raise NodeLimitExceededError(
                f"the proposal holds more than {values_max} values (proposal_values_max)",
                limit=values_max,
                value=values,
            )
        parsed = cbor.decode(body, bytes_max=len(body))
    else:
        parsed = cbor.from_json(jsontext.parse(body, path="$", bytes_max=len(body)))
    patch, modules, expected = _fields(parsed)
    return ProposalRequest(
        patch=patch,
        prepared=prepare_patch(patch, expected),
        blobs={hash_bytes(binary): binary for binary in modules},
    )


def _fields(parsed: Any) -> tuple[Any, list[bytes], str | None]:
    if not isinstance(parsed, dict) or "patch" not in parsed:
        raise RequestInvalidError(
            'the body is {"patch": ..., "modules": [...], "expected_hash": ...}'
        )
    unknown = set(parsed) - {"patch", "modules", "expected_hash"}
    modules = parsed.get("modules") or []
    expected = parsed.get("expected_hash")
    if unknown or not isinstance(modules, list) or not all(isinstance(m, bytes) for m in modules):
        raise RequestInvalidError("a proposal has patch, modules (byte strings), expected_hash")
    if expected is not None and not isinstance(expected, str):
        raise RequestInvalidError("expected_hash is a hash text or null", path="$.expected_hash")
    return parsed["patch"], [m for m in modules if isinstance(m, bytes)], expected


def count_cbor_values(data: bytes, stop_after: int) -> int:
    """How many values `data`'s first CBOR item holds, itself included (a tag is not one),
    counting no further than `stop_after + 1`: a walk of the item heads that skips over byte
    and text strings and allocates nothing. Malformed data stops the count (the decoder then
    says what is wrong)."""
    position, pending, count = 0, 1, 0
    size = len(data)
    while pending and position < size and count <= stop_after:
        head = data[position]
        major, low = head >> 5, head & 0x1F
        argument_bytes = _HEAD_LENGTH.get(low, 0)
        if low > 27 or position + 1 + argument_bytes > size:
            break  # reserved, indefinite or truncated
        argument = (
            int.from_bytes(data[position + 1 : position + 1 + argument_bytes], "big")
            if argument_bytes
            else low
        )
        position += 1 + argument_bytes
        if major == 6:
            continue  # a tag (the self-describe prefix): the item it tags is the value
        pending -= 1
        count += 1
        if major in (2, 3):  # a byte or text string: its bytes follow
            position += argument
        elif major == 4:
            pending += argument
        elif major == 5:
            pending += 2 * argument
    return count
