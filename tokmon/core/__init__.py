"""The measuring core: workload, client, measurement, statistics, probes, recording.

Nothing under ``tokmon.core`` imports textual or rich: the engine runs headless in its
own process and the dashboard is only one of its consumers.
"""
