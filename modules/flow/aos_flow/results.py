"""Results by reference (spec/11 §3.1, §7): what keeps an execution's state small however
large its results or long its loops.

`result_inline_bytes_max` is the most bytes of results kept inline. A step result whose
canonical encoding is longer is written to the CAS (spec/08 §4.4) and the state keeps
`{"$ref", "size"}`. A running loop keeps each finished iteration's result as its encoding
(`results_cbor`); the ones longer than a reference count against the limit, and after every
input, while they add up to more than it, the last of them (in item order) is written and
replaced by its reference: the results inline are the first ones, kept while the limit
allowed, and the loop's state grows by at most a reference per further result. A call inside
the loop asks its adapter to store any result the loop has no room left for
(`call_inline_max`). When the
loop is done its `results` list, built from those encodings without decoding them, is itself
written once it is longer than the limit. A loop an earlier interpreter started may keep plain
`results` (values): it ends as it began, inline."""

from __future__ import annotations

from typing import Any

from aos_flow.blobs import REF_BYTES_MAX
from aos_flow.run import Run
from aos_sdk import cbor

RESULTS_CBOR = "results_cbor"
# A loop keeps each finished iteration's result as its canonical encoding, decoded once when
# the loop is done: the results are otherwise decoded and encoded again with the state on
# every step of the loop (most of a long loop's step, in the guest's Python CBOR).


def step_result(run: Run, value: Any) -> Any:
    """A finished step's result as the state keeps it: itself, or its reference."""
    return run.blobs.by_reference(value, run.limits["result_inline_bytes_max"])


def keep(loop: dict[str, Any], index: int, value: Any) -> None:
    if RESULTS_CBOR in loop:
        loop[RESULTS_CBOR][index] = cbor.encode(value)
    else:  # a loop an earlier interpreter started keeps its results as values
        loop["results"][index] = value


def aggregate_results(run: Run, loop: dict[str, Any]) -> Any:
    """The `results` of a loop that is done, in item order: the list, or its reference."""
    if RESULTS_CBOR not in loop:
        return list(loop["results"])
    kept = loop[RESULTS_CBOR]
    values = [None if data is None else cbor.decode(data) for data in kept]
    encoded = cbor.encode_list([_NULL if data is None else data for data in kept])
    if len(encoded) <= run.limits["result_inline_bytes_max"]:
        return values
    return run.blobs.store(encoded, values)


def inline_bytes(loop: dict[str, Any]) -> int:
    """The bytes of the finished results a loop keeps inline that are longer than a
    reference (what counts against the limit)."""
    kept = loop.get(RESULTS_CBOR, ())
    return sum(len(data) for data in kept if data is not None and len(data) > REF_BYTES_MAX)


def call_inline_max(run: Run, loop: dict[str, Any] | None) -> int:
    """What a call asks its adapter to keep inline: the limit, and inside a loop only what
    the loop has room left for (at least a reference's size: a smaller result is kept)."""
    limit: int = run.limits["result_inline_bytes_max"]
    if loop is None or RESULTS_CBOR not in loop:
        return limit
    return min(limit, max(REF_BYTES_MAX, limit - inline_bytes(loop)))


def spill(run: Run, loop: dict[str, Any]) -> None:
    """After an input: while a running loop keeps more than the limit inline, its last
    result longer than a reference is written and kept as its reference."""
    if RESULTS_CBOR not in loop:
        return
    limit = run.limits["result_inline_bytes_max"]
    kept = loop[RESULTS_CBOR]
    total = inline_bytes(loop)
    for index in range(len(kept) - 1, -1, -1):
        if total <= limit:
            return
        data = kept[index]
        if data is not None and len(data) > REF_BYTES_MAX:
            kept[index] = cbor.encode(run.blobs.store(data))
            total -= len(data)


_NULL = cbor.encode(None)
