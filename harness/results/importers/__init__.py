"""Importers: other tools' logs (nccl-tests / rccl-tests tables and JSON, mamf-finder logs) read into ordinary
rows, every printed figure re-derived under xmfu's conventions and each disagreement kept in the row
(`imported.disagreements`), never silently replaced. `xmfu import` (harness/cli/importing.py) is the front door and
bundle/imported.py writes the bundle; `xmfu validate` re-reads the kept log (rederive/imported.py) so an imported
row cannot drift from what its tool printed. May import schema/ and statistics/.
"""


# An import's bounds: one row per table half or shape; a log of nccl-tests' usual sweep (-b 8 -e 16G -f 2) gives 64
# rows, a fine one (-i 1M up to 8G) about 16,000. A bundle's rows are built, written and later validated in memory,
# about a millisecond each: a 580,000-line log (1.16 million rows) never finished.
MAX_ROWS = 20_000
MAX_LOG_BYTES = 256 * 2**20


class LogError(ValueError):
    """A log that cannot be imported: malformed, truncated, or missing what a row needs. One paragraph."""
