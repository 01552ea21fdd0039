"""The history store (Parquet) and what is read from it: series, the regression check, trends, coverage over
time. May import plots/, analysis/ and the rooms below them, and machine; never render/."""
