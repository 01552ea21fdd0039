"""What is kept and read: the result bundle (schema, writer, reader, validator), comparability keys, the
statistics shared by the engine and `compare`, compare, cost, history, the HTML report and its charts, and
the table printed at the end of a run.

May import: `xmfu.harness.machine` (the peak table). Never imports `xmfu.harness.engine` or a workload.
"""
