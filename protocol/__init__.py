"""What the console and the node agent agree on, owned by neither: the agent API's schemas
(`protocol.agent`). Imports nothing of ours and no Django: the agent imports it on GPU
nodes without the console installed.
"""
