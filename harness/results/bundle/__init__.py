"""The result bundle on disk: writer, reader (typed records), records (decoding), validator, archives, imported logs
as bundles, node counts. May import schema/, statistics/, importers/, rederive/ and machine; nothing above it."""
