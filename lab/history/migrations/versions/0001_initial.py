"""The first schema: GPUs, validations and their checks, runs and their GPUs, quarantine.

Revision ID: 0001
Revises:
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

When = sa.DateTime(timezone=True)


def upgrade() -> None:
    _create_gpus()
    _create_validations()
    _create_checks()
    _create_runs()
    _create_run_gpus()
    _create_quarantine()


def _create_gpus() -> None:
    op.create_table(
        "gpus",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("uuid", sa.String(96), nullable=False),
        sa.Column("serial", sa.String(64)),
        sa.Column("name", sa.String(128)),
        sa.Column("host", sa.String(255)),
        sa.Column("first_seen", When),
        sa.Column("last_seen", When),
        sa.PrimaryKeyConstraint("id", name="pk_gpus"),
        sa.UniqueConstraint("uuid", name="uq_gpus_uuid"),
    )


def _create_validations() -> None:
    op.create_table(
        "validations",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("key", sa.String(64), nullable=False),
        sa.Column("source", sa.Text(), nullable=False),
        sa.Column("at", When),
        sa.Column("level", sa.String(32)),
        sa.Column("verdict", sa.String(8)),
        sa.Column("imported_at", When, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_validations"),
        sa.UniqueConstraint("key", name="uq_validations_key"),
    )
    op.create_index("ix_validations_at", "validations", ["at"])


def _create_checks() -> None:
    op.create_table(
        "checks",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("validation_id", sa.Integer(), nullable=False),
        sa.Column("host", sa.String(255), nullable=False),
        sa.Column("gpu_id", sa.Integer()),
        sa.Column("gpu_index", sa.Integer()),
        sa.Column("stack", sa.Text()),
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("verdict", sa.String(8), nullable=False),
        sa.Column("value", sa.Float()),
        sa.Column("value_text", sa.Text()),
        sa.Column("unit", sa.String(32)),
        sa.Column("expected", sa.Text()),
        sa.Column("reason", sa.Text()),
        sa.Column("at", When),
        sa.ForeignKeyConstraint(
            ["validation_id"], ["validations.id"], ondelete="CASCADE", name="fk_checks_validation_id_validations"
        ),
        sa.ForeignKeyConstraint(["gpu_id"], ["gpus.id"], name="fk_checks_gpu_id_gpus"),
        sa.PrimaryKeyConstraint("id", name="pk_checks"),
    )
    for col in ("validation_id", "host", "gpu_id", "name", "at"):
        op.create_index(f"ix_checks_{col}", "checks", [col])


def _create_runs() -> None:
    op.create_table(
        "runs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("key", sa.String(64), nullable=False),
        sa.Column("source", sa.Text(), nullable=False),
        sa.Column("sweep", sa.String(255)),
        sa.Column("host", sa.String(255)),
        sa.Column("run_name", sa.String(255), nullable=False),
        sa.Column("benchmark", sa.String(128), nullable=False),
        sa.Column("device", sa.String(128)),
        sa.Column("gpu_count", sa.Integer()),
        sa.Column("gpu_indices", sa.String(255)),
        sa.Column("stack", sa.Text()),
        sa.Column("stack_versions", sa.Text()),
        sa.Column("scale", sa.String(16)),
        sa.Column("mode", sa.String(16)),
        sa.Column("seed", sa.Integer()),
        sa.Column("outcome", sa.String(16), nullable=False),
        sa.Column("reason", sa.Text()),
        sa.Column("samples_per_s", sa.Float()),
        sa.Column("sample_unit", sa.String(32)),
        sa.Column("ttt_s", sa.Float()),
        sa.Column("elapsed_s", sa.Float()),
        sa.Column("energy_j", sa.Float()),
        sa.Column("avg_power_w", sa.Float()),
        sa.Column("at", When),
        sa.Column("imported_at", When, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_runs"),
        sa.UniqueConstraint("key", name="uq_runs_key"),
    )
    for col in ("sweep", "host", "at"):
        op.create_index(f"ix_runs_{col}", "runs", [col])


def _create_run_gpus() -> None:
    op.create_table(
        "run_gpus",
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("gpu_index", sa.Integer(), nullable=False),
        sa.Column("gpu_id", sa.Integer()),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], ondelete="CASCADE", name="fk_run_gpus_run_id_runs"),
        sa.ForeignKeyConstraint(["gpu_id"], ["gpus.id"], name="fk_run_gpus_gpu_id_gpus"),
        sa.PrimaryKeyConstraint("run_id", "gpu_index", name="pk_run_gpus"),
    )
    op.create_index("ix_run_gpus_gpu_id", "run_gpus", ["gpu_id"])


def _create_quarantine() -> None:
    op.create_table(
        "quarantine",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("host", sa.String(255), nullable=False),
        sa.Column("gpu_index", sa.Integer()),
        sa.Column("gpu_id", sa.Integer()),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("action", sa.Text()),
        sa.Column("who", sa.String(128), nullable=False),
        sa.Column("added_at", When, nullable=False),
        sa.Column("released_at", When),
        sa.Column("released_by", sa.String(128)),
        sa.Column("release_note", sa.Text()),
        sa.ForeignKeyConstraint(["gpu_id"], ["gpus.id"], name="fk_quarantine_gpu_id_gpus"),
        sa.PrimaryKeyConstraint("id", name="pk_quarantine"),
        sa.UniqueConstraint("host", "gpu_index", "added_at", name="uq_quarantine_entry"),
    )
    op.create_index("ix_quarantine_host", "quarantine", ["host"])


def downgrade() -> None:
    for table in ("quarantine", "run_gpus", "runs", "checks", "validations", "gpus"):
        op.drop_table(table)
