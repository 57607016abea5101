"""The flow world's tools (spec/11 §1.2, §3.3, §7; spec/12 §6): one module per tool kind
(`http`, `python`, `postgres`, `duckdb`, `shell`, `file`, `transfer`), what every call may use
(`context`), and `dispatch`, which runs one call of any kind and serves a kind as an adapter."""
