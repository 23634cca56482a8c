"""The measuring engine: the HTTP/1.1 streaming client, SSE and chunk parsing, the
kernel-stamped clock and the worker process that drives the load."""
