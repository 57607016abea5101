"""The names of the kernel's built-in `sys/` definitions (their definitions and meanings are
builtins.py). Apart, with no import, so that code which only names one (the journal tail's
fold, `aos world status`) does not load the definition model.
"""

from __future__ import annotations

WORKFLOW_CONTEXT = "sys/WorkflowContext@1"
RECEIPT_STATUS = "sys/EffectReceiptStatus@1"
RECEIPT_ENVELOPE = "sys/EffectReceiptEnvelope@1"
RECEIPT_REJECTED = "sys/EffectReceiptRejected@1"
STEP_FAULT = "sys/StepFault@1"
TIMER_SET_PARAMS = "sys/TimerSetParams@1"
TIMER_SET_RECEIPT = "sys/TimerSetReceipt@1"
TIMER_SET_EFFECT = "sys/timer.set@1"
TIMER_ADAPTER = "sys/timer@1"

BUILTIN_ADAPTER_NAMES = frozenset({TIMER_ADAPTER})
"""Adapter identities internal to the kernel: effects may name them without a defadapter."""
