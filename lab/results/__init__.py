"""Reading what runs left, into ``runs.Run`` records: gpulab run directories (``rundirs``, verified by
``checksums``, the one SHA256SUMS verifier), plain MLPerf logs of each era (``plainlogs``: ``v05log``,
``v06log``, ``mllog``, facts in ``logfacts``), published result trees (``resulttree``; a round's
tree, its run files and scaling.json: ``roundtree``), telemetry (``telemetry``) and mlperf-logging's
compliance checker (``compliance``).

Entry point: ``logreader.read_runs`` (what invoke report reads).
May import: lab.core; from runner only ``runner.rundir``.
"""
