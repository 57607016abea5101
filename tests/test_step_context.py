"""The step context the world writes (`sys/WorkflowContext@1`) is built from the kernel's own
typed values without a normalize pass: its bytes must be exactly those of the normalized
value, for keyed cells, and replays of the world must see the same context."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aos.kernel import cbor
from aos.kernel.air.builtin_names import WORKFLOW_CONTEXT
from aos.kernel.air.builtins import BUILTIN_SCHEMAS
from aos.kernel.air.normalize import normalize
from aos.kernel.wasm.envelope import decode_input
from tests.test_world import EVENT, create, inc


def test_the_context_is_its_own_normalized_form(tmp_path: Path) -> None:
    contexts: list[bytes] = []

    def seen(_message: Any, step_input: bytes, _outcome: Any) -> None:
        ctx = decode_input(step_input).ctx
        assert ctx is not None
        contexts.append(ctx)

    with create(tmp_path / "w") as world:
        world.on_step = seen
        for index in range(12):
            world.send(EVENT, inc(f"key-{index % 5}", by=index))
    assert len(contexts) == 12
    for ctx in contexts:
        value: Any = cbor.decode(ctx)
        assert value["key"] is not None and value["cell_mode"] is True
        assert cbor.encode(normalize(value, WORKFLOW_CONTEXT, BUILTIN_SCHEMAS)) == ctx
    assert len({cbor.decode(ctx)["entropy"] for ctx in contexts}) == 12  # type: ignore[index]
