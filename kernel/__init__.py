"""The aos kernel: canonical encoding, content store, manifests, stepping."""
