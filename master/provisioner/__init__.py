"""Elastic agents: launch cloud instances for pending work, reap idle ones.

- `decision`: the pure scale decision (no I/O, injectable clock).
- `states`: the instance state machine (enum, transition table, the one function that moves it).
- `config`: a pool's `provider` section (Determined's keys), parsed and checked.
- `provider`, `aws`, `gcp`: the cloud adapters behind one small interface.
- `service`: one provisioning pass (cloud + DB in, decision out, applied); `tokens`: join tokens.
"""
