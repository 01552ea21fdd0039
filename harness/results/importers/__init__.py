"""Importers: other tools' logs (nccl-tests / rccl-tests tables and JSON, mamf-finder logs) read into ordinary
rows, every printed figure re-derived under xmfu's conventions and each disagreement kept in the row
(`imported.disagreements`), never silently replaced. `xmfu import` (harness/cli/importing.py) is the front door and
bundle/imported.py writes the bundle; `xmfu validate` re-reads the kept log (rederive/imported.py) so an imported
row cannot drift from what its tool printed. May import schema/ and statistics/.
"""


class LogError(ValueError):
    """A log that cannot be imported: malformed, truncated, or missing what a row needs. One paragraph."""
