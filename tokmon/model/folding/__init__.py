"""The fold, the reducer registry and the two projectors (the snapshot each tick, the summary at the end)."""
