"""The statistics every figure is drawn with: time summaries and their CIs, paired speedups and verdicts, the
steady-state windows, a window's energy. Imports nothing of xmfu's: the engine, the validator and compare share it."""
