"""The agent side of the console, three rooms with different readers and dependencies:

- the Django app `agents` (this package's modules): the agent API (register, heartbeat,
  logs), bootstrap tokens and registration records (and their admin), the node monitor;
- `agents.node`: the program that runs on every GPU node (no Django);
- `agents.sdk`: the training SDK imported by training scripts (no dependencies).

The protocol both sides speak is `protocol.agent`, owned by neither.
"""
