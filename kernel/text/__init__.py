"""Text from outside read into plain values, bounded in size and depth before it allocates:
`jsontext` (strict JSON) and `yamltext` (YAML 1.1 safe loading)."""
