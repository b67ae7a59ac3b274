"""The baseline's lookup probe: guessing levels and reply positions by hand, and the command on the shipped baseline."""

import json

import pytest
from transformers import AutoTokenizer

from memrl_tuned_examples.analyses import full_context_lookups
from memrl_tuned_examples.analyses.full_context_lookups import guessing, lookup_positions
from memrl_tuned_examples.tasks.memagent import BASELINE

CONTEXT = ("Document 7: Kema was born in Selby.\nDocument 8: Nirel works for Memia.\nDocument 9: Memia was born in "
           "Rolby.\nDocument 10: Pasis was born in Tanby.")


def test_guessing_counts_born_sentences_and_those_after_the_employer():
    assert guessing(CONTEXT, "Nirel") == (pytest.approx(1 / 3), pytest.approx(1 / 2))
    with pytest.raises(ValueError, match="after Pasis's employer"):
        guessing("Document 1: Kema was born in Selby.\nDocument 2: Pasis works for Kema.", "Pasis")


def test_lookup_positions_point_at_the_employer_and_the_city():
    tokenizer = AutoTokenizer.from_pretrained(BASELINE)
    reply = tokenizer.encode("Evidence: Nirel works for Memia. Memia was born in Rolby. \\boxed{Rolby}")
    positions = lookup_positions(tokenizer, reply)
    assert tokenizer.decode(reply[positions["employer"]]).strip() == "Memia"
    assert tokenizer.decode(reply[positions["city"]]).strip() == "Rolby"
    with pytest.raises(ValueError, match="city"):
        lookup_positions(tokenizer, tokenizer.encode("Evidence: Nirel works for Memia. \\boxed{Memia}"))


def test_probe_of_the_shipped_baseline(tmp_path, capsys):
    rows = full_context_lookups.main(["--lengths", "2", "10", "--num-tasks", "20", "--out", str(tmp_path)])
    assert [r["num_docs"] for r in rows] == [2, 10]
    # Two documents hold one fact of each kind: the shipped baseline finds both, as guessing would.
    assert rows[0]["employer"] >= 0.9 and rows[0]["city"] >= 0.9 and rows[0]["guess_any_born"] == 1.0
    for r in rows:
        assert r["city_interval"][0] <= r["city"] <= r["city_interval"][1]
        assert 0 < r["guess_any_born"] <= r["guess_born_after_employer"] <= 1
    assert json.loads((tmp_path / "lookups.json").read_text()) == rows
    assert "| 10 |" in (tmp_path / "lookups.md").read_text() and "| 10 |" in capsys.readouterr().out


def test_bad_arguments_are_named(tmp_path, capsys):
    with pytest.raises(SystemExit):
        full_context_lookups.main(["--checkpoint", str(tmp_path), "--out", str(tmp_path)])
    assert "is not a Hugging Face checkpoint directory" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        full_context_lookups.main(["--lengths", "1", "--out", str(tmp_path)])
    assert "--lengths must be from 2" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        full_context_lookups.main(["--lengths", "11", "--out", str(tmp_path)])
    assert "to 10 (what the baseline's window holds whole)" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        full_context_lookups.main(["--num-tasks", "0", "--out", str(tmp_path)])
    assert "--num-tasks must be at least 1" in capsys.readouterr().err
