"""Hardware validation: the checks (``gpuchecks``, ``loadchecks``: a GPU under load, ``hostchecks``,
``linkchecks``: NVLink, PCIe replays, AER; ``toolchecks``: nccl-tests and nvbandwidth beside gpulab's figures), GPU
references (``gpurefs``), verdict words, records and rendering (``verdict``), the action of
every failing check (``actions``, lab/data/actions.yml), NVIDIA's tools beside gpulab's checks
(``vendor``: DCGM's diagnostic, ``dcgm``, and Fabric Manager, ``fabric``).

Entry point: ``fleet.validate_fleet`` (invoke validate).
May import: lab.core, lab.hosts.
"""
