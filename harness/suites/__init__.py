"""Suites: several `xmfu run`s as one command (experiment=acceptance, experiment=nightly). spec reads a suite's
definition, parts composes and runs its jobs, suite drives them and writes the node records and the verdict page,
nightly appends to the history and judges the night.

Front door: may import every layer and the run composition beside it (config, hydra_app, run); never the cli.
"""
