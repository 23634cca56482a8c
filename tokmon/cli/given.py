"""What ``tokmon run``'s options point at, read before the plan is made: the URL and API
key from the environment (or the key's file), and the workload's files (prompts,
conversations, questions, a trace or an earlier recording's load).

Kept apart so that the plan (``cli/plan.py``) is a function of what it is given: this is
the one step before it that touches files. A clash of options about a file is told before
the file is read (a large trace is not scanned to be refused).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from tokmon.cli.options import RunOptions
from tokmon.cli.parser import UsageError, api_key
from tokmon.cli.plan import Given, check_conversations, check_quality, check_trace, quality_share


def read_given(o: RunOptions, environ: Mapping[str, str] = os.environ) -> Given:
    """Read what the options name. Raises UsageError with one line."""
    from tokmon import inputs
    from tokmon.model.workloads.workload import WorkloadError

    check_quality(o, quality_share(o.quality_probes))
    check_trace(o)
    check_conversations(o)
    key = api_key(o.api_key_file, environ)
    try:
        items = inputs.load_quality_file(o.quality_file) if o.quality_file else ()
        prompts = tuple(inputs.load_prompt_file(o.prompts)) if o.prompts else ()
        scripts = inputs.load_conversations(o.conversations) if o.conversations else ()
        trace = None
        if o.trace:
            # Ray workers on other nodes cannot read this machine's file: they are sent
            # the entries, so the trace is held whole there
            whole = 1 << 62 if o.ray else None
            trace = inputs.load_mooncake(o.trace, o.trace_speed, o.trace_block, whole)
        elif o.replay_load:
            from tokmon.recording.trace import trace_of_recording

            trace = trace_of_recording(o.replay_load, o.trace_speed)
    except WorkloadError as e:
        raise UsageError(str(e)) from None
    return Given(
        url=o.url or environ.get("TOKMON_URL") or None,
        api_key=key,
        prompts=prompts,
        conversations=scripts,
        quality_items=items,
        trace=trace,
    )
