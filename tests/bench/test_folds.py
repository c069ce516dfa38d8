"""bench.folds (a smoke test): the folds of a store that fills are timed and their pages
counted by table, the first step the baseline of the ratio."""

from bench.folds import main


def test_the_folds_of_a_filling_store_are_measured_by_table(capsys):
    main(["--notifications", "6000", "--steps", "2"])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:2] == ["stored", "folds"] and len(lines) == 4
    first, second = (line.split() for line in lines[2:])
    assert first[0] == "3,000" and second[0] == "6,000" and first[6] == "1.00x"
    assert "bodies" in lines[3]
