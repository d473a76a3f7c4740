"""Server instructions per single-run write on PostgreSQL with the row checks
in other forms: would they cost less than migration 2014's plpgsql functions?

The three hot tables (``flows_runs``, ``flows_consensus_leases``,
``flows_ownership_facts``) each have one CHECK that calls a plpgsql function
over the whole row (migrations 2008 and 2014). plpgsql builds the state of
the function's expression again in every transaction, and every store write
is a transaction of its own. This measures, with callgrind (see
``postgres_server_time.py --instructions``), the schema as it is
(``before``) against the same schema with the checks rewritten (``after``)
in one of these forms:

- ``plain``: each function's terms as a plain table CHECK on the columns
  (the JSON columns still tested by the plpgsql ``flows_json_valid``, only
  when not NULL);
- ``sql``: each function as ``LANGUAGE sql IMMUTABLE`` with one expression
  body (``BEGIN ATOMIC``), which the planner inlines into the CHECK;
- ``folded``: the plpgsql functions with the JSON tests moved from the
  prologue into the returned expression;
- ``none``: no row checks at all (what the checks cost at most);
- ``nofk``: no foreign keys (what their RI triggers cost at most).

``none`` and ``nofk`` admit other rows and are ceilings, not candidates.
Figures found (PostgreSQL 15, 64 calls per operation, after/before against
the store at migration 2016): ``plain`` 1.39 to 1.77, ``sql`` 1.78 to 2.51
(both dearer: PostgreSQL reads and plans a table's CHECK expressions again
for every statement that writes the table, so a large expression costs more
there than in a plpgsql function, set up once per transaction); ``folded``
1.00 to 1.01; ``none`` 0.82 to 0.92; ``nofk`` 0.92 to 0.99.

Run: ``python benchmarks/pg_row_check_forms.py FORM [--batch N] [--only op,op]``.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable

import postgres_server_time as timing

from runstore.postgres import _migrations

TABLES = ("flows_runs", "flows_consensus_leases", "flows_ownership_facts")
JSON_COLUMNS = ("cancel_acknowledgement_json", "waiting_request")


def returned() -> dict[str, str]:
    """Each table's returned expression in migration 2014's row-check function
    (the JSON columns' prologue left out), reading ``p_row.column``."""
    text = _migrations._LEANER_ROW_CHECKS
    found = {}
    for table in TABLES:
        body = text[text.index(f"FUNCTION {table}_row_valid") :]
        end = body.index(";\nEND\n$$")
        start = body.rindex("RETURN ", 0, end) + len("RETURN ")
        json = ""
        if table == "flows_runs":
            json = "".join(
                f"\n    AND (p_row.{c} IS NULL OR flows_json_valid(p_row.{c}))"
                for c in JSON_COLUMNS
            )
        found[table] = body[start:end] + json
    return found


def plain() -> str:
    return "".join(
        f"ALTER TABLE {table} DROP CONSTRAINT {table}_valid,\n"
        f"  ADD CONSTRAINT {table}_valid CHECK ({expression.replace('p_row.', '')});\n"
        f"DROP FUNCTION {table}_row_valid({table});\n"
        for table, expression in returned().items()
    )


def sql() -> str:
    return "".join(
        f"CREATE OR REPLACE FUNCTION {table}_row_valid(p_row {table}) RETURNS boolean\n"
        f"LANGUAGE sql IMMUTABLE BEGIN ATOMIC\n  SELECT {expression};\nEND;\n"
        for table, expression in returned().items()
    )


def folded() -> str:
    return "".join(
        f"CREATE OR REPLACE FUNCTION {table}_row_valid(p_row {table}) RETURNS boolean\n"
        f"LANGUAGE plpgsql IMMUTABLE AS $f$\nBEGIN\n  RETURN {expression};\nEND\n$f$;\n"
        for table, expression in returned().items()
    )


def none() -> str:
    return "".join(f"ALTER TABLE {table} DROP CONSTRAINT {table}_valid;\n" for table in TABLES)


def nofk() -> str:
    return """DO $$ DECLARE r record; BEGIN
FOR r IN SELECT c.conrelid::regclass AS t, c.conname FROM pg_constraint AS c
  JOIN pg_namespace AS n ON n.oid = c.connamespace
  WHERE c.contype = 'f' AND n.nspname = current_schema() LOOP
  EXECUTE format('ALTER TABLE %s DROP CONSTRAINT %I', r.t, r.conname);
END LOOP; END $$;
"""


FORMS: dict[str, Callable[[], str]] = {
    "plain": plain,
    "sql": sql,
    "folded": folded,
    "none": none,
    "nofk": nofk,
}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("form", choices=sorted(FORMS))
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--only", default=",".join(timing.OPERATIONS))
    args = parser.parse_args(argv)
    rewrite = FORMS[args.form]()
    # Both sides migrated fully; the after side then gets the form.
    timing.BEFORE[0] = _migrations.MIGRATIONS[-1].id
    base = timing.Side

    class Side(base):  # type: ignore[misc, valid-type]
        def __init__(self, url: str, schema: str, count: int | None) -> None:
            super().__init__(url, schema, count)
            if schema == "after":
                self.conn.execute(rewrite)

    timing.Side = Side  # type: ignore[misc]
    print(f"form {args.form}; callgrind, {args.batch} calls; load {os.getloadavg()[0]:.1f}")
    try:
        timing.instructions(args.only.split(","), args.batch)
    finally:
        timing.Side = base  # type: ignore[misc]


if __name__ == "__main__":
    main()
