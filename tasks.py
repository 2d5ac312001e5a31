"""gpulab's command line: `invoke --list` shows the tasks, `invoke --help TASK` their options.

Each task reads its arguments, falls back to the `gpulab` section of the Invoke
configuration (gpulab's defaults, declared in lab.core.settings, at Invoke's collection
level, under every file and variable a user sets: README "Settings"), calls one function
of the `lab` package and turns its errors into an exit code: 2 for bad input
(nothing was touched), 1 for a failed run or check. The configuration section
is checked when a task starts (lab.core.config); Invoke's own parse errors exit 2
too (lab.core.program, whose Program ``gpulab`` runs these tasks as well).
"""

from __future__ import annotations

import sys
from pathlib import Path

from invoke import Collection, Exit

from lab.core.cli import setting, task, task_errors
from lab.core.errors import GpulabError
from lab.core.program import adopt
from lab.commands import historytasks as history_tasks
from lab.commands import hosttasks as host_tasks
from lab.commands.hosttasks import SELECT_HELP, select

adopt()  # `invoke ...`: Invoke's own program goes on as gpulab's (lab/core/program.py)


def _defaults() -> dict:
    from lab.core import config

    try:
        return config.defaults()
    except GpulabError as exc:
        print(f"gpulab: {exc.message}", file=sys.stderr)
        raise SystemExit(exc.exit_code) from None


def _settings(c, timeout):
    from lab.core import config
    from lab.sweep import hostrun

    what = "--timeout" if timeout is not None else "config gpulab.run_timeout_minutes"  # --timeout '': refused
    return hostrun.Settings(
        timeout_s=config.timeout_s(setting(c, "run_timeout_minutes", timeout), what),
        **config.sweep_settings(setting(c, "sweep")),
    )


def _backend(c, backend):
    """--backend, else gpulab.sweep.backend, as (ssh|slurm|auto, gpulab.slurm.* as SlurmSettings)."""
    from lab.core import config
    from lab.sweep import slurmworker

    chosen = config.backend(  # --backend '' is refused, never the setting's value
        backend if backend is not None else setting(c, "sweep.backend"),
        "--backend" if backend is not None else "config gpulab.sweep.backend",
    )
    return chosen, slurmworker.SlurmSettings(**config.slurm_settings(setting(c, "slurm")))


def _sweep(
    c,
    hosts,
    *,
    workloads=None,
    gpus=None,
    seeds=None,
    mode=None,
    scale=None,
    name=None,
    dry_run=False,
    timeout=None,
    nodes=None,
    cfg_prefix="",
    recipe=None,
    backend=None,
):
    """The sweep and demo tasks: options (else config, ``cfg_prefix`` first) -> lab.commands.sweep; None for a
    dry run."""
    from lab.commands import sweep as cmd
    from lab.core import limits, paths
    from lab.core.errors import ConfigError

    def pick(key, value):
        found = setting(c, f"{cfg_prefix}{key}", value)
        return setting(c, key) if found is None else found

    nodes = pick("nodes", nodes)
    nodes = limits.number(1 if nodes is None else nodes, "--nodes", limits.NODES)
    settings = _settings(c, timeout)  # checked before anything starts, --dry-run too
    backend, slurm_settings = _backend(c, backend)
    results = paths.folder(setting(c, "results"), "config gpulab.results")
    req = cmd.Request(
        workloads=pick("workloads", workloads),
        gpus=pick("gpus", gpus),
        seeds=pick("seeds", seeds),
        mode=pick("mode", mode),
        scale=pick("scale", scale),
        nodes=nodes,
        name=name,
        recipe=recipe,
    )
    where = dict(
        results_dir=results,
        history_url=history_tasks.url_for(c),
        settings=settings,
        catalogue=setting(c, "datasets_catalogue"),
    )
    if dry_run:
        planned = cmd.dry_run(hosts, req, **where)
        print("\n".join(planned.lines))
        if planned.refused:
            raise ConfigError(planned.refused)
        return None
    done = cmd.sweep(
        hosts, req, **where, make_folder=not setting(c, "history_url"), backend=backend, slurm_settings=slurm_settings
    )
    from lab.sweep import progress  # after the sweep: a refused one loads no display modules

    progress.final_table(done.result.sweep.runs)
    print("\n".join(done.result.summary()))
    print(done.history_line)
    return done.result


SWEEP_HELP = {
    **SELECT_HELP,
    "workloads": "workloads, comma separated (`python -m runner list`), or 'all': the study's six benchmarks",
    "gpus": "GPU counts, comma separated, or 'all' (every count from 1 to the host's GPUs)",
    "seeds": "seeds per configuration: a number, 'mlperf' (the benchmark's MLPerf run count) or "
    "'auto' (the MLPerf run count in ttt mode, 1 in throughput mode)",
    "mode": "ttt (train to target) or throughput",
    "scale": "tiny, small or full",
    "name": "sweep name (default: sweep-<UTC time>); the same name resumes it",
    "nodes": "hosts per run (multi-node runs with one rendezvous; default: gpulab.nodes)",
    "dry_run": "print the plan with estimated wall times and the prepared data of each host "
    "(one read-only command per host); start nothing",
    "timeout": "minutes before a run is stopped, or 'auto': three times each run's estimate (lab/data/study.yml)",
    "recipe": "a recipe file (invoke tune writes one): its settings replace the catalogue's for "
    "every run of its workload",
    "backend": "how runs start: ssh (gpulab's own controller), slurm (job arrays through sbatch here) or "
    "auto (slurm where `sinfo` answers); default: gpulab.sweep.backend",
}


@task(help=SWEEP_HELP)
@task_errors
def sweep(
    c,
    device=None,
    host=None,
    limit=None,
    workloads=None,
    gpus=None,
    seeds=None,
    mode=None,
    scale=None,
    name=None,
    nodes=None,
    dry_run=False,
    timeout=None,
    inventory=None,
    recipe=None,
    backend=None,
):
    """Run workloads x GPU counts x seeds on the selected hosts (by default the reference study) and collect the runs."""
    hosts = select(c, inventory, host, device, limit)
    result = _sweep(
        c,
        hosts,
        workloads=workloads,
        gpus=gpus,
        seeds=seeds,
        mode=mode,
        scale=scale,
        name=name,
        dry_run=dry_run,
        timeout=timeout,
        nodes=nodes,
        recipe=recipe,
        backend=backend,
    )
    if result is not None and not result.ok:
        raise Exit(code=1)


@task(
    help={
        **SELECT_HELP,
        "workload": "the workload to tune (lab/data/tune_space.yml has its search space)",
        "scale": "tiny, small or full (default: gpulab.scale)",
        "name": "study name (default: tune-<workload>-<scale>-<device>); the same name resumes it",
        "seeds": "K: seeds per trial (default: gpulab.tune.seeds)",
        "trials": "trials with a result to reach (default: gpulab.tune.trials)",
        "baseline": "a recipe file: the reference recipe the search starts from and is compared with "
        "(default: the scale's own settings)",
        "space": "search space file (default: lab/data/tune_space.yml)",
        "open": "also search settings outside the MLPerf v0.5 closed rules (the space's open entries)",
        "gpus": "GPU count per run (default: every count, as a sweep plans it)",
        "timeout": "minutes before a run is stopped, or 'auto' (as invoke sweep)",
        "max_epochs": "every run's epoch limit (default: the scale's); a run that misses counts 2 x this",
        "backend": "how a trial's runs start: ssh, slurm or auto (as invoke sweep; default: gpulab.sweep.backend)",
    }
)
@task_errors
def tune(
    c,
    workload,
    scale=None,
    device=None,
    host=None,
    limit=None,
    name=None,
    seeds=None,
    trials=None,
    baseline=None,
    space=None,
    open=False,
    gpus=None,
    timeout=None,
    inventory=None,
    max_epochs=None,
    backend=None,
):
    """Search a workload's hyperparameters for seed-stable convergence: trials are sweeps of K seeds on the fleet."""
    from lab.commands import tune as cmd
    from lab.core import config, paths

    hosts = select(c, inventory, host, device, limit)
    kind, slurm_settings = _backend(c, backend)
    result = cmd.tune(
        hosts,
        workload,
        scale=setting(c, "scale", scale),
        name=name,
        device=device or host or limit,
        seeds=seeds,
        trials_count=trials,
        tune_settings=config.tune_settings(setting(c, "tune")),
        space_file=space,
        open_space=open,
        baseline=baseline,
        gpus=gpus,
        max_epochs=max_epochs,
        settings=_settings(c, timeout),
        backend=kind,
        slurm_settings=slurm_settings,
        results_dir=paths.folder(setting(c, "results"), "config gpulab.results"),
        history_url=history_tasks.url_for(c),
        make_folder=not setting(c, "history_url"),
    )
    print("\n".join(result.lines))


@task(help={"path": "a sweep directory (results/<sweep>)", "inventory": SELECT_HELP["inventory"]})
@task_errors
def collect(c, path, inventory=None):
    """Fetch again every run of a sweep that is missing or failed verification."""
    from lab.commands import sweep as cmd

    result = cmd.collect(path, setting(c, "inventory", inventory), retries=setting(c, "sweep.fetch_retries"))
    print(f"{path}: {result.fetched} run(s) fetched, {result.verified} verified, {len(result.problems)} problem(s)")
    for p in result.problems:
        print(f"  {p}")
    if result.problems:
        raise Exit(code=1)


@task(
    help={
        "path": "a sweep directory, run directories or MLPerf log files (comma separated)",
        "format": "output formats, comma separated: html, md, json, csv (default: gpulab.report_formats)",
        "compare": "another sweep to set side by side",
        "out": "output folder (default: PATH/report)",
        "round": "the published MLPerf round of MLLOG result trees, e.g. v5.1 (default: a "
        "training_results_vX.Y folder in PATH names it, else the logs say it)",
    }
)
@task_errors
def report(c, path, format=None, compare=None, out=None, round=None):
    """Turn run logs into MLPerf scores, device comparisons, scaling, seed effects and plots."""
    from lab.commands import report as cmd

    formats = setting(c, "report_formats", format)  # a comma list, read strictly by the command
    result = cmd.report(path.split(","), out=out, formats=formats, compare=compare, round=round)
    print("\n".join(result.lines()))


@task(
    help={
        **SELECT_HELP,
        "level": "quick (default), standard or burn-in",
        "baseline": "build references from these hosts",
        "json": "print verdicts as JSON",
        "out": "folder for verdicts and the HTML page (default: <gpulab.results>/validate)",
        "references": "GPU references YAML (default: gpulab.references)",
        "dcgm_level": "run level of DCGM's dcgmi diag, 1-4, 0 for none (default: gpulab.validate.dcgm_levels)",
        "from_history": "with --baseline: from the history database's known-good GPUs instead of these hosts",
    }
)
@task_errors
def validate(
    c,
    device=None,
    host=None,
    limit=None,
    level="quick",
    baseline=False,
    json=False,
    out=None,
    references=None,
    inventory=None,
    dcgm_level=None,
    from_history=False,
):
    """Check each host's GPUs for health and performance against references; exit 1 if any host fails."""
    from lab.commands import validate as cmd
    from lab.core.errors import ConfigError

    url = history_tasks.url_for(c)
    out_dir = Path(out) if out else Path(setting(c, "results")) / "validate"
    refs = setting(c, "references", references)
    if from_history:
        if not baseline:
            raise ConfigError("validate: --from-history goes with --baseline")
        made = cmd.baseline_from_history(url, refs, out_dir)
        print(
            f"wrote {made.path} (from the history: {made.figures} figure(s) of {made.models} model(s); "
            f"review it, then copy it over {refs})"
        )
        return
    hosts = select(c, inventory, host, device, limit)
    # the default database (no gpulab.history_url) lives under results/: made there on a fresh checkout
    done = cmd.validate(
        hosts,
        history_url=url,
        level=level,
        baseline=baseline,
        as_json=json,
        out_dir=out_dir,
        references=refs,
        inventory=setting(c, "inventory", inventory),
        stacks_dir=setting(c, "stacks"),
        dcgm_level=dcgm_level,
        dcgm_levels=setting(c, "validate.dcgm_levels"),
        limits=setting(c, "validate.time_limits"),
        quarantine=setting(c, "validate.quarantine"),
        make_folder=not setting(c, "history_url"),
    )
    if done.history_lines:  # into the history, then failures quarantined (a database that fails: one line)
        print("\n".join(done.history_lines), file=sys.stderr if json else sys.stdout)
    if not done.ok:
        raise Exit(code=1)


@task(
    help={
        "workloads": "workloads to run (default: gpulab.demo.workloads)",
        "seeds": "seeds per workload (default: gpulab.demo.seeds)",
        "name": "sweep name (default: demo-<UTC time>)",
    }
)
@task_errors
def demo(c, workloads=None, seeds=None, name=None):
    """Run a small sweep on this machine (inventory/local.yml), report it and print the report's path."""
    from lab.hosts import inventory as inv
    from lab.sweep import driver as sw

    hosts = inv.load(setting(c, "demo.inventory")).select()
    name = "demo-" + sw.default_name()[len("sweep-") :] if name is None else name
    result = _sweep(c, hosts, workloads=workloads, seeds=seeds, name=name, cfg_prefix="demo.")  # demo.nodes too
    from lab.commands import report as cmd  # after the sweep: a refused demo loads no report modules

    rep_result = cmd.report([result.sweep.root], out=result.sweep.root / "report", formats=("html", "md", "json"))
    html = next((f for f in rep_result.files if str(f).endswith(".html")), rep_result.files[0])
    print(f"report: {Path(html).resolve()}")
    if not result.ok:
        raise Exit(code=1)
    sys.stdout.flush()


# gpulab's defaults sit at Invoke's collection level, the lowest layer after Invoke's own: a user's
# ~/.invoke.yaml, a lab's invoke.yaml, INVOKE_GPULAB_*, `invoke -f FILE` and the options override them.
ns = Collection.from_module(sys.modules[__name__])
ns.configure(_defaults())
for _task in host_tasks.tasks():  # provision, audit, datasets: new Task objects for each load of this file
    ns.add_task(_task)
for _sub in history_tasks.collections():  # `invoke history`, `history.import`, `quarantine`, `quarantine.add|release`
    ns.add_collection(_sub)
