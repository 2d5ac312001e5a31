"""Alembic's environment for the results database: lab.history.db passes the open connection in."""

from alembic import context

from lab.history.models import Base

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=Base.metadata, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
