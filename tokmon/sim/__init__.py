"""The built-in simulated inference server (``tokmon sim``): see ``tokmon.sim.model``."""
