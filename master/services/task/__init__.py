"""Tasks and their allocations: commands, notebooks, shells, TensorBoards, launch
specs, the idle reaper."""
