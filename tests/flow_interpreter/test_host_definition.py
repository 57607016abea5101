"""The interpreter reads the canonical form the host writes (aos.flows.define.cfd): the example flow
of flows/examples runs to its end, receipts and signal fed back as the kernel would."""

from __future__ import annotations

from pathlib import Path

from aos.flows.define import cfd
from aos.kernel.hashing import hash_bytes
from tests.flow_interpreter.harness import Execution, effects, names

EXAMPLE = Path(__file__).resolve().parents[2] / "flows" / "examples" / "order.flow.yaml"


def test_the_host_example_runs_to_its_end() -> None:
    data = cfd.encode_definition(cfd.load_definition(EXAMPLE.read_text()))
    ex = Execution()
    digest = str(hash_bytes(data))
    ex.blobs[digest] = data
    out = ex.start(digest, {"amount": 40})
    pay, timeout = effects(out)
    assert pay.params["args"] == {"order": "A-1", "amount": 40, "currency": "EUR"}
    assert timeout.params["deliver_at_ns"] == ex.now_ns + 5_000_000_000
    out = ex.receipt(pay, pay.params["args"])
    assert out.cancel == [timeout.issuer_ref]
    assert ex.business["business_ref"] == "order-A-1"
    ex.signal("warehouse.picked", {"box": 3})
    calls = effects(ex.outputs[-1], "aos/tool.echo@1")
    assert sorted(c.params["step"] for c in calls) == ["invoice", "pack"]
    for call in calls:
        out = ex.receipt(call, call.params["args"])
    assert ex.status == "completed"
    assert ex.business["steps"]["close"] == {"order": "A-1", "closed": True}
    assert "join.completed" in names(out)
