"""Ed25519 keys and signatures (spec/04 §7): `signatures` signs and verifies receipts and
request bodies, `keys` reads and writes key files, `request_auth` is the signed-request check
of an adapter talking to a node. The world verifies receipts and the node verifies requests
with them, while the adapter SDK and the built-in adapters (`aos.kernel.adapters`) are
clients of the node and the world: kept apart, neither package imports the other's
dependents."""
