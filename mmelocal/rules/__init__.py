"""The platform's rules as pure code (no I/O, no clock: time is an argument), shared by the
emulator, the local AWS and the traffic simulator: autoscaling (alarm evaluation, desired
count, cooldowns) and routing (model affinity, replication, eviction order).
Modules here import only :mod:`mmelocal.facts`, ``errors`` and ``units``.
"""
