"""Auditing a world after the fact (spec/05 §1.2, §7): `replay` rebuilds it in a scratch store
and compares every record (`aos world replay --verify`), `replay_parallel` spreads that over
worker processes, `integrity` checks the journal chain and the CAS without stepping (`aos
world verify`), `export` writes and checks a signed journal export, `gc` removes the blobs no
retained snapshot, head or manifest names."""
