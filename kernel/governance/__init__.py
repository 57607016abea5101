"""Governance of a world's manifest (spec/06): `proposals` (propose, shadow, approve or
reject, apply) and `shadow`, the replay of the recorded history under a proposed manifest
that a proposal must pass before it is applied."""
