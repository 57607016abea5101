"""The import-time warm-up (modules/flow/aos_flow/warmup.py): a real execution, and nothing of it kept
but the CBOR memos."""

from __future__ import annotations

import pytest
from aos_flow import blobs, definition, warmup
from aos_flow import workflow as app
from aos_flow.errors import Missing

from tests.flow_interpreter.harness import Execution, effects, flow, step, task


def test_the_warm_up_execution_runs_to_its_end() -> None:
    state = warmup.execute(app.flow, app.EXEC_EVENT)
    assert state["status"] == "completed"
    assert state["business"]["steps"] == {"call": {"n": 1}, "done": 1}


def test_the_warm_up_leaves_no_definition_or_blob_memo() -> None:
    warmup.warm(app.flow, app.EXEC_EVENT)
    with pytest.raises(Missing):
        definition.load(blobs.Blobs(_NoBlobs()), warmup.WARMUP_HASH)


def test_executions_after_the_warm_up_are_unchanged() -> None:
    defn = flow([step("a", [task("pay", "call", args={"n": 1})])])
    before = Execution()
    out = before.start(defn)
    warmup.warm(app.flow, app.EXEC_EVENT)
    after = Execution()
    again = after.start(defn)
    assert out == again
    assert before.receipt(effects(out)[0], {"ok": 1}) == after.receipt(effects(again)[0], {"ok": 1})


class _NoBlobs:
    def readable(self, blob_hash: str) -> bool:
        return False
