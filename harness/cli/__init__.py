"""The `xmfu` command: one module per subcommand family (main dispatches; history, doctor), what they share
(common), and the pages they write (history_page).

Front door: may import every layer (workloads, engine, results, machine) and the rest of the front door.
"""
