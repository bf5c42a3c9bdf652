"""A discrete-event simulation of an MME fleet serving a trace.

The fleet is ``instances`` identical instances (autoscaling changes the count). The rules
are the platform's, from :mod:`mmelocal.rules.routing` (routing, hot-model replication,
LRU eviction, through :class:`~mmelocal.rules.routing.FastLru`) and
:mod:`mmelocal.rules.autoscaling` (target tracking). Per request, in time order:

1. requests that finished by now leave (their models may be evicted again);
2. autoscaling evaluates every closed metric period (invocations per instance);
3. the request goes where its target is ready (fewest in flight), else where it is loading
   (a miss that waits for that load), else (cold: a miss and a load) to the instance with
   the most room. The cold
   choice calls :func:`~mmelocal.rules.routing.choose_cold` (instances still starting are
   chosen only when none is up); the ready choice, per request, is :func:`pick_holder`,
   tested equal to :func:`~mmelocal.rules.routing.choose_ready` on random inputs;
4. loads queue per instance and run ``parallel_loads`` at a time (1, the default, is the
   emulator's rule: one load holds the instance's load lock); room is made when a load
   starts, as the emulator does, so models waiting in the queue hold no memory: the least
   recently used idle models (by their last call's end) are unloaded one after the other
   (``unload_s`` each); when the others stay busy the load waits in its slot for one to go
   idle, up to ``busy_wait_s``, then fails (``InsufficientMemory``); a caller
   that would wait longer than ``load_wait_timeout_s`` gets ``ModelNotReadyException``
   (an error) while the load goes on;
   with ``download`` times, each instance keeps artifacts on its disk (``disk_bytes``,
   least recently used artifacts of models neither loaded nor queued deleted first, the
   rule of :func:`~mmelocal.rules.routing.plan_disk_eviction` through a :class:`FastLru`;
   a disk over its budget because all were in use is trimmed once a model unloads): a
   load whose artifact is on disk skips the download; a download starts when the load is
   asked for, beside the others, and the load whose download ended first takes the load
   slot first (the emulator downloads before it waits for its load lock);
   ``load_limit_s`` (the platform's 360 s) runs from the call that asked for the load and
   covers the download, the wait in the queue and the load, as the emulator's deadline
   does: a load that would end later
   fails at the limit (one still queued then never starts): the model never serves, its
   callers still waiting get ``ModelError``, and the next request loads it again;
5. it waits for a free slot (``concurrency`` per instance) and takes ``service_s``.

``ModelCacheHit`` is 1 for a request whose target was ready where it went, as the
emulator and the service count it, and every request is a sample: one that failed
(``ModelNotReadyException``, a load that failed) waited for a load, a 0 (the emulator's
``record_invocation``; no simulated request is refused before it reaches its model).
``cold_starts`` are the requests with 0 (they waited for a load, answered or not),
``loads`` the loads themselves (replicas included).

The parts: :mod:`.config` (what the fleet is), :mod:`.fleet` (the instances, the ready
choice, resize and autoscaling, billing), :mod:`.callers` (each request's outcome, the
callers of loads and the calls in flight), :mod:`.loads` (the load queues, downloads and
disks, room and eviction, failed loads) and :mod:`.engine` (the event loop).
"""

from mmelocal.traffic.simulate.callers import LOAD_FAILED as LOAD_FAILED
from mmelocal.traffic.simulate.callers import MODEL_NOT_READY as MODEL_NOT_READY
from mmelocal.traffic.simulate.callers import NO_ROOM as NO_ROOM
from mmelocal.traffic.simulate.config import Autoscaling, LoadTimes, SimConfig
from mmelocal.traffic.simulate.engine import simulate
from mmelocal.traffic.simulate.fleet import pick_holder as pick_holder

__all__ = ["Autoscaling", "LoadTimes", "SimConfig", "simulate"]
