"""Guest SDK for aos workflows (standard library only)."""
