"""Replay equivalence of the step path: every input of an execution, run again on a fresh
interpreter (no state memo, no definition, blob or template memo: what `checked` and a replay
run), gives the output bytes the warm interpreter gave. The warm run takes each state back
from the SDK's memo (the copy made while encoding it), shares one Jinja2 environment and its
memoized templates across executions; the fresh run decodes and compiles everything."""

from __future__ import annotations

from typing import Any

import pytest
from aos_flow import blobs, definition, expressions
from aos_flow import workflow as app

from aos.kernel.wasm.envelope import with_data
from aos_sdk import envelope as sdk_envelope
from tests.flow_interpreter.harness import Execution, arc, effects, flow, step, task


def _definition(format: str) -> dict[str, Any]:
    """A sequential loop (its results kept encoded until it is done), Jinja templates in
    args and in a guard, then a step reading the loop's results. In `aos.flow/2` also a step
    `set_ctx` after each iteration, a task read by its name, a lenient undefined and a
    `tojson` kept as text: each rendered by another of the modes' environments."""
    twice = {"n": "{{ iter.item }}", "twice": "{{ iter.item * 2 }}"}
    call = task("c", "call", tool={"kind": "echo"}, args=twice)
    done = arc("after", when="{{ event.name == 'loop.done' }}")
    total = "{{ each.results | map(attribute='sq') | sum }}-{{ workload.tag }}"
    after = [task("sum", "noop", result=total)]
    seen = None
    if format == "aos.flow/2":
        seen = {"seen": "{{ (ctx.seen | default([])) + [each.n] }}"}
        read = "{{ sum }}/{{ ctx.seen | length }}/{{ a.x if a else 'lenient' }}/{{ [1] | tojson }}"
        after.append(task("wrap", "noop", result=read))
    loop = {"in": "{{ workload.items }}"}
    return flow(
        [
            step("each", [call], loop=loop, arcs=[done], set_ctx=seen),
            step("after", after),
        ],
        format=format,
    )


EXPECTED = {
    "aos.flow/1": "{total}-t{n}",
    "aos.flow/2": "{total}-t{n}/{count}/lenient/[1]",
}


def _record(monkeypatch: pytest.MonkeyPatch) -> list[tuple[bytes, bytes]]:
    calls: list[tuple[bytes, bytes]] = []
    step_bytes = app.flow.step_bytes

    def recording(data: bytes) -> bytes:
        output = step_bytes(data)
        calls.append((bytes(data), output))
        return output

    monkeypatch.setattr(app.flow, "step_bytes", recording)
    return calls


def _forget(monkeypatch: pytest.MonkeyPatch) -> None:
    """What a fresh instance starts without (the CBOR memos only ever speed it up)."""
    monkeypatch.setattr(app.flow, "state_memo", sdk_envelope.StateMemo())
    monkeypatch.setattr(definition, "_CACHE", {})
    monkeypatch.setattr(blobs, "_DECODED", {})
    monkeypatch.setattr(expressions, "_TEMPLATES", {})
    monkeypatch.setattr(expressions, "_CODE", {})


@pytest.mark.parametrize("format", sorted(EXPECTED))
def test_each_input_again_on_a_fresh_interpreter_gives_the_same_bytes(
    monkeypatch: pytest.MonkeyPatch,
    format: str,
) -> None:
    calls = _record(monkeypatch)
    cas: dict[str, bytes] = {}
    for n, items in enumerate(([1, 2, 3], [4, 5])):
        ex = Execution(f"e{n}", blobs=cas)
        out = ex.start(_definition(format), {"items": items, "tag": f"t{n}"})
        while ex.status == "running":
            (call,) = effects(out)
            args = call.params["args"]
            out = ex.receipt(call, {"n": args["n"], "sq": args["twice"]})
        total = sum(x * 2 for x in items)
        expected = EXPECTED[format].format(total=total, n=n, count=len(items))
        assert ex.business["steps"]["after"] == expected
    monkeypatch.undo()
    assert len(calls) >= 7  # two starts and five receipts (and read rounds)
    for data, warm in calls:
        with monkeypatch.context() as fresh:
            _forget(fresh)
            again = app.flow.step_bytes(data)
            reads = sdk_envelope.decode_output(again).reads
            if reads and not sdk_envelope.decode_output(warm).reads:
                # The warm interpreter had the definition memoized: the fresh one reads it.
                again = app.flow.step_bytes(with_data(data, {h: cas[h] for h in reads}))
            assert again == warm
