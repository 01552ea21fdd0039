"""What rows mean together: compare and its verdicts, cost, a row's quality flags, grouping, merged runs,
coverage. May import bundle/ and the rooms below it, and machine."""
