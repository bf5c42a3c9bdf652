"""Application Auto Scaling acted on: scalable targets and policies that move real fleets.

moto records targets and policies; this package adds what the service does with them, one
module per job:

* :mod:`.records`: DescribeScalableTargets and DescribeScalingPolicies paged as the
  service pages them (50 targets, 10 policies), for every caller, and read back page by
  page;
* :mod:`.checks`: the refusals moto skips (a target on an endpoint or variant that does
  not exist, MinCapacity above MaxCapacity, a policy without a registered target, an
  update that changes a scaled variant's instance type);
* :mod:`.tracking_alarms`: the alarms target tracking creates
  (``TargetTracking-<resource>-AlarmHigh/Low-<uuid>``, evaluated by the control loop like
  any alarm), deleted with their policy;
* :mod:`.bookkeeping`: what each policy's cooldowns need remembered between periods;
* :mod:`.target_tracking` and :mod:`.step_scaling`: what one policy proposes in a period
  (target tracking through :func:`mmelocal.rules.autoscaling.target_tracking_step` on the
  published metric; step scaling once for every alarm in ALARM that invokes it), or when
  a user's ``SetAlarmState`` invokes it;
* :mod:`.decisions`: which proposal is acted on (a target tracking scale-in waits until
  every target tracking policy with scale-in enabled is ready to scale in; of the rest,
  the largest capacity wins, scale-out or scale-in, as the service decides);
* :mod:`.autoscaler`: the API overlay and the control loop (:meth:`Autoscaler.tick`): a
  change resizes the variant's fleet on a worker thread (new instances join routing once
  Triton is up; removed ones drain first) while ``DescribeEndpoint`` shows ``Updating``
  and both instance counts;
* :mod:`.activities`: ``DescribeScalingActivities`` (moto answers a 500), worded as the
  service words it.

Cooldowns and periods run on the control loop's clock (``--time-scale``).
"""

from __future__ import annotations

from mmelocal.localaws.scaling.activities import Activity
from mmelocal.localaws.scaling.autoscaler import Autoscaler, FleetOf, ShowCounts
from mmelocal.localaws.scaling.checks import VariantsOf
from mmelocal.localaws.scaling.records import PAGED_OPERATIONS, paged_records, parse_resource

__all__ = [
    "PAGED_OPERATIONS",
    "Activity",
    "Autoscaler",
    "FleetOf",
    "ShowCounts",
    "VariantsOf",
    "paged_records",
    "parse_resource",
]
