"""Every figure of a bundle re-derived from what it holds (times from samples, rates, speedups, peaks, keys,
imported rows from their logs), for the validator. May import schema/, statistics/, importers/ and machine."""
