"""Hardware validation: the checks (``gpuchecks``, ``hostchecks``), GPU references (``gpurefs``),
verdict words, records and rendering (``verdict``).

Entry point: ``fleet.validate_fleet`` (invoke validate).
May import: lab.core, lab.hosts.
"""
