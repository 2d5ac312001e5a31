"""Sweeps: hosts x workloads x GPU counts x seeds run on the hosts and collected here. The plan
(``plan``, ``study``, ``workloads``, ``topology``), the state file sweep.json (``state``, ``statefile``),
the hosts made ready (``hostprep``), one run's processes on a host (``hostrun``, ``hostlock``, ``node``), the
thread per unit (``unitworker``), the prepared-data check (``preflight``) and what the terminal shows (``progress``).

Entry points: ``driver.run_sweep`` (invoke sweep, demo), ``collect.collect`` (invoke collect),
``study.dry_run`` (invoke sweep --dry-run), each through lab.commands.sweep.
May import: lab.core, lab.hosts, lab.results (checksums); from runner only ``runner.rundir``.
"""
