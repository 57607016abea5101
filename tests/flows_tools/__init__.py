"""The flow tool adapters (flows/tools.py): handlers, and adapter processes on a node."""
