"""One intent as an operator sees it: open (with its `effect_intent` record), settled or
cancelled (with the seq that closed it). Progress frames are the node's (node/progress.py)."""

from __future__ import annotations

from typing import Any

from aos.kernel import cbor
from aos.kernel.errors import InvalidInputError
from aos.kernel.hashing import is_hash
from aos.kernel.world.errors import NotFoundError
from aos.kernel.world.world import World


class IntentHashInvalidError(InvalidInputError):
    code = "world.intent_invalid"
    hint = "an intent is named by its hash, blake3:<64 hex>"


def intent_view(world: World, intent: str) -> dict[str, Any]:
    if not is_hash(intent):
        raise IntentHashInvalidError(f"{intent!r} is not an intent hash")
    record = world.open_intent(intent)
    if record is not None:
        return {"intent": intent, "status": "open", "record": cbor.to_json(record)}
    settled, cancelled = world.settled_seq(intent), world.cancelled_seq(intent)
    if settled is not None:
        return {"intent": intent, "status": "settled", "closed_seq": settled, "record": None}
    if cancelled is not None:
        return {"intent": intent, "status": "cancelled", "closed_seq": cancelled, "record": None}
    raise NotFoundError(f"the world has no intent {intent}")
