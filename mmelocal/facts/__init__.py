"""The platform's facts, one home each: SageMaker's limits, timeouts, header names, statuses
and error table, the memory threshold, retry policies, card memory, CloudWatch names and
autoscaling numbers. Modules here import nothing from mmelocal but ``errors`` and ``units``.
"""
