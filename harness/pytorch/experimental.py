"""`determined.pytorch.experimental` (torch_batch_process) is not provided: importing it, also as
`from determined.pytorch import experimental`, fails with the documented message."""

from harness._determined import unsupported_error

raise unsupported_error("determined.pytorch.experimental")
