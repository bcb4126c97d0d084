"""The `det` command line (`harness.cli.main:main`)."""
