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
      (``runstore.sqlite`` fault plans); switches on the fault rules.
    - ``finding_work``: the store offers ``list_runs``, ``claim_next``,
      ``heartbeat_many``, ``purge_settled`` and ``compact_changes``; switches
      on their rules. Declare ``False`` for a store written before them.
    - ``server_clock``: the store is a PostgreSQL store built by
      ``runstore.stateful._targets._postgres.postgres_store_factory``, on the suite's
      server, whose clock the suite reads: switches on the server-clock
      machine (``ServerClockCheck``), which opens the store with
      ``check_clock=True`` on a clock anchored to the server's and checks the
      refusal of lease operations past half the skew allowance.
    - ``postgres_server``: the store is built by ``postgres_store_factory`` on
      the suite's server (as for ``server_clock``): switches on the session
      machine (``SessionLossCheck``: the server ends the store's idle
      sessions between operations) and the schema machine
      (``SchemaOptionCheck``: ``schema=``, the URL's ``schema`` and
      ``options=-csearch_path=`` on a fresh database of that server).
    """

    reopen: bool = True
    whole_state: bool = True
    lease_introspection: bool = True
    fault_injection: bool = False
    finding_work: bool = True
    server_clock: bool = False
    postgres_server: bool = False


#: The default: a full store like ``runstore.open(...)``.
FULL_STORE = Capabilities()
