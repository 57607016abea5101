"""The aos kernel: canonical encoding, content store, manifests, stepping."""

from aos.kernel import compiled as _compiled

# Before any other kernel module is imported: the compiled hot path, when built from these
# sources (spec/09 §5).
_compiled.install()
