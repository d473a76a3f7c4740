"""Which of the grants the store needs its role lacks: how a missing
privilege (SQLSTATE 42501) is named.

PostgreSQL's "permission denied for table ..." names the object only in its
message, which follows ``lc_messages`` and is never passed on. So when a
statement fails with 42501 the store asks the server, through the privilege
functions, which of the grants docs/guides/postgresql.md lists ("Grant what
the store needs") its role lacks, and names those in the error
(``cause["missing_grants"]``, each as the ``GRANT`` would say it: ``UPDATE ON
runstore.flows_run_changes``), never a value of any row.

The store's tables and what a writable store needs on each; a read-only
store needs ``USAGE`` on the schema and ``SELECT`` on the tables. Creating
the schema needs ``CREATE`` on the database; creating or upgrading its
tables needs ``CREATE`` on the schema (and owning what an upgrade alters).
Every function of the schema must be executable by the role (PostgreSQL
grants ``EXECUTE`` to everyone unless it was revoked).

Every name in these statements is qualified (``pg_catalog.``,
``OPERATOR(pg_catalog.=)``): they may run before the store pinned its search
path, and resolve nothing through it.
"""

from __future__ import annotations

from typing import Any, Final

import psycopg

#: Each table and the privileges a writable store needs on it (the guide's list).
TABLE_GRANTS: Final[dict[str, tuple[str, ...]]] = {
    "flows_migrations": ("SELECT",),
    **dict.fromkeys(
        (
            "flows_runs",
            "flows_run_state",
            "flows_ownership_facts",
            "flows_consensus_leases",
            "flows_attempts",
            "flows_run_changes",
            "flows_run_source",
        ),
        ("SELECT", "INSERT", "UPDATE", "DELETE"),
    ),
    "flows_change_log": ("SELECT", "INSERT", "DELETE"),
}

_DATABASE: Final = """
SELECT pg_catalog.quote_ident(pg_catalog.current_database()),
       pg_catalog.has_database_privilege(pg_catalog.current_database(), 'CREATE')
"""
_SCHEMA: Final = """
SELECT n.oid, pg_catalog.quote_ident(n.nspname), pg_catalog.has_schema_privilege(n.oid, 'USAGE'),
       pg_catalog.has_schema_privilege(n.oid, 'CREATE')
FROM pg_catalog.pg_namespace AS n WHERE n.nspname OPERATOR(pg_catalog.=) $1::text
"""
_TABLES: Final = """
SELECT c.relname::text, pg_catalog.quote_ident(c.relname), p.privilege
FROM pg_catalog.pg_class AS c
CROSS JOIN pg_catalog.unnest($3::text[]) AS p(privilege)
WHERE c.relnamespace OPERATOR(pg_catalog.=) $1::oid
  AND c.relname OPERATOR(pg_catalog.=) ANY ($2::text[])
  AND NOT pg_catalog.has_table_privilege(c.oid, p.privilege)
"""
_FUNCTIONS: Final = """
SELECT pg_catalog.quote_ident(p.proname), pg_catalog.pg_get_function_identity_arguments(p.oid)
FROM pg_catalog.pg_proc AS p
WHERE p.pronamespace OPERATOR(pg_catalog.=) $1::oid
  AND NOT pg_catalog.has_function_privilege(p.oid, 'EXECUTE')
"""

_ORDER: Final = ("SELECT", "INSERT", "UPDATE", "DELETE")


def missing_grants(
    connection: psycopg.Connection[Any],
    schema: str | None,
    *,
    read_only: bool,
    creating: bool = False,
) -> list[str] | None:
    """The grants the session's role lacks, as ``GRANT`` would name them, in
    the guide's order; None when the server could not be asked (the
    connection is lost or inside a transaction, or a statement failed).
    ``creating``: the store was about to create the schema or its tables."""
    if connection.closed or connection.broken:
        return None
    if connection.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
        return None
    execute = psycopg.Connection.execute
    try:
        missing: list[str] = []
        database, may_create = execute(connection, _DATABASE).fetchone()  # type: ignore[misc]
        found = None
        if schema is not None:
            found = execute(connection, _SCHEMA, (schema,)).fetchone()
        if found is None:
            if creating and not may_create:
                missing.append(f"CREATE ON DATABASE {database}")
            return missing
        oid, name, usage, create = found
        if not usage:
            missing.append(f"USAGE ON SCHEMA {name}")
        if creating and not create:
            missing.append(f"CREATE ON SCHEMA {name}")
        privileges = ["SELECT"] if read_only else list(_ORDER)
        rows = execute(connection, _TABLES, (oid, list(TABLE_GRANTS), privileges)).fetchall()
        lacking = {(str(table), str(privilege)) for table, _, privilege in rows}
        quoted = {str(table): str(shown) for table, shown, _ in rows}
        for table, needed in TABLE_GRANTS.items():
            wanted = [p for p in needed if p in privileges and (table, p) in lacking]
            if wanted:
                missing.append(f"{', '.join(wanted)} ON {name}.{quoted[table]}")
        for function, arguments in execute(connection, _FUNCTIONS, (oid,)).fetchall():
            missing.append(f"EXECUTE ON FUNCTION {name}.{function}({arguments})")
    except psycopg.Error:
        return None
    return missing


def grants_text(missing: list[str] | None) -> str:
    """The message of an ``insufficient-privilege`` failure."""
    guide = 'docs/guides/postgresql.md, "Grant what the store needs", lists every grant'
    if not missing:
        return f"permission denied: the store's role lacks a privilege it needs ({guide})"
    return f"permission denied: the store's role lacks {'; '.join(missing)} ({guide})"
