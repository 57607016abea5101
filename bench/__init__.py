"""aos benchmarks: `make bench` (quick) and `make bench-full`."""
