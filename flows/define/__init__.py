"""Defining flows (spec/11 §1, spec/12): the canonical flow definition (`cfd`) and its checks,
the documents it is read from (`document`), the two front ends that compile onto it (NoETL
playbooks in `playbook/`, the arrow language in `flowlang/`), each tool kind's fields
(`tool_schema`), and the definition's pictures (`draw`, `draw_svg`)."""
