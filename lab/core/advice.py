"""The commands gpulab prints as advice carry what the user's own command used, so that they work when pasted.

A line of advice names a command in backquotes (```invoke datasets --host h1 --names ncf```).
``carry(text)`` rewrites every such command to the inventory and the settings file the running task uses:
``invoke -f FILE`` when Invoke was given one, and ``--inventory PATH`` (when the command was given one) for the
tasks that take an inventory and were not given one: what lives only on the command line. Settings that
persist (a lab's invoke.yaml, ``INVOKE_GPULAB_*``) apply to the pasted command as they did to the first.
``remember`` is called once per task (lab.core.cli.task_errors) with what Invoke parsed; a library call
that set nothing gets the commands unchanged.
"""

from __future__ import annotations

import re
import shlex

# the tasks that read an inventory (tasks.py: the SELECT options, collect)
INVENTORY_TASKS = frozenset({"provision", "audit", "datasets", "sweep", "collect", "validate"})
_COMMAND = re.compile(r"`invoke ([^`\n]*)`")
_context: dict[str, str | None] = {"config": None, "inventory": None}


def remember(*, config: str | None = None, inventory: str | None = None) -> None:
    """What the running task uses: Invoke's ``-f`` file (None: none) and its inventory (the option or setting)."""
    _context["config"] = str(config) if config else None
    _context["inventory"] = str(inventory) if inventory else None


def command(words: str) -> str:
    """``invoke WORDS`` with the ``-f`` file and the inventory in use added where they are missing."""
    try:
        parts = shlex.split(words)
    except ValueError:  # not shell words: left as it is
        return f"invoke {words}"
    out = ["invoke"]
    if _context["config"] and not ({"-f", "--config"} & set(parts)):
        out += ["-f", shlex.quote(_context["config"])]
    out.append(words)
    task = next((p for p in parts if not p.startswith("-")), None)
    has_inventory = any(p in ("-i", "--inventory") or p.startswith("--inventory=") for p in parts)
    if task in INVENTORY_TASKS and _context["inventory"] and not has_inventory:
        out += ["--inventory", shlex.quote(_context["inventory"])]
    return " ".join(out)


def carry(text: str) -> str:
    """``text`` with every backquoted ``invoke ...`` command carrying the -f file and inventory in use."""
    return _COMMAND.sub(lambda m: f"`{command(m.group(1))}`", text)
