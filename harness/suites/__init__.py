"""Suites: several `xmfu run`s as one command (experiment=acceptance, experiment=nightly). doctor checks the
machine first, parts composes and runs the jobs, suite drives them and writes the node records; verdict draws each
node's headline figures, judgement the suite's pass or fail, suite_report the verdict page, yardsticks the figures
against their public references; nightly appends to the history and judges the night.

Front door: may import every layer and the run composition (config/, api, run); never the cli.
"""
