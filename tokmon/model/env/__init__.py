"""The environment: what a server says of itself, and the redaction rule."""
