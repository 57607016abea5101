"""The adapter protocol's primitives, which the world and the node check against: Ed25519
`signing` of receipts and request bodies, adapter `keys` on disk, and the signed-request
`auth` of an adapter talking to a node (spec/04 §7). They depend on nothing above them, so
the world and the node import them without importing the adapter SDK (`aos.kernel.adapters.sdk`)
or the built-in adapters, which are clients of the node."""
