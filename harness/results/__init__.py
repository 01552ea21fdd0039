"""What is kept and read, in rooms, lowest first: schema/ (the typed records), statistics/, importers/ (other
tools' logs as rows), rederive/ (every figure re-derived), bundle/ (writer, reader, validator), analysis/ (compare,
cost, flags), plots/, history/, render/ (tables, pages, exports). A room imports only the rooms below it.

May import: `xmfu.harness.machine` (the peak table). Never imports `xmfu.harness.engine`, a workload or the front
door.
"""
