"""A tune study in the lab's database beside the history, on SQLite and on a real PostgreSQL server.

Optuna and the history both version their schema with Alembic under the same table name: the study
must live apart (PostgreSQL: schema gpulab_tune of the same database; SQLite: the file beside it), and
both must open again after the other wrote. A search that a controller left (a trial still running,
its owner gone) resumes from the database alone.
"""

from __future__ import annotations

import math

import optuna
from optuna.trial import TrialState
from sqlalchemy import text

from lab.history import db as historydb, migrate
from lab.tune import entry, search
from lab.tune.objective import SeedResult


def fleet(req):
    epochs = 2 + round(4 * abs(math.log10(req.settings["lr"] / 0.03)))
    cap = req.max_epochs or 20
    return [SeedResult(s, f"h{s}", "complete", epochs <= cap, float(min(epochs, cap))) for s in range(1, req.seeds + 1)]


def _req(name="pg1", trials=3):
    return entry.request(
        "ncf",
        scale="tiny",
        name=name,
        device="cpu",
        seeds=2,
        trials=trials,
        tune_settings={"heartbeat_s": 0.05, "stale_s": 600},
        wave=2,
    )


def test_the_study_and_the_history_share_one_database_and_a_left_trial_resumes(db_url, tmp_path):
    history = historydb.open_db(db_url)  # the history's schema first, as in a lab that has one
    history.close()
    storage, _ = entry.storage_for(db_url)
    req = _req(trials=2)
    result = search.tune(req, storage, fleet, tmp_path / "results", echo=lambda *_: None)
    assert len(result.study.get_trials(states=(TrialState.COMPLETE, TrialState.PRUNED))) == 2
    # the history opens again at its own revision: Optuna's alembic_version is elsewhere
    history = historydb.open_db(db_url)
    with history.engine.connect() as conn:
        assert migrate.current(conn) == migrate.head()
        if history.engine.dialect.name == "postgresql":
            names = {
                r[0]
                for r in conn.execute(
                    text("SELECT table_name FROM information_schema.tables WHERE table_schema = 'gpulab_tune'")
                )
            }
            assert {"studies", "trials", "alembic_version"} <= names
    history.close()
    # a controller that died mid-trial: a trial left running, its owner a gone process of this machine
    study = optuna.load_study(study_name=req.name, storage=storage)
    left = study.ask(req.space.distributions())
    left.set_user_attr("gpulab_sweep", f"{req.name}-t{left.number:04d}")
    left.set_user_attr("gpulab_cap", 20)
    left.set_user_attr(search.HEARTBEAT, {"at": 0, "owner": "elsewhere:1"})
    again = search.tune(_req(trials=3), entry.storage_for(db_url)[0], fleet, tmp_path / "results", echo=lambda *_: None)
    t = again.study.trials[left.number]
    assert t.state in (TrialState.COMPLETE, TrialState.PRUNED) and "gpulab_stale" in t.user_attrs
    assert not again.study.get_trials(states=(TrialState.RUNNING,))
