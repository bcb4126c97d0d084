"""State machines that apply searcher and scheduler decisions to the database, one package per
entity: agent/, experiment/, trial/, task/ (tasks, allocations, commands, notebooks, shells,
TensorBoards), queue/ (the scheduling pass and the job queue), checkpoint/, user/.

Every mutation of experiment, trial, allocation or agent state runs under the master's state lock
(`master.context.state_lock()`) in its own transaction, and goes through one writer per entity in
`master.services.transitions`, the one module shared by all of them.
"""
