"""One intent as an operator sees it: open (with its `effect_intent` record), settled or
cancelled (with the seq that closed it). Progress frames are the node's (node/progress.py)."""

from __future__ import annotations

import re
from typing import Any

from aos.kernel import cbor, prefixes
from aos.kernel.errors import InvalidInputError
from aos.kernel.hashing import is_hash
from aos.kernel.world.errors import IntentNotOpenError, NotFoundError
from aos.kernel.world.reader import WorldReader


class IntentHashInvalidError(InvalidInputError):
    code = "world.intent_invalid"
    hint = "an intent is named by its hash, blake3:<64 hex>"


_HEX_PREFIX = re.compile(r"[0-9a-f]{1,64}")


class IntentAmbiguousError(prefixes.IdAmbiguousError):
    code = "world.intent_ambiguous"
    hint = "give more digits of the intent hash (`aos world status` lists the open intents)"


def resolve_intent(reader: WorldReader, text: str) -> str:
    """An intent named by its hash (open or closed), or an open intent by a unique prefix of
    its hash (with or without `blake3:`), as `aos world status` and `aos task ls` show it."""
    full = text if text.startswith(prefixes.HASH_PREFIX) else prefixes.HASH_PREFIX + text
    if is_hash(full) or not _HEX_PREFIX.fullmatch(full.removeprefix(prefixes.HASH_PREFIX)):
        return full if is_hash(full) else text  # not a hash's prefix: the caller refuses it
    return prefixes.resolve(
        text,
        (str(i["intent"]) for i in reader.open_intents()),
        what="open intent",
        unknown=IntentNotOpenError,
        ambiguous=IntentAmbiguousError,
        hashes=True,
    )


def intent_view(reader: WorldReader, intent: str) -> dict[str, Any]:
    if not is_hash(intent):
        raise IntentHashInvalidError(f"{intent!r} is not an intent hash")
    record = reader.open_intent(intent)
    if record is not None:
        return {"intent": intent, "status": "open", "record": cbor.to_json(record)}
    settled, cancelled = reader.settled_seq(intent), reader.cancelled_seq(intent)
    if settled is not None:
        return {"intent": intent, "status": "settled", "closed_seq": settled, "record": None}
    if cancelled is not None:
        return {"intent": intent, "status": "cancelled", "closed_seq": cancelled, "record": None}
    raise NotFoundError(f"the world has no intent {intent}")
