"""A heartbeat (docs/agent-protocol.md): `actions.answer_heartbeat` is its one entry (the
view calls only it) and decides: one statement where nothing changed (`quiet` remembers the
reply), else the full record (`actions.record_heartbeat`)."""
