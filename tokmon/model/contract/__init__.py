"""What a judgment is and gives: the reducer contract and its registry, the frozen views
the projectors place, the history's points and the event log (what the judgments and the
fold both read)."""
