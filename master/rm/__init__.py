"""Resource managers: the backends that run a pool's allocations (`base.ResourceManager`).

`agent.AgentResourceManager` (polling det-agents) is the first; `registry` maps each configured
pool to its RM; `config` parses Determined 0.38's `resource_manager:` and
`additional_resource_managers:`. This package imports nothing of the master at import time
(master/config.py reads `rm.config`).
"""
