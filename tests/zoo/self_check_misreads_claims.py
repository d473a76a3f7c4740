"""A store whose own check_invariants() replays the fact log but compares the
rebuilt claim with the row's claim alone, without its claim time, so every
claimed run looks broken: the store is sound, its self-check cries wolf (an
operator would be told a healthy database is corrupt)."""

from runstore.sqlite import SqliteRunStore

from ._stores import IN_MEMORY, open_as

KIND = "store"
EXPECTED_CHECK = "StoreInvariantsFailed"
capabilities = IN_MEMORY


class MisreadsClaims(SqliteRunStore):
    def check_invariants(self):
        super().check_invariants()
        for row in self.state().rows:
            # The bug: the rebuilt claim is (claimant, time); the row's claim
            # is compared as the claimant alone.
            rebuilt = None if row.claim is None else (row.claim, row.claimed_at_ms)
            if rebuilt is not None and rebuilt != row.claim:
                raise AssertionError(f"replaying the facts rebuilds the claim: {row.run_id!r}")


def factory(clock, path):
    return open_as(MisreadsClaims, clock)
