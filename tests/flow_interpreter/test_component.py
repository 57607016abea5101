"""The built component gives the native bytes: a flow run step by step through the WASM
module under `determinism: checked` with every step re-run on a fresh instance (a warm
instance's memo of definitions and templates must never change an output), reads served
from the CAS. The build is cached; the first one takes about 20 s."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from aos.kernel.wasm import StepRunner, WasmEngine
from aos.kernel.wasm.build import build_python
from aos_sdk import envelope as sdk_envelope
from aos_sdk import testing
from tests.flow_interpreter.harness import (
    EXEC_EVENT,
    FLOW_DIR,
    Execution,
    arc,
    effects,
    flow,
    rule,
    step,
    store,
    task,
)

# The module's fixture builds the interpreter into pytest's cache (~35 s, more on a fresh
# checkout): whichever test a worker runs first here is charged for it.
pytestmark = pytest.mark.timeout(900)


@pytest.fixture(scope="module")
def runner(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> StepRunner:
    cache = getattr(request.config, "cache", None)  # absent under -p no:cacheprovider
    build_cache = cache.mkdir("aos_builds") if cache is not None else tmp_path_factory.mktemp("b")
    built = build_python(FLOW_DIR, cache_dir=build_cache)
    engine = WasmEngine(cache_dir=Path(build_cache).parent / "aos_engine_compiled")
    module = engine.load_file(built.wasm_path, abi="component")
    return StepRunner(module, determinism="checked", sample_rate=1.0)


def _twin(ex: Execution, runner: StepRunner) -> None:
    """Every step of `ex` also runs in the component; the bytes must be equal."""
    native_step = ex.step_raw

    def both(event: Any, *, advance: bool = True) -> Any:
        ctx = testing.make_ctx(
            workflow="aos/FlowExec@1", now_ns=ex.now_ns, journal_height=ex.height, key=ex.exec_id
        )
        data = testing.input_bytes(ex.state, testing.Event(EXEC_EVENT, event, key=ex.exec_id), ctx)
        wasm = runner.step(data, seq=ex.height, read_blob=ex.blobs.get)
        output = native_step(event, advance=advance)
        assert wasm.output_bytes == sdk_envelope.encode_output(output)
        return output

    ex.step_raw = both  # type: ignore[method-assign]


def test_component_matches_native_step_by_step(runner: StepRunner) -> None:
    ex = Execution()
    _twin(ex, runner)
    big = store(ex.blobs, {"rows": [1, 2, 3]})
    definition = flow(
        [
            step(
                "fetch",
                [
                    task("skip", "noop", when="{{ nothing.there }}"),
                    task(
                        "get",
                        "call",
                        tool={"kind": "http", "url": "{{ workload.u | upper }}"},
                        timeout_ms=1000,
                        rules=[
                            rule(
                                "{{ outcome.status == 'error' }}",
                                "retry",
                                attempts=2,
                                backoff="exponential",
                            )
                        ],
                    ),
                ],
                arcs=[arc("use", "$.fetch", {"n": "{{ fetch.rows | length }}"})],
            ),
            step(
                "use",
                [
                    task(
                        "each",
                        "repeat",
                        over="{{ fetch.rows }}",
                        tasks=[task("x", "noop", result="{{ item * 2 }}-{{ 'é' }}")],
                    ),
                    task("w", "wait_signal", signal="go"),
                ],
                loop={"in": [1, 2], "mode": "parallel"},
            ),
        ]
    )
    out = ex.start(definition, {"u": "x"})
    call, _timer = effects(out)
    out = ex.receipt(call, {"message": "down"}, status="error")
    out = ex.fire(effects(out)[0])
    call, timer = effects(out)
    ex.receipt(call, {"$ref": big, "size": 10})
    ex.fire(timer)
    ex.signal("go", 1)
    ex.signal("go", 2)
    assert ex.status == "completed"
    assert ex.business["steps"]["use"]["results"] == [1, 2]


def test_component_matches_native_through_the_keychain_start_phase(runner: StepRunner) -> None:
    ex = Execution()
    _twin(ex, runner)
    call = task(
        "send",
        "call",
        tool={"kind": "http", "url": "https://x/", "headers": {"A": "Bearer {{ keychain.k }}"}},
    )
    definition = {**flow([step("go", [call])]), "keychain": [{"name": "k", "kind": "token"}]}
    out = ex.start(definition)
    (resolve,) = effects(out)
    out = ex.receipt(resolve, {"entries": {"k": "${keychain:k}"}, "refs": {}})
    (sent,) = effects(out)
    assert sent.params["tool"]["headers"] == {"A": "Bearer ${keychain:k}"}
    ex.receipt(sent, {"status": 200})
    assert ex.status == "completed"
    refused = Execution(exec_id="e2")
    _twin(refused, runner)
    (resolve,) = effects(refused.start(definition))
    refused.receipt(resolve, {"kind": "authorization", "code": "keychain.missing"}, status="error")
    assert refused.status == "failed"


def test_component_matches_native_on_aos_flow_2(runner: StepRunner) -> None:
    """A step's `set_ctx` after its tasks and per iteration, a task read by name, the lenient
    and routing modes, `tojson` kept as text, and a child named by a template."""
    ex = Execution()
    _twin(ex, runner)
    args = {"v": "{{ fetch.n }}", "w": "{{ a.x if a else 'lenient' }}", "j": "{{ [1] | tojson }}"}
    definition = flow(
        [
            step(
                "each",
                [
                    task("fetch", "noop", result={"n": "{{ iter.item }}"}),
                    task("use", "call", args=args),
                ],
                loop={"in": [1, 2]},
                set_ctx={"seen": "{{ (ctx.seen | default([])) + [each.v] }}"},
                arcs=[arc("child", "{{ ctx.seen | length == 2 }}")],
            ),
            step("child", [task("sub", "subflow", flow="{{ workload.child }}")]),
        ],
        format="aos.flow/2",
    )
    out = ex.start(definition, {"child": "/lib/child"})
    for _ in range(2):
        (call,) = effects(out)
        assert call.params["args"]["w"] == "lenient" and call.params["args"]["j"] == "[1]"
        out = ex.receipt(call, call.params["args"])
    assert ex.business["ctx"] == {"seen": [1, 2]}
    (lookup,) = out.domain_events
    assert lookup.schema == "aos/FlowLookup@1" and lookup.value["name"] == "lib/child"
