"""Traffic: traces as data, synthetic traces, open-loop replay against an endpoint, a
discrete-event simulation of the fleet, and sizing from it.

* :mod:`.trace` reads and writes traces (``timestamp,target_model[,payload_bytes]``);
* :mod:`.make` writes synthetic ones (Poisson arrivals, Zipf / uniform / hot-set);
* :mod:`.replay` sends a trace open loop to ``mmelocal serve``, a local-AWS endpoint or a
  real endpoint, and reports what happened;
* :mod:`.simulate` runs it through a simulated fleet (the rules of :mod:`mmelocal.rules`);
* :mod:`.size` searches instance types and counts for an SLO;
* :mod:`.results` is the JSON and HTML both commands write.
"""
