"""Guest SDK for aos workflows (standard library only).

It runs inside a WebAssembly component (componentize-py's bundled CPython) and natively, so the
same workflow code is unit-tested with plain pytest (`aos_sdk.testing`) and built into a
component (`aos module build`). See modules/README.md.
"""

from aos_sdk.envelope import DomainEvent, EffectIntent, StepInput, StepOutput
from aos_sdk.schema import SchemaError, Variant, from_value, to_value
from aos_sdk.workflow import (
    DELETE,
    Context,
    ContextUnavailableError,
    StepError,
    UnhandledEventError,
    Workflow,
    export,
)

__all__ = [
    "DELETE",
    "Context",
    "ContextUnavailableError",
    "DomainEvent",
    "EffectIntent",
    "SchemaError",
    "StepError",
    "StepInput",
    "StepOutput",
    "UnhandledEventError",
    "Variant",
    "Workflow",
    "export",
    "from_value",
    "to_value",
]
