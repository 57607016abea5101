"""The `aos` command line."""
