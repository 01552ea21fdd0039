"""What a person reads: the end-of-run table, compare's output, the HTML report and history pages, exports.
May import every other room of results/ and machine."""
