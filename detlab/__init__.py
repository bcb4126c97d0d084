"""What every detlab process shares: the master-agent protocol and cluster-wide constants.

The master, the agent and the CLI import from here; nothing here imports them.
"""
