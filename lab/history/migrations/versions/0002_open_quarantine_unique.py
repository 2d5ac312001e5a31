"""One open quarantine entry per target, by a partial unique index (two writers at once cannot both add one).

An older database may hold two open entries of one target (two `quarantine.add` at once before this
revision): all but the first are released first, by "gpulab migration 0002", with a note saying so.

Revision ID: 0002
Revises: 0001
"""

import datetime as dt

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

OPEN = sa.text("released_at IS NULL")


def upgrade() -> None:
    quarantine = sa.table(
        "quarantine",
        sa.column("id", sa.Integer()),
        sa.column("host", sa.String()),
        sa.column("gpu_index", sa.Integer()),
        sa.column("released_at", sa.DateTime(timezone=True)),
        sa.column("released_by", sa.String()),
        sa.column("release_note", sa.Text()),
    )
    first = (
        sa.select(sa.func.min(quarantine.c.id))
        .where(quarantine.c.released_at.is_(None))
        .group_by(quarantine.c.host, sa.func.coalesce(quarantine.c.gpu_index, -1))
    )
    op.execute(
        quarantine.update()
        .where(quarantine.c.released_at.is_(None), quarantine.c.id.not_in(first.scalar_subquery()))
        .values(
            released_at=dt.datetime.now(dt.timezone.utc),
            released_by="gpulab migration 0002",
            release_note="a second open entry of the same target (the first stays)",
        )
    )
    op.create_index(
        "uq_quarantine_open",
        "quarantine",
        ["host", sa.text("coalesce(gpu_index, -1)")],
        unique=True,
        sqlite_where=OPEN,
        postgresql_where=OPEN,
    )


def downgrade() -> None:
    op.drop_index("uq_quarantine_open", table_name="quarantine")
