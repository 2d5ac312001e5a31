"""The lab's memory: per-GPU history of validate checks and runs in one SQL database, and quarantine.

SQLite under results/ by default (``results/history.sqlite``: nothing to
start), or any SQLAlchemy URL a lab shares (``gpulab.history_url``, e.g.
``postgresql+psycopg://gpulab@dbhost/gpulab``). The schema is versioned with
Alembic (migrations/ in this package); a database written by a newer gpulab is
refused. Run directories and validate outputs stay the source of truth: the
database is rebuilt from them with ``import_paths`` (idempotent).

Modules: db (URL, engine, migrations, failures as one line), models (tables),
sources (run directories through lab.results, validate.json files -> records),
store (records -> rows, idempotent, safe with two writers), query (the history
table), quarantine (list, add, release; what a sweep plans around), sweeps (what a
sweep reads and writes as it goes: its health checks, quarantine, each run once
collected), past (each GPU's own past for validate's trend checks), memory (what the other stages
and the tasks call: import, record, past_reader, after_validate, known_good, quarantined), autoquarantine
(quarantine after a failing validate), baseline (figures of known-good GPUs for
references), page (the history's HTML page). The command line is lab.commands.history and historytasks.

Entry points: ``memory.import_paths`` (invoke history.import), ``memory.record`` (after a sweep or a validate), ``query.history_rows`` (invoke history),
``quarantine.add/release/active/for_sweep`` (invoke quarantine, invoke sweep), ``memory.quarantined``,
``memory.past_reader``, ``memory.after_validate`` and ``memory.known_good`` (invoke validate); ``db.open_db``,
``db.resolve_url``, ``db.sqlite_folder``, ``db.shown``.
May import: lab.core, lab.results, runner.rundir.
"""
