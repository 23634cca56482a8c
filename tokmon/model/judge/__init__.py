"""The judgments: each reducer that owns one piece of the run, one module each."""
