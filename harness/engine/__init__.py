"""The measuring engine: runs cases, checks them, times them and writes their rows.

What lives here: the case and registry protocols a workload implements, the run context, the typed
settings the engine reads and how any setting is declared once (declare) and checked through the structured config
derived from it (structured), the timers (one per framework), the sampler and its stop rule, steady-state
analysis, the figures derived from a time (throughput, MFU), and signal handling.

May import: `xmfu.harness.results` and `xmfu.harness.machine`. Never imports a workload (the allow-list in
`workloads/catalog.py` hands the engine its workloads) nor the front door (`xmfu.harness.cli`, `xmfu.harness.run`...).
"""
