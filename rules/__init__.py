"""The knowledge base: the fact schema and the durable_rules ruleset. Pure
decisions, no I/O: facts in, one next step out, and the reason for it."""
