"""The `xmfu` command: one module per subcommand family (main dispatches; history, importing, sign...), what
they share (common), and the pages they write (history_page, settings_page).

Front door, its top: may import every layer (workloads, engine, results, machine) and the rest of the front door.
"""
