"""Adapters: out-of-process executors of effects, and the signed receipts they return."""
