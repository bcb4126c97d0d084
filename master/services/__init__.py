"""State machines that apply searcher and scheduler decisions to the database.

Every mutation of experiment, trial, allocation or agent state runs under the master's state lock
(`master.context.state_lock()`) in its own transaction, and goes through one writer per entity in
`master.services.transitions`.
"""
