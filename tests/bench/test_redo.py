"""bench.redo times the journal's folds and a start that runs it again (a smoke test: folds come
where the journal fills, and a crash's copy runs every statement of a nearly full journal)."""

from bench.redo import folds, replay


def test_folds_come_as_the_journal_fills_and_a_full_journal_is_run_again() -> None:
    plain, folded = folds(16 * 1024, 60)
    assert len(plain) + len(folded) == 60 and 3 <= len(folded) <= 12
    committed, ran, replaying, opening = replay(16 * 1024)
    assert committed >= 4 and ran >= 5 * committed  # five statements or more per notification
    assert replaying > 0 and opening > 0
