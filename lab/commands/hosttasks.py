"""The tasks that work on the hosts themselves: `invoke provision`, `audit` and `datasets`, with the host
selection (--host, --device, --limit, --inventory) every host task shares. tasks.py takes them into its
namespace from ``tasks()``, new Task objects each time it loads (lab.core.cli.task_options). Thin as every
task is: parse, call lab.hosts, print, exit code (lab.core.cli.task_errors); the modules that do the work are
imported when a task runs, not when `invoke` starts.
"""

from __future__ import annotations

from invoke import Exit, Task

from lab.core.cli import fresh_tasks, setting, task_errors, task_options

SELECT_HELP = {
    "host": "host name(s), comma separated",
    "device": "device group of the inventory (t4, v100, ...)",
    "limit": "an Ansible host pattern",
    "inventory": "Ansible inventory to use (default: gpulab.inventory)",
}


def select(c, inventory, host=None, device=None, limit=None):
    """The inventory's hosts that --host, --device and --limit name (lab.hosts.inventory)."""
    from lab.hosts import inventory as inv

    return inv.load(setting(c, "inventory", inventory)).select(host, device, limit)


def _changes_hosts(c, inventory, task: str) -> None:
    """Provisioning and data preparation change the hosts: on the embedded default (this machine, used because
    no inventory was named) they ask for the inventory to be named, so that a README line run as it stands
    never installs a stack on the machine it was typed on."""
    from lab.core import program
    from lab.core.errors import ConfigError

    if inventory is None and not program.set_by(c.config, "inventory"):
        default = setting(c, "inventory")
        raise ConfigError(
            f"{task} changes the hosts it runs on, and no inventory was named (the default, {default}, "
            f"is this machine): name it, `invoke {task} --inventory {default}` to change this machine, "
            f"or your lab's inventory (--inventory FILE, or the setting gpulab.inventory); "
            f"--check changes nothing"
        )


@task_options(
    help={
        **SELECT_HELP,
        "stack": "stack profile to apply instead of each host's gpulab_stack",
        "check": "dry run: report what would change, change nothing",
        "diff": "show file and package differences",
        "datasets": "also fetch and prepare these datasets (comma list)",
    }
)
@task_errors
def provision(
    c, host=None, device=None, limit=None, stack=None, check=False, diff=False, datasets=None, inventory=None
):
    """Bring hosts to their stack profile with Ansible and read back what is installed."""
    from lab.hosts import provision as prov

    hosts = select(c, inventory, host, device, limit)
    if not check:
        _changes_hosts(c, inventory, "provision")
    summary = prov.provision(
        hosts,
        inventory=setting(c, "inventory", inventory),
        stack=stack,
        check=check,
        diff=diff,
        datasets=datasets,
        datasets_catalogue=setting(c, "datasets_catalogue"),
        artifacts=setting(c, "artifacts"),
        stacks_dir=setting(c, "stacks"),
    )
    if not summary.ok:
        raise Exit(code=1)


@task_options(help={**SELECT_HELP, "json": "print the drift as JSON"})
@task_errors
def audit(c, host=None, device=None, limit=None, json=False, inventory=None):
    """Compare hosts with their stack profiles and print the drift; exit 1 on drift."""
    from lab.hosts import provision as prov

    hosts = select(c, inventory, host, device, limit)
    report = prov.audit(
        hosts,
        inventory=setting(c, "inventory", inventory),
        as_json=json,
        artifacts=setting(c, "artifacts"),
        stacks_dir=setting(c, "stacks"),
    )
    if not report.ok:
        raise Exit(code=1)


@task_options(
    help={
        **SELECT_HELP,
        "names": "datasets or benchmarks, comma separated (resnet50,ncf or imagenet,ml-20m)",
        "storage": "copy (each host its own copy) or shared (one host prepares on shared storage)",
        "root": "data root on the hosts (default: <gpulab_workdir>/data)",
        "catalogue": "dataset catalogue (default: gpulab.datasets_catalogue)",
        "check": "dry run: report what would be fetched, change nothing",
    }
)
@task_errors
def datasets(
    c, names, host=None, device=None, limit=None, storage=None, root=None, catalogue=None, check=False, inventory=None
):
    """Fetch, verify and prepare benchmark datasets on hosts; each host checks the result."""
    from lab.hosts import datasets as ds

    hosts = select(c, inventory, host, device, limit)
    if not check:
        _changes_hosts(c, inventory, "datasets")
    result = ds.prepare(
        hosts,
        names,
        inventory=setting(c, "inventory", inventory),
        catalogue=setting(c, "datasets_catalogue", catalogue),
        storage=storage,
        root=root,
        check=check,
        artifacts=setting(c, "artifacts"),
    )
    for line in result.lines:
        print(line)
    if not result.ok:
        raise Exit(code=1)


def tasks() -> list[Task]:
    """New Task objects of provision, audit and datasets, for each load of tasks.py."""
    return fresh_tasks(provision, audit, datasets)
