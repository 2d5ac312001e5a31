"""Hardware validation: the checks (``gpuchecks``, ``hostchecks``), GPU references (``gpurefs``),
verdict words, records and rendering (``verdict``), NVIDIA's tools beside them (``vendor``: DCGM's
diagnostic, ``dcgm``, and Fabric Manager, ``fabric``).

Entry point: ``fleet.validate_fleet`` (invoke validate).
May import: lab.core, lab.hosts.
"""
