"""The keychain's start phase (spec/11 §1.7): a flow with keychain entries first asks for
them with one `aos/keychain.resolve@1` effect and runs no step until its receipt; the
receipt's references become the template namespace `keychain`; a refused resolution fails
the execution with kind `authorization`; a stale or late receipt changes nothing."""

from __future__ import annotations

from typing import Any

from tests.flow_interpreter.harness import (
    Execution,
    domain,
    effects,
    events,
    flow,
    names,
    step,
    task,
)

KEYCHAIN = "aos/keychain.resolve@1"
HTTP = "aos/tool.http@1"
ENTRIES = [{"name": "api", "kind": "bearer"}, {"name": "pg", "kind": "postgres", "db": "x"}]
REFERENCES = {"api": "${keychain:api}", "pg": {"user": "${keychain:pg.user}"}}


def _definition(**fields: Any) -> dict[str, Any]:
    call = task(
        "fetch",
        "call",
        tool={
            "kind": "http",
            "url": "https://x/",
            "headers": {"Authorization": "Bearer {{ keychain.api }}"},
        },
        args={"who": "{{ keychain.pg.user }}"},
    )
    return {**flow([step("go", [call])]), "keychain": ENTRIES, **fields}


def _started() -> tuple[Execution, Any]:
    ex = Execution()
    out = ex.start(_definition())
    return ex, out


def test_the_start_asks_for_the_entries_and_runs_no_step() -> None:
    ex, out = _started()
    (resolve,) = effects(out)
    assert resolve.effect == KEYCHAIN
    assert resolve.params == {"exec": "e1", "entries": ENTRIES}
    assert ex.status == "running"
    assert ex.engine["tokens"] == {}
    assert ex.engine["waits"][resolve.issuer_ref]["kind"] == "keychain"
    assert names(out) == ["playbook.started", "keychain.requested"]


def test_references_become_the_keychain_namespace_and_the_flow_starts() -> None:
    ex, out = _started()
    refs = {"api": {"kind": "bearer", "fingerprint": "blake3k:00"}}
    out = ex.receipt(effects(out)[0], {"entries": REFERENCES, "refs": refs})
    (call,) = effects(out)
    assert call.effect == HTTP
    assert call.params["tool"]["headers"] == {"Authorization": "Bearer ${keychain:api}"}
    assert call.params["args"] == {"who": "${keychain:pg.user}"}
    assert ex.business["keychain"] == REFERENCES
    resolved = next(e for e in events(out) if e["event"] == "keychain.resolved")
    assert resolved["entries"] == ["api", "pg"] and resolved["refs"] == refs
    ex.receipt(call, {"status": 200})
    assert ex.status == "completed"


def test_a_refused_resolution_fails_the_execution_as_authorization() -> None:
    ex, out = _started()
    error = {
        "kind": "authorization",
        "code": "keychain.missing",
        "message": "keychain entries ['pg'] are not in the environment",
        "retryable": False,
        "missing": ["pg"],
    }
    out = ex.receipt(effects(out)[0], error, status="error")
    assert ex.status == "failed"
    assert ex.engine["error"] == {
        "kind": "authorization",
        "category": "authorization",
        "code": "keychain.missing",
        "message": error["message"],
        "retryable": False,
    }
    assert "keychain.failed" in names(out) and "playbook.finished" in names(out)
    assert not [e for e in effects(out) if e.effect == HTTP]


def test_an_ok_receipt_without_every_entry_is_refused_too() -> None:
    ex, out = _started()
    ex.receipt(effects(out)[0], {"entries": {"api": "${keychain:api}"}})
    assert ex.status == "failed"
    assert ex.engine["error"]["kind"] == "authorization"
    assert ex.engine["error"]["code"] == "keychain.unresolved"


def test_a_stale_resolution_receipt_changes_nothing() -> None:
    ex, out = _started()
    resolve = effects(out)[0]
    before = ex.state_bytes()
    out = ex.receipt(KEYCHAIN, {"entries": REFERENCES}, issuer_ref="w99")
    assert ex.state_bytes() == before
    assert names(out) == ["receipt.stale"]
    ex.receipt(resolve, {"entries": REFERENCES})
    after = ex.state_bytes()
    out = ex.receipt(resolve, {"entries": REFERENCES})  # a second delivery: stale
    assert ex.state_bytes() == after
    assert names(out) == ["receipt.stale"]


def test_cancel_while_resolving_cancels_the_resolution() -> None:
    ex, out = _started()
    resolve = effects(out)[0]
    out = ex.cancel("stop")
    assert ex.status == "cancelled"
    assert out.cancel == [resolve.issuer_ref]


def test_a_flow_without_a_keychain_starts_at_once() -> None:
    ex = Execution()
    out = ex.start(flow([step("go", [task("say", "call", args={"a": 1})])]))
    assert [e.effect for e in effects(out)] == ["aos/tool.echo@1"]
    assert "keychain" not in ex.business


def test_without_the_entry_a_keychain_template_is_an_expression_error() -> None:
    ex = Execution()
    ex.start(_definition(keychain=[]))
    assert ex.status == "failed"
    assert ex.engine["summary"]["failures"][0]["error"]["kind"] == "expression"


def test_a_malformed_keychain_fails_the_execution_cleanly() -> None:
    ex = Execution()
    ex.start(_definition(keychain=[{"kind": "x"}]))
    assert ex.status == "failed"
    assert ex.engine["error"]["code"] == "definition.invalid"


def test_a_distributed_iteration_resolves_the_keychain_before_its_item() -> None:
    """A child execution of a distributed loop runs the same definition: it asks for the
    keychain too, and only then runs its iteration, with the parent's item and args."""
    each = step(
        "each",
        [task("use", "noop", result="{{ iter.item }}|{{ keychain.api }}|{{ args.k }}")],
        loop={"in": [1, 2], "mode": "parallel", "exec": "distributed"},
    )
    definition = {**flow([each]), "keychain": [{"name": "api", "kind": "bearer"}]}
    parent = Execution()
    digest = parent.deploy(definition)
    out = parent.start(digest)
    out = parent.receipt(effects(out)[0], {"entries": {"api": "${keychain:api}"}})
    starts = domain(out, "aos/FlowStart@1")
    assert len(starts) == 2
    child = Execution(exec_id=starts[0].value["exec"], blobs=parent.blobs)
    marker = {**starts[0].value["workload"]}
    marker["$iteration"] = {**marker["$iteration"], "args": {"k": "K"}}
    out = child.start(digest, marker, parent=starts[0].value["parent"])
    (resolve,) = effects(out)
    assert resolve.effect == KEYCHAIN and child.engine["tokens"] == {}
    child.receipt(resolve, {"entries": {"api": "${keychain:api}"}})
    assert child.status == "completed"
    assert child.engine["result"] == "1|${keychain:api}|K"


def test_a_call_lists_where_its_definition_put_each_entry() -> None:
    """spec/11 §1.7: the call carries, beside the rendered tool, each template of the
    definition's tool that reads `keychain.NAME` of a declared entry, with those names; a
    flow's other templates (args, a workload value) grant nothing."""
    ex, out = _started()
    (call,) = effects(ex.receipt(effects(out)[0], {"entries": REFERENCES}))
    assert call.params["keychain"] == [{"path": ["headers", "Authorization"], "names": ["api"]}]


def test_a_workload_placeholder_is_granted_nothing() -> None:
    """The attack: a caller who may only run the flow sends `${keychain:pg}` in its workload,
    and the definition renders that workload value into a header. The header holds the
    placeholder's text, but no grant names it: the adapter sends it as text."""
    fetch = task(
        "fetch",
        "call",
        tool={
            "kind": "http",
            "url": "https://x/",
            "headers": {
                "Authorization": "Bearer {{ keychain.api }}{{ workload.note }}",
                "X-Note": "{{ workload.note }}",
                "X-Dynamic": "{{ keychain[workload.which] }}",
            },
        },
    )
    definition = {**flow([step("go", [fetch])]), "keychain": ENTRIES}
    ex = Execution()
    out = ex.start(definition, {"note": "${keychain:pg}", "which": "api"})
    (call,) = effects(ex.receipt(effects(out)[0], {"entries": REFERENCES}))
    headers = call.params["tool"]["headers"]
    assert headers["X-Note"] == "${keychain:pg}"
    assert headers["Authorization"] == "Bearer ${keychain:api}${keychain:pg}"
    assert headers["X-Dynamic"] == "${keychain:api}"  # reached by no literal name
    assert call.params["keychain"] == [{"path": ["headers", "Authorization"], "names": ["api"]}]


def test_a_name_the_flow_does_not_declare_is_granted_nothing() -> None:
    """`aos.flow/2` renders a task's fields leniently: a template reading an entry the flow
    does not declare renders nothing, and names nothing either."""
    headers = {"A": "{{ keychain['api'] }}", "B": "{{ keychain.other }}x"}
    fetch = task("fetch", "call", tool={"kind": "http", "url": "https://x/", "headers": headers})
    ex = Execution()
    out = ex.start({**flow([step("go", [fetch])], format="aos.flow/2"), "keychain": ENTRIES})
    (call,) = effects(ex.receipt(effects(out)[0], {"entries": REFERENCES}))
    assert call.params["tool"]["headers"] == {"A": "${keychain:api}", "B": "x"}
    assert call.params["keychain"] == [{"path": ["headers", "A"], "names": ["api"]}]
