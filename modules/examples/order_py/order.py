"""An order workflow, keyed by order id: charge the customer through an HTTP effect, wait for
its receipt, and give up when a timer fires first. Events and effects: see README.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from aos_sdk import Context, Variant, Workflow, cbor, export

# Effect names are AIR names; the manifest defines the HTTP effect, the timer is built in.
HTTP_EFFECT = "demo/http.request@1"
TIMER_EFFECT = "sys/timer.set@1"
PAYMENT_URL = "https://payments.example/charges"
PAYMENT_TIMEOUT_NS = 30 * 1_000_000_000
HTTP_OK_MIN = 200
HTTP_OK_MAX = 299

Status = Literal["awaiting_payment", "paid", "failed"]


@dataclass
class Order:
    order_id: str = ""
    amount_cents: int = 0
    currency: str = "USD"
    status: Status | Literal["new"] = "new"
    reason: str | None = None
    receipts: int = 0


@dataclass
class OrderPlaced:
    order_id: str
    amount_cents: int
    currency: str = "USD"
    customer: str | None = None


@dataclass
class EffectReceipt:
    """`sys/EffectReceiptEnvelope@1`, as the kernel delivers a receipt back to its issuer."""

    origin_workflow: str
    intent_hash: str
    effect: str
    adapter: str
    status: dict[str, Any]  # sys/EffectReceiptStatus@1: {"$tag": "ok" | "error" | "timeout"}
    payload: bytes
    emitted_seq: int
    origin_key: bytes | None = None
    issuer_ref: str | None = None


@dataclass
class OrderSettled:
    order_id: str
    status: Status
    amount_cents: int
    reason: str | None = None


@dataclass
class Placed(OrderPlaced, Variant):
    """The `OrderPlaced` arm of `demo/OrderEvent@1`, the workflow's event schema."""

    TAG: ClassVar[str | None] = "OrderPlaced"


@dataclass
class Receipt(EffectReceipt, Variant):
    """The `Receipt` arm of `demo/OrderEvent@1`."""

    TAG: ClassVar[str | None] = "Receipt"


@dataclass
class HttpRequest:
    method: str
    url: str
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes | None = None


order = Workflow("demo/Order@1", state=Order)


@order.on("demo/OrderEvent@1", Placed | Receipt)
def on_order_event(state: Order, event: Placed | Receipt, ctx: Context) -> Order:
    """The kernel delivers both orders and receipts as arms of the workflow's one event
    schema (routing wraps an event as the arm that refs its schema)."""
    if isinstance(event, Placed):
        return on_order_placed(state, event, ctx)
    return on_receipt(state, event, ctx)


@order.on("demo/OrderPlaced@1", OrderPlaced)
def on_order_placed(state: Order, placed: OrderPlaced, ctx: Context) -> Order:
    if state.status != "new":
        return state  # a duplicate placement changes nothing
    if placed.amount_cents <= 0:
        return _settle(state, placed, ctx, "failed", "amount must be positive")
    body = cbor.encode({"order_id": placed.order_id, "amount_cents": placed.amount_cents})
    ctx.effect(
        HTTP_EFFECT,
        HttpRequest("POST", PAYMENT_URL, {"content-type": "application/cbor"}, body),
        idempotency_key=f"charge:{placed.order_id}".encode(),
        issuer_ref=f"charge:{placed.order_id}",
    )
    ctx.effect(
        TIMER_EFFECT,
        {"deliver_at_ns": ctx.now_ns + PAYMENT_TIMEOUT_NS, "key": placed.order_id},
        issuer_ref=f"timeout:{placed.order_id}",
    )
    return Order(placed.order_id, placed.amount_cents, placed.currency, "awaiting_payment")


@order.on("sys/EffectReceiptEnvelope@1", EffectReceipt)
def on_receipt(state: Order, receipt: EffectReceipt, ctx: Context) -> Order:
    state.receipts += 1
    if state.status != "awaiting_payment":
        return state  # late receipts (the timer after payment, say) are counted, not acted on
    if receipt.effect == TIMER_EFFECT:
        return _settle(state, state, ctx, "failed", "payment timed out")
    if receipt.effect != HTTP_EFFECT:
        return state
    status = receipt.status.get("$tag")
    if status != "ok":
        return _settle(state, state, ctx, "failed", f"payment request {status}")
    http_status = _http_status(receipt.payload)
    if http_status is not None and not HTTP_OK_MIN <= http_status <= HTTP_OK_MAX:
        return _settle(state, state, ctx, "failed", f"payment declined (HTTP {http_status})")
    return _settle(state, state, ctx, "paid", None)


def _settle(
    state: Order, source: Order | OrderPlaced, ctx: Context, status: Status, reason: str | None
) -> Order:
    settled = Order(
        source.order_id, source.amount_cents, source.currency, status, reason, state.receipts
    )
    ctx.emit(
        "demo/OrderSettled@1", OrderSettled(settled.order_id, status, settled.amount_cents, reason)
    )
    return settled


def _http_status(payload: bytes) -> int | None:
    """The HTTP status in an `http.request` receipt payload (`{"status": int, ...}`), if the
    payload carries one."""
    try:
        value = cbor.decode(payload)
    except cbor.CborError:
        return None
    status = value.get("status") if type(value) is dict else None
    return status if type(status) is int else None


WitWorld = export(order)
