"""gpulab's controller, one package per stage of the data path (README "The path of the data").

- ``lab.core``: what every stage shares: errors, configuration, schemas, bounded reads, paths, limits,
  the MLPerf catalogue.
- ``lab.hosts``: the hosts and their software: inventory, remote execution, Ansible, provisioning and
  audit, stack profiles, datasets, the runner's distribution.
- ``lab.sweep``: sweeps: plan, state file, host runs and locks, unit workers, preflight, topology, progress.
- ``lab.results``: reading what runs left: run directories, plain and published MLPerf logs of each era,
  checksums, telemetry, compliance.
- ``lab.report``: reports: analysis, scoring, statistics, comparison, figures, rendering.
- ``lab.validate``: hardware validation: checks, references, verdicts.
- ``lab.commands``: the commands that join stages (sweep, dry run, collect, report, validate) as functions of
  plain arguments with typed results: what tasks.py calls.

Data files shared by the stages: ``lab/data/*.yml`` and their schemas ``lab/schemas/*.json``.
Which package may import which: README "Layers" (checked by tests/unit/test_layering.py).
"""
