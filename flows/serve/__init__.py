"""Serving flows on a world (spec/11 §5, §9, §10): the flow world (`flow_world`), the
operations on executions (`flow_operations`, `signals`, `retry`), their reads
(`execution_views`, `flow_explain`, `cell_status`), the node's HTTP routes (`routes`) and
inspector pages (`pages`), one client over both (`flow_client`), in-process adapters
(`local`), and a version's shadow and migration (`flow_shadow`, `migration`)."""
