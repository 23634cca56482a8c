"""The pure model: typed facts in, figures out (the fold, statistics, summary, alerts,
ladder, workload). Imports nothing that does I/O and nothing from the parts above it."""
