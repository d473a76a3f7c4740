"""The zoo: single, realistic bugs the conformance suite must catch.

Each module holds one deliberately broken strategy or store, built from the
shipped one by one small change, and names the check expected to catch it
(``EXPECTED_CHECK``) and what it is (``KIND``: ``"consensus"`` for a strategy
factory taking no arguments, ``"store"`` for a ``(clock, path)`` factory).
``tests/stateful/campaigns/test_zoo.py`` runs each through ``run_conformance`` under the ``ci``
profile. Every module is also a fuzz target: ``runstore fuzz --target
tests.zoo.<module>:factory``.
"""

ZOO = (
    "steal_cutoff_inclusive",
    "evidence_wrong_host",
    "heartbeat_regresses",
    "release_claim_drops_owner",
    "guard_always_passes",
    "activation_ignores_grant",
    "local_not_rolled_back",
    "reconfirm_ignores_claim",
    "missing_skew_check",
    "lineage_cancel_skips_root",
    "ack_repeat_not_written",
    "decode_trusts_corrupt_row",
    "suspend_keeps_claim",
    "settle_forgets_release_fact",
    "settle_drops_new_state",
    "list_skips_a_run",
    "batch_heartbeat_ignores_nonce",
    "batch_heartbeat_skips_rows",
    "purge_ignores_live_round",
    "claim_next_takes_claimed",
    "cursor_decoded_by_hand",
    "self_check_misreads_claims",
    "claim_next_many_takes_one_more",
    "claim_next_many_newest_first_answer",
)

#: The explorer's zoo (issue 25): short-program bugs that today's default
#: ``run_conformance`` lets through and ``explore`` finds as shortest programs,
#: at least two of each kind (``BUG_KIND``: ``fencing``, ``state-lost``,
#: ``read-lag``, ``read-order``). Not in ``ZOO``, whose test expects every entry
#: caught by ``run_conformance``; ``tests/stateful/explore/test_explore_zoo.py``
#: explores them, and ``EXPLORE_ZOO.md`` records both verdicts.
EXPLORE_ZOO = (
    "failed_ignores_guard",
    "completion_with_result_ignores_guard",
    "guarded_suspend_drops_state",
    "guarded_failure_forgets_release",
    "revision_lag_after_request_cancel",
    "revision_lag_after_claim",
    "list_stale_cutoff_inclusive",
    "claim_next_newest_first",
    "claim_next_pending_first",
    "claim_next_many_newest_batch",
)
