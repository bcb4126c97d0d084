"""The model registry: models, numbered versions pointing at checkpoints, aliases."""
