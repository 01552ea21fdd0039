"""What is measured on: platform and device detection, the peak table, CPU facts, the environment record,
framework adapters (moving inputs into torch/JAX), dtypes, process/rank information, and telemetry.

May import: nothing else of xmfu's (neither `xmfu.harness.engine` nor `xmfu.harness.results`, nor any workload).
"""
