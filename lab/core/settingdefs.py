"""Every ``gpulab:`` setting, declared once: its key, what it takes, its default, range, unit and one line of doc.

``DECLARED`` below is the one place a setting lives; lab.core.settings makes
everything else from it (the defaults, the schema, the range checks, the
accessors and the README's settings table) and is what readers import. A new
setting is one line here, then the README table regenerated
(``python -m lab.core.settings``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lab.core import fields, limits
from lab.core.limits import Range

INHERIT = object()  # a default that is the top-level key's value (gpulab.demo.*: "keys not set come from above")
KINDS = ("path", "text", "list", "count", "number", "flag", "choice")
SLURM_WORD = r"[A-Za-z0-9_.,:|&*\[\]!-]*"


@dataclass(frozen=True)
class Setting:
    key: str  # dotted, below gpulab: ("sweep.poll_s")
    kind: str  # one of KINDS
    default: Any  # INHERIT: none of its own (the top-level key of the same name gives it)
    doc: str  # one line: what it does
    range: Range | None = None  # number, count: its range and unit (a count: of each number)
    words: tuple = ()  # number, count, list: the words it takes too, alone (auto); choice: its choices
    null: bool = False  # number: null is a value (its reader's own default)
    pattern: str | None = None  # text: what it must match, in full; list: what each name must match
    many: bool = False  # count: a comma list of numbers (1,2,3)
    items: tuple = ()  # list: the only names it takes
    max_len: int = 2000  # text: at most this many characters

    @property
    def unit(self) -> str:
        return self.range.unit if self.range else ""


def _n(key, default, rng, doc, **kw):
    return Setting(key, "number", default, doc, range=rng, **kw)


def _s(lo, hi, unit="s", integer=False):
    return Range(lo, hi, unit, integer=integer)


DAY, WEEK = 86_400, 7 * 86_400
DCGM_LEVEL = Range(0, 4, "DCGM level")
STEP_S = _s(1, WEEK)  # a hard time limit of one of validate's steps
DB_WAIT = _s(0.1, DAY)
# what the sweep's options take (lab.sweep.plan reads them; whether a workload is registered is its check)
WORKLOADS = dict(words=("all",), pattern=fields.WORKLOAD_RE.pattern)
SEEDS = dict(range=limits.SEEDS, words=("auto", "mlperf"))
GPUS = dict(range=limits.GPUS, words=("all",), many=True)

# The declarations are a table, each setting on a line or two as written here: `ruff format` leaves the table
# alone (its one argument a line would make a setting up to six lines and the table twice as long: 88 -> 172).
# fmt: off
DECLARED: tuple[Setting, ...] = (
    Setting("inventory", "path", "inventory/local.yml",
            "any Ansible inventory (INI, YAML, plugin); the default is this machine, inventory/hosts.yml the example lab"),
    Setting("results", "path", "results", "sweeps land in results/<sweep>/, validate in results/validate/"),
    Setting("history_url", "text", "",
            "the history database, an SQLAlchemy URL (postgresql+psycopg://gpulab@dbhost/gpulab); empty: "
            "results/history.sqlite"),
    _n("history_lock_timeout_s", 30, DB_WAIT, "PostgreSQL: a history command waits this long for a lock another "
       "session holds, then says so in one line"),
    _n("history_statement_timeout_s", 600, DB_WAIT, "PostgreSQL: one statement of a history command runs at most "
       "this long"),
    Setting("artifacts", "path", "artifacts", "ansible-runner artifacts, one dated folder per run"),
    Setting("stacks", "path", "inventory/stacks", "stack profiles (<name>.yml, lab/schemas/stack.schema.json)"),
    Setting("workloads", "list", "all", "workloads, a comma list (python -m runner list), or all: the study's six "
            "(lab/data/study.yml)", **WORKLOADS),
    Setting("seeds", "count", "auto", "seeds per configuration: a number; mlperf: the benchmark's MLPerf run count; "
            "auto: that count in ttt mode, one in throughput mode", **SEEDS),
    Setting("gpus", "count", "all", "GPU counts per run: 1,2,3 or all (1 to the host's GPUs; CPU hosts: 0)",
            **GPUS),
    _n("nodes", 1, limits.NODES, "hosts per run (multi-node: one rendezvous)"),
    Setting("mode", "choice", "ttt", "ttt (time to train) or throughput", words=("ttt", "throughput")),
    Setting("scale", "choice", "full", "full: the MLPerf recipe on prepared data; small, tiny: test scales",
            words=("tiny", "small", "full")),
    _n("run_timeout_minutes", "auto", limits.RUN_TIMEOUT_MINUTES, "a run still going after this is stopped and "
       "failed; auto: 3x its estimate (lab/data/study.yml)", words=("auto",)),
    _n("sweep.min_free_mb", 1024, Range(0, 10**8, "MB"), "free space needed in a host's workdir before each run"),
    _n("sweep.kill_margin_s", 60, _s(0, DAY), "past the run's limit by this, the controller stops it itself"),
    _n("sweep.stop_grace_s", 30, _s(0, 3_600), "SIGTERM to the runner, then after this SIGKILL to all its processes"),
    _n("sweep.poll_s", 0.25, _s(0.01, 60), "between two polls of a running run (one SSH exec each)"),
    _n("sweep.reconnect_s", 30, _s(0, 3_600), "a host that drops is retried this long before its runs fail"),
    _n("sweep.lock_stale_s", 300, _s(1, WEEK), "a host lock without heartbeat this long (and no run left) is taken "
       "over"),
    _n("sweep.lock_wait_s", 3600, _s(0, WEEK), "how long a run waits for a host another sweep holds"),
    _n("sweep.rdzv_port", 29400, Range(1, 65_535, "port"), "multi-node rendezvous port on node 0"),
    _n("sweep.fetch_retries", 2, Range(0, 10, "fetches"), "a run's copy that fails its SHA256SUMS is fetched again "
       "this often (sweep and invoke collect)"),
    _n("sweep.pilot_wait_s", 900, _s(0, WEEK), "compile once, then fan out: other hosts wait this long at most for "
       "the pilot's artifacts; 0: every host compiles itself"),
    _n("sweep.compile_cpu", 0, Range(0, 1), "1: CPU runs use torch.compile too (a C++ compiler and Python's headers "
       "on the host) and have pilots"),
    _n("sweep.cpu_without_gpus", 0, Range(0, 1), "1: a host the inventory gives GPUs whose probe finds none runs on "
       "the CPU in their place (a rehearsal on hosts without their GPUs); 0: it is a failed host, nothing runs there"),
    _n("sweep.health_valid_hours", 24, _s(0, 8_760, "h"), "a host's health check that passed this recently is not "
       "run again (0: every sweep checks)"),
    Setting("sweep.backend", "choice", "ssh", "how runs start: ssh (gpulab's controller), slurm (job arrays "
            "through sbatch here), auto (slurm where sinfo answers)", words=limits.BACKENDS),
    Setting("slurm.partition", "text", "", "--partition (empty: Slurm's default)", pattern=SLURM_WORD, max_len=200),
    Setting("slurm.account", "text", "", "--account", pattern=SLURM_WORD, max_len=200),
    Setting("slurm.qos", "text", "", "--qos", pattern=SLURM_WORD, max_len=200),
    Setting("slurm.constraint", "text", "", "--constraint (node features)", pattern=SLURM_WORD, max_len=500),
    _n("slurm.time_limit_minutes", "auto", limits.RUN_TIMEOUT_MINUTES, "--time; auto: the array's longest run "
       "limit plus gpulab.sweep.kill_margin_s", words=("auto",)),
    _n("slurm.max_running", 1, Range(1, 10_000, "tasks"), "tasks of one unit's array running at once "
       "(--array=0-N%K)"),
    _n("slurm.poll_s", 2, _s(0.1, 600), "between two looks at the queue (scontrol show job)"),
    _n("tune.seeds", 5, Range(1, 1000, "seeds"), "K: seeds per trial, the same for every trial and the reference"),
    _n("tune.trials", 20, Range(1, 10_000, "trials"), "trials with a result (complete or pruned) the search runs to"),
    _n("tune.p_threshold", 0.1, Range(0.001, 0.5, "", integer=False), "Wilcoxon pruner over seeds: a trial this "
       "sure to be worse is stopped"),
    _n("tune.retries", 1, Range(0, 10, "retries"), "a trial whose hosts fail runs again this often, then is failed"),
    _n("tune.heartbeat_s", 30, _s(0.1, 3_600), "a running trial's heartbeat in the database"),
    _n("tune.stale_s", 600, _s(1, WEEK), "a running trial whose heartbeat is this old is taken over and resumed"),
    Setting("report_formats", "list", "html,md,json,csv", "what invoke report writes (comma list)",
            items=("html", "md", "json", "csv")),   # lab.report.build.FORMATS
    Setting("references", "path", "inventory/references/gpus.yml", "GPU references of invoke validate"),
    _n("validate.dcgm_levels.quick", 1, DCGM_LEVEL, "dcgmi diag -r N of validate --level quick (0: none)"),
    _n("validate.dcgm_levels.standard", 2, DCGM_LEVEL, "dcgmi diag -r N of --level standard (0: none)"),
    _n("validate.dcgm_levels.burn-in", 3, DCGM_LEVEL, "dcgmi diag -r N of --level burn-in (0: none)"),
    _n("validate.time_limits.burnin_s.quick", 300, STEP_S, "runner burnin on a host, --level quick"),
    _n("validate.time_limits.burnin_s.standard", 3600, STEP_S, "runner burnin on a host, --level standard"),
    _n("validate.time_limits.burnin_s.burn-in", 21600, STEP_S, "runner burnin on a host, --level burn-in"),
    _n("validate.time_limits.dcgm_s.1", 600, STEP_S, "dcgmi diag -r 1"),
    _n("validate.time_limits.dcgm_s.2", 1800, STEP_S, "dcgmi diag -r 2"),
    _n("validate.time_limits.dcgm_s.3", 10800, STEP_S, "dcgmi diag -r 3"),
    _n("validate.time_limits.dcgm_s.4", 28800, STEP_S, "dcgmi diag -r 4"),
    _n("validate.time_limits.tools_s", 600, STEP_S, "each standard tool (nccl-tests, nvbandwidth) in the burn-in"),
    _n("validate.time_limits.burn_minutes", None, Range(0.1, 60, "minutes", integer=False), "--level burn-in's "
       "sustained load (runner burnin --minutes); null: 10", null=True),
    Setting("validate.quarantine", "flag", True, "a host or GPU whose verdict FAILs is quarantined (a later "
            "passing validate releases it)"),
    Setting("datasets_catalogue", "path", "inventory/datasets.yml", "artifacts, sums and sources of invoke "
            "datasets"),
    Setting("demo.inventory", "path", "inventory/local.yml", "invoke demo's hosts: this machine"),
    Setting("demo.workloads", "list", "ncf", "invoke demo's workloads", **WORKLOADS),
    Setting("demo.seeds", "count", "2", "invoke demo's seeds per configuration", **SEEDS),
    Setting("demo.gpus", "count", "all", "invoke demo's GPU counts", **GPUS),
    _n("demo.nodes", INHERIT, limits.NODES, "invoke demo's hosts per run"),
    Setting("demo.mode", "choice", "ttt", "invoke demo's mode", words=("ttt", "throughput")),
    Setting("demo.scale", "choice", "tiny", "invoke demo's scale", words=("tiny", "small", "full")),
)
# fmt: on
