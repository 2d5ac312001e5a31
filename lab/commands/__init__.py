"""The lab's commands as functions: plain arguments in, a typed result out. Each joins the stages one command
needs (the hosts, a sweep, the history, a report, a validate), so that a sweep, a dry run or a validate runs
without Invoke; tasks.py only parses its options and settings, calls one of these and prints.

Modules: sweep (``sweep``, ``dry_run``, ``collect``), report (``report``), tune (``tune``), validate (``validate``,
``baseline_from_history``), history (``import_files``, ``show``, ``page``, ``quarantine_list``, ``quarantine_add``,
``quarantine_release``), historytasks (the `invoke history` and `quarantine` tasks: tasks.py's sub-collections),
hosttasks (the `invoke provision`, `audit` and `datasets` tasks, in tasks.py's namespace).

Entry points: ``sweep.sweep`` (invoke sweep, demo), ``sweep.dry_run`` (invoke sweep --dry-run),
``sweep.collect`` (invoke collect), ``report.report`` (invoke report, demo), ``tune.tune`` (invoke tune),
``validate.validate`` and ``validate.baseline_from_history`` (invoke validate), ``history.*`` (invoke history,
quarantine).
May import: lab.core, lab.hosts, lab.results, lab.sweep, lab.report, lab.validate, lab.history, lab.tune.
"""
