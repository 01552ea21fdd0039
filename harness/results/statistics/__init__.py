"""The statistics every figure is drawn with: time summaries and their CIs, paired speedups and verdicts (and the
paired bootstrap of a bundle's speedups at once), quantiles of repeated draws, the steady-state windows, a window's
energy. Imports nothing of xmfu's: the engine, the validator and compare share it."""
