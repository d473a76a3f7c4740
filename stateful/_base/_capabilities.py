"""``Capabilities``: what a store under test can do, as data.

The conformance machines switch rules and comparisons on these flags; every
default describes a full store like ``runstore.open(...)``.
"""

from __future__ import annotations

import attrs


@attrs.frozen
class Capabilities:
    """What the store under test supports. Defaults describe a full store.

    - ``reopen``: the factory, called again with the same path after the store
      was closed without ceremony, opens the same committed data. Switches on
      the store-crash rule. Declare ``False`` for in-memory stores.
    - ``whole_state``: the store has ``state()``. When ``False`` the store is
      compared through its public reads (``get``, ``ownership_facts``,
      ``revision``, ``changes``) and the raw-corruption rule is off.
    - ``lease_introspection``: ``state()`` reports the strategy's leases (and,
      for a strategy under test, ``lease()`` answers). When ``False`` leases
      are left out of every comparison and the lease-agreement invariant is
      not checked.
    - ``fault_injection``: the store offers the SQLite adapter's fault seam
      (``runstore.sqlite`` fault plans); switches on the fault rules. An
      async store of ``runstore.aopen`` offers it through its synchronous
      stand-in (armed on every connection); anyone else's async store does not.
    - ``finding_work``: the store offers ``list_runs``, ``claim_next``,
      ``heartbeat_many``, ``purge_settled`` and ``compact_changes``; switches
      on their rules. Declare ``False`` for a store written before them.
    - ``batch_claiming``: the store offers ``claim_next_many``; switches on
      its rule (with ``finding_work``). Declare ``False`` for a store written
      before it.
    - ``server_clock``: the store is a PostgreSQL store built by the suite's
      own PostgreSQL target (``runstore fuzz --target postgres-sql``), on the
      suite's server, whose clock the suite reads: switches on the server-clock
      machine (``ServerClockCheck``), which opens the store with
      ``check_clock=True`` on a clock anchored to the server's and checks the
      refusal of lease operations past half the skew allowance.
    - ``postgres_server``: the store is built by that target on the suite's
      server (as for ``server_clock``): switches on the session
      machine (``SessionLossCheck``: the server ends the store's idle
      sessions between operations) and the schema machine
      (``SchemaOptionCheck``: ``schema=``, the URL's ``schema`` and
      ``options=-csearch_path=`` on a fresh database of that server).
    """

    reopen: bool = True
    """The factory reopens the same committed data after a crash (default True): the store-crash
    rule runs."""
    whole_state: bool = True
    """The store has ``state()`` (default True): whole states are compared and rows are corrupted
    behind its back."""
    lease_introspection: bool = True
    """Leases are visible (default True): they are compared, and lease/row agreement is checked."""
    fault_injection: bool = False
    """The store has the SQL stores' fault seam (default False): the fault rules run."""
    finding_work: bool = True
    """The store has ``list_runs``, ``claim_next``, ``heartbeat_many``, ``purge_settled`` and
    ``compact_changes`` (default True): their rules run."""
    batch_claiming: bool = True
    """The store has ``claim_next_many`` (default True): its rule runs (with ``finding_work``)."""
    server_clock: bool = False
    """A PostgreSQL store of the suite's own target (default False): the server-clock machine runs.
    """
    postgres_server: bool = False
    """A PostgreSQL store of the suite's own target on its server (default False): the session and
    schema machines run."""


#: The default: a full store like ``runstore.open(...)``.
FULL_STORE = Capabilities()
