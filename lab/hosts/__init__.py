"""The hosts and their software: the inventory (``inventory``), remote execution over Fabric (``remote``;
``fleet``: one function on many hosts, ``HostResults``; ``capped``: what a command prints, read with a cap),
Ansible through ansible-runner (``ansible``, ``reach``, ``hostkeys``), stack profiles (``stacks``,
``osfamily``), the runner as it reaches hosts (``runnerdist``).

Entry points: ``provision.provision`` and ``provision.audit`` (invoke provision, audit),
``datasets.prepare`` (invoke datasets).
May import: lab.core; from runner only the contract ``runner.source``.
"""
