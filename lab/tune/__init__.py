"""lab.tune: hyperparameter searches whose trials are sweeps (``invoke tune``).

Owns the search space (``space``, lab/data/tune_space.yml), the seed-stable cost and the early stop
(``objective``), the study's storage in the lab's database (``storage``), a trial run through a sweep
backend (``trials``), the search itself (``search``: ask, run, tell, resume), the request checked
(``entry``) and the outcome (``report``).

Entry points: ``entry.request`` and ``search.tune`` (invoke tune).
May import: lab.core, lab.sweep, lab.history, lab.hosts, lab.results (README "Layers").
"""
