"""What every stage shares: the one exception family (``errors``), the ``gpulab:`` configuration
(``settings``: every setting declared once; ``config``, ``cli``), YAML data checked against lab/schemas
(``schema``), the one reader of files from elsewhere (``bounded``), paths built from values (``paths``),
ranges of every count and size (``limits``),
names (``fields``), the version rule (``versions``), the MLPerf catalogue of benchmarks and devices
(``mlperf``) and the pages' Jinja environment (``templates``).

Entry points: none of its own; every other package calls it.
May import: nothing else of lab; from runner only the contract ``runner.rundir`` (run outcomes).
"""
