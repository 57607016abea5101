"""Effect admission and intent identity.

An emitted effect is admitted only if the workflow declares it in `effects_emitted`, the
manifest defines it, and its params normalize against the effect's params schema; otherwise
the whole step faults. An admitted effect becomes an intent whose identity is derived from
where it came from, never from a clock or a counter outside the journal:

    identity = {origin workflow, origin key, effect, params hash,
                idempotency key if the workflow gave one, else (input seq, emission index)}
    intent hash = hash of {identity, params}

So an intent re-emitted with the same idempotency key and params has the same hash: it is not
opened twice while open, and is opened again, as the same work, once it has settled
(spec/03 §9).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from aos.kernel import cbor
from aos.kernel.air.errors import AirError
from aos.kernel.air.model import DefEffect, DefSchema, DefWorkflow
from aos.kernel.air.normalize import normalize
from aos.kernel.hashing import Hash, hash_bytes
from aos.kernel.wasm.envelope import EmittedEffect
from aos.kernel.world.errors import (
    EffectParamsInvalidError,
    EffectUndeclaredError,
    EffectUnknownError,
)


@dataclass(frozen=True, slots=True)
class AdmittedEffect:
    intent: Hash
    effect: str
    params: Any  # normalized value
    index: int
    idempotency_key: bytes | None
    issuer_ref: str | None


def admit(
    emitted: EmittedEffect,
    *,
    index: int,
    workflow: DefWorkflow,
    key: bytes | None,
    input_seq: int,
    effects: Mapping[str, DefEffect],
    schemas: Mapping[str, DefSchema],
    module: str,
) -> AdmittedEffect:
    """Check one emitted effect and derive its intent; raise a step fault if it is refused."""
    path = f"effects[{index}]"
    if emitted.effect not in workflow.effects_emitted:
        raise EffectUndeclaredError(
            f"{workflow.name} emitted {emitted.effect}, which it does not declare",
            path=path,
            module=module,
        )
    definition = effects.get(emitted.effect)
    if definition is None:
        raise EffectUnknownError(
            f"the manifest defines no effect {emitted.effect}", path=path, module=module
        )
    try:
        params = normalize(cbor.decode(emitted.params), definition.params, schemas)
    except (AirError, cbor.CborError) as error:
        raise EffectParamsInvalidError(
            f"params of {emitted.effect}: {error}", path=path, module=module
        ) from None
    # Hashed without a validation walk: the params were strictly decoded and normalized
    # just above, and the identity's other parts are the kernel's.
    identity: dict[str, Any] = {
        "origin_workflow": workflow.name,
        "origin_key": key,
        "effect": emitted.effect,
        "params": str(hash_bytes(cbor.encode_built(params))),
    }
    if emitted.idempotency_key is not None:
        identity["idempotency_key"] = emitted.idempotency_key
    else:
        identity["input_seq"] = input_seq
        identity["index"] = index
    intent = hash_bytes(cbor.encode_built({"identity": identity, "params": params}))
    return AdmittedEffect(
        intent=intent,
        effect=emitted.effect,
        params=params,
        index=index,
        idempotency_key=emitted.idempotency_key,
        issuer_ref=emitted.issuer_ref,
    )
