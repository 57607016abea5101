"""The flow tool adapters (flows/tools/dispatch.py): handlers, and adapter processes on a node."""
