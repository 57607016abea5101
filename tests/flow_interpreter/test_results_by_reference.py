"""Results by reference (spec/11 §3.1, §7): a result larger than `result_inline_bytes_max`
is stored in the CAS and the state keeps `{"$ref", "size"}`, whether a tool's adapter stored
it or the interpreter writes it (spec/08 §4.4); a loop keeps its iterations' results inline
up to that many bytes in all, and each further one larger than a reference by reference, so
its state stays small however long it runs; its aggregate's `results` list too, once larger
than the limit. Templates that walk into a reference load it."""

from __future__ import annotations

from typing import Any

from aos_flow import blobs as flow_blobs
from aos_flow import results as flow_results

from aos.kernel import cbor
from aos.kernel.hashing import hash_bytes
from tests.flow_interpreter.harness import Execution, arc, effects, flow, step, task

ECHO = "aos/tool.echo@1"
LIMIT = 4096  # a small `result_inline_bytes_max`, to reach the edges with small values
REF = {"$ref": "blake3:" + "f" * 64, "size": 2**64 - 1}


def is_ref(value: Any) -> bool:
    return isinstance(value, dict) and set(value) == {"$ref", "size"}


def load(ex: Execution, ref: dict[str, Any]) -> Any:
    data = ex.blobs[ref["$ref"]]
    assert str(hash_bytes(data)) == ref["$ref"] and len(data) == ref["size"]
    return cbor.decode(data)


def looping(items: int, *, limit: int = LIMIT, after: dict[str, Any] | None = None) -> Any:
    return flow(
        [
            step(
                "fan",
                [task("get", "call", tool={"kind": "echo"}, args={"i": "{{ iter.item }}"})],
                loop={"in": f"{{{{ range({items}) | list }}}}"},
                arcs=[
                    arc(
                        "count",
                        when="{{ fan.results | length == " + str(items) + " }}",
                        args={"stats": "{{ fan.stats }}"},
                    )
                ],
            ),
            step(
                "count",
                [
                    task(
                        "n",
                        "noop",
                        result=after
                        or {
                            "length": "{{ fan.results | length }}",
                            "fifth": "{{ fan.results[5].i }}",
                            "stats": "{{ args.stats }}",
                        },
                    )
                ],
            ),
        ],
        limits={"result_inline_bytes_max": limit},
    )


def drive(ex: Execution, out: Any, result: Any) -> list[int]:
    """Answer each call with `result(params)` until the execution ends; the state's size
    after each step."""
    sizes = []
    while ex.status == "running":
        (call,) = effects(out, ECHO)
        out = ex.receipt(call, result(call.params))
        sizes.append(len(ex.state_bytes()))
    return sizes


def test_the_size_of_a_reference_is_bounded() -> None:
    assert len(cbor.encode(REF)) == flow_blobs.REF_BYTES_MAX


def test_a_long_loop_keeps_its_results_and_its_aggregate_by_reference() -> None:
    ex = Execution()
    items = 300
    out = ex.start(looping(items), {})
    # Each result ~1 KiB: the loop keeps LIMIT bytes inline, then writes each by reference.
    sizes = drive(ex, out, lambda p: {"i": p["args"]["i"], "pad": "x" * 1000})
    assert ex.status == "completed"
    aggregate = ex.business["steps"]["fan"]
    assert is_ref(aggregate["results"]) and aggregate["stats"]["success"] == items
    results = load(ex, aggregate["results"])
    assert len(results) == items
    assert results[0] == {"i": 0, "pad": "x" * 1000}  # inline while the budget lasted
    assert is_ref(results[-2]) and load(ex, results[-2]) == {"i": items - 2, "pad": "x" * 1000}
    assert results[-1] == {"i": items - 1, "pad": "x" * 1000}  # it ended the loop: not spilled
    assert ex.business["steps"]["count"] == {
        "length": items,
        "fifth": 5,
        "stats": {"total": items, "success": items, "failed": 0},
    }
    # The state stays within the inline budget and a reference per further result.
    assert max(sizes) < LIMIT + items * flow_blobs.REF_BYTES_MAX + 8192


def test_calls_ask_the_adapter_for_references_once_the_budget_is_spent() -> None:
    ex = Execution()
    out = ex.start(looping(20), {})
    asked = []
    while ex.status == "running":
        (call,) = effects(out, ECHO)
        asked.append(call.params["result_inline_bytes_max"])
        out = ex.receipt(call, {"pad": "y" * 1000})
    assert asked[0] == LIMIT
    assert asked[-1] == flow_blobs.REF_BYTES_MAX  # the adapter stores anything larger
    assert asked == sorted(asked, reverse=True)


def test_small_results_stay_inline_however_many() -> None:
    ex = Execution()
    out = ex.start(looping(50), {})
    drive(ex, out, lambda p: p["args"]["i"])
    assert ex.business["steps"]["fan"]["results"] == list(range(50))
    assert not [b for b in ex.blobs.values() if cbor.decode(b) == list(range(50))]


def test_the_loop_budget_at_its_edge() -> None:
    """A running loop's results whose encodings add up to exactly the limit stay inline;
    with a limit one byte smaller, the last one is written (the fifth finishes the loop)."""
    one = len(cbor.encode({"pad": "z" * 100}))
    for limit, spilled in ((4 * one, False), (4 * one - 1, True)):
        ex = Execution()
        out = ex.start(looping(5, limit=limit), {})
        drive(ex, out, lambda p: {"pad": "z" * 100})
        results = ex.business["steps"]["fan"]["results"]
        results = load(ex, results) if is_ref(results) else results
        assert [is_ref(r) for r in results] == [False, False, False, spilled, False], limit


def test_a_step_result_over_the_limit_is_written_by_reference() -> None:
    def one_step(size: int) -> Any:
        return flow(
            [
                step(
                    "make",
                    [task("big", "noop", result="{{ 'a' * " + str(size) + " }}")],
                    arcs=[arc("use", args={"n": "{{ make | length }}"})],
                ),
                step("use", [task("n", "noop", result="{{ args.n }}")]),
            ],
            limits={"result_inline_bytes_max": LIMIT},
        )

    at_limit = LIMIT - len(cbor.encode("")) - 2  # a text of this length encodes to LIMIT
    assert len(cbor.encode("a" * at_limit)) == LIMIT
    inline = Execution()
    inline.start(one_step(at_limit), {})
    assert inline.business["steps"]["make"] == "a" * at_limit
    ex = Execution()
    ex.start(one_step(at_limit + 1), {})
    made = ex.business["steps"]["make"]
    assert is_ref(made) and load(ex, made) == "a" * (at_limit + 1)
    assert ex.engine["result"] is None or not isinstance(ex.engine["result"], str)
    assert ex.business["steps"]["use"] == at_limit + 1  # `make | length` loaded it


def test_results_kept_inline_past_the_budget_are_spilled_at_the_next_input() -> None:
    """A loop whose results are inline past the budget (as an earlier interpreter kept them,
    or under a larger limit) has them go by reference at its next input."""
    ex = Execution()
    out = ex.start(looping(6, limit=10**6), {})
    for _ in range(4):
        (call,) = effects(out, ECHO)
        out = ex.receipt(call, {"pad": "q" * 2000})
    # The loop, as stored under a larger limit, resumed under a smaller one.
    definition = ex.state["definition"]
    raw = cbor.decode(ex.blobs[definition])
    raw["limits"] = {"result_inline_bytes_max": LIMIT}
    ex.state["definition"] = ex.deploy(raw)
    (call,) = effects(out, ECHO)
    ex.receipt(call, {"pad": "q" * 2000})
    kept = ex.engine["tokens"]["k1"]["loop"]["results_cbor"]
    assert flow_results.inline_bytes({"results_cbor": kept}) <= LIMIT
    assert any(e is not None and is_ref(cbor.decode(e)) for e in kept)
