"""Statistics: windows, totals, intervals, sketches, trends, counts in words."""
