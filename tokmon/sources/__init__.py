"""Dashboard sources: a live session (engine processes, probes) and a replay of a
recording; both feed the same fold and hand out Snapshots."""
