"""The answer rewards of memrl_envs.search (MEM1 "em_sum", MemSearcher "f1", MemPO "answer_format") against independent
restatements of the authors' scoring, built from their edge cases.

- MEM1 (MIT-MI/MEM1, Mem1/train/verl/utils/reward_score/qa_multiple.py, compute_score_em, the one main_ppo.py
  selects for QA): the last <answer> block, split at ";" and stripped, each answer scored by SQuAD-normalised EM
  against the aliases of the question at its position, summed. The paper (App. B.4.1) adds: a wrong number of
  answers scores 0; the code does not check the count (extra answers add 0, missing ones are not scored). memrl
  implements the paper ("em_sum") and the code's variant as reward="em_sum_authors_code"; both are tested.
- MemSearcher (icip-cas/MemSearcher, verl/utils/reward_score/re_call.py, compute_score_with_format): F1 as the
  max over gold answers, with a gold skipped when the yes/no/noanswer rule applies; 0 for a bad format, 0.1 for a
  good format with F1 0, else F1 (the paper's eq. 9). The format checks of the reply's tags are the workflow's
  (memrl.workflows.search); here the env's side: answers read and scored.
- MemPO: the public code could not be read, so the paper (sec. 4.1) is the spec: 1 if and only if the answer is
  correct and the format proper, else 0.

The restatements are written here from reading that code; none of it is copied.
"""

import re
import string
from collections import Counter

import pytest

from memrl_envs.encyclopedia import SearchQuestion
from memrl_envs.search import SearchEnv


def ref_norm(s):
    s = "".join(c for c in s.lower() if c not in set(string.punctuation))
    return " ".join(re.sub(r"\b(a|an|the)\b", " ", s).split())


def ref_mem1_code(block, golds):
    """MEM1's code: positional EM sum, count not checked."""
    parts = [p.strip() for p in block.split(";")]
    total = 0
    for i, part in enumerate(parts):
        if i < len(golds):
            total += int(any(ref_norm(part) == ref_norm(g) for g in golds[i]))
    return float(total)


def ref_mem1_paper(block, golds):
    parts = [p.strip() for p in block.split(";")]
    return 0.0 if len(parts) != len(golds) else ref_mem1_code(block, golds)


def ref_f1_max(pred, golds):
    best = 0.0
    for g in golds:
        p, q = ref_norm(pred), ref_norm(g)
        if (p in ("yes", "no", "noanswer") or q in ("yes", "no", "noanswer")) and p != q:
            continue
        same = sum((Counter(p.split()) & Counter(q.split())).values())
        if same:
            prec, rec = same / len(p.split()), same / len(q.split())
            best = max(best, 2 * prec * rec / (prec + rec))
    return best


def ref_memsearcher(answer, golds, format_ok=True):
    if not format_ok:
        return 0.0
    score = ref_f1_max(answer, golds)
    return score if score > 0 else 0.1


def ref_mempo(block, golds, format_ok=True):
    parts = [p.strip() for p in block.split(";")]
    if not format_ok or len(parts) != len(golds):
        return 0.0
    return float(all(any(ref_norm(p) == ref_norm(g) for g in gs) for p, gs in zip(parts, golds)))


def run(reward, golds, actions):
    env = SearchEnv(num_objectives=len(golds), max_turns=6, reward=reward)
    env.reset(seed=0)
    env.questions = tuple(SearchQuestion(f"q{i}?", tuple(g)) for i, g in enumerate(golds))
    reward_ = 0.0
    for action in actions:
        _, reward_, terminated, truncated, _ = env.step(action)
        if terminated or truncated:
            break
    return reward_


MULTI = [
    ("Paris; London", [["Paris"], ["London"]]), ("paris;london", [["Paris"], ["London"]]),
    ("London; Paris", [["Paris"], ["London"]]), ("The Paris ;  the London.", [["Paris"], ["London"]]),
    ("Paris; Rome", [["Paris"], ["London"]]), ("Zürich; São Paulo", [["Zürich"], ["Sao Paulo", "São Paulo"]]),
    ("NYC; 1990", [["New York", "NYC"], ["1990"]]), ("yes; no", [["yes"], ["no"]]), ("no; no", [["yes"], ["no"]]),
    ("; London", [["Paris"], ["London"]]), ("Paris;", [["Paris"], ["London"]]), ("a; b; c", [["a"], ["b"], ["c"]]),
    ("A; B; C", [["a"], ["b"], ["c"]]), ("a; x; c", [["a"], ["b"], ["c"]]), ("U.S.A.; U.K.", [["USA"], ["UK"]]),
    ("Obama", [["Barack Obama", "Obama"]]), ("barack obama", [["Barack Obama", "Obama"]]), ("", [["Paris"]]),
    ("The Who", [["Who"]]), ("an apple; the pear", [["apple"], ["pear"]]),
]
WRONG_COUNT = [
    ("Paris", [["Paris"], ["London"]]), ("Paris; London; Rome", [["Paris"], ["London"]]),
    ("Paris London", [["Paris"], ["London"]]), ("a; b", [["a"]]), ("a;b;c;d", [["a"], ["b"], ["c"]]),
    ("x; Paris", [["Paris"]]),
]


@pytest.mark.parametrize("block,golds", MULTI + WRONG_COUNT)
def test_mem1_em_sum_is_the_paper_rule(block, golds):
    assert run("em_sum", golds, [f"<think>t</think><answer>{block}</answer>"]) == ref_mem1_paper(block, golds)


@pytest.mark.parametrize("block,golds", MULTI)
def test_mem1_em_sum_matches_the_code_when_the_count_is_right(block, golds):
    assert run("em_sum", golds, [f"<answer>{block}</answer>"]) == ref_mem1_code(block, golds)


@pytest.mark.parametrize("block,golds", MULTI + WRONG_COUNT)
def test_mem1_code_variant_scores_by_position_whatever_the_count(block, golds):
    got = run("em_sum_authors_code", golds, [f"<answer>{block}</answer>"])
    assert got == ref_mem1_code(block, golds)


def test_mem1_missing_or_doubled_tags_never_score():
    golds = [["Paris"]]
    for bad in ["Paris", "<answer>Paris", "Paris</answer>", "<answer>Paris</answer><answer>Paris</answer>"]:
        assert run("em_sum", golds, [bad]) == 0.0


SINGLE = [
    ("Paris", ["Paris"]), ("paris", ["Paris"]), ("The Eiffel Tower", ["Eiffel Tower"]), ("Tower", ["Eiffel Tower"]),
    ("Eiffel Tower Paris", ["Eiffel Tower"]), ("Rome", ["Paris"]), ("", ["Paris"]), ("yes", ["yes"]),
    ("yes", ["no"]), ("no way", ["no"]), ("no", ["no", "No way"]), ("no way", ["no", "no way"]),
    ("Barack Obama", ["Obama", "Barack H. Obama"]), ("Zürich", ["Zurich"]), ("Zürich", ["Zürich"]),
    ("São Paulo Brazil", ["São Paulo"]), ("the the", ["the"]), ("1,000", ["1000"]), ("3.14", ["3.14"]),
    ("New York New York", ["New York"]),
]


@pytest.mark.parametrize("answer,golds", SINGLE)
def test_memsearcher_f1_reward_good_format(answer, golds):
    got = run("f1", [golds], [f"<answer>{answer}</answer>"])
    assert got == pytest.approx(ref_memsearcher(answer, golds))


@pytest.mark.parametrize("answer,golds", SINGLE[:10])
def test_memsearcher_bad_format_scores_zero(answer, golds):
    # An action the env does not understand spoils the rollout's format: 0 whatever the answer.
    got = run("f1", [golds], ["<search></search>", f"<answer>{answer}</answer>"])
    assert got == ref_memsearcher(answer, golds, format_ok=False) == 0.0


def test_memsearcher_unanswered_scores_zero():
    assert run("f1", [["Paris"]], ["nothing"] * 6) == 0.0


@pytest.mark.parametrize("block,golds", MULTI + WRONG_COUNT)
def test_mempo_answer_format_reward(block, golds):
    assert run("answer_format", golds, [f"<answer>{block}</answer>"]) == ref_mempo(block, golds)


@pytest.mark.parametrize("block,golds", MULTI[:8])
def test_mempo_bad_format_scores_zero(block, golds):
    assert run("answer_format", golds, ["<answer>x", f"<answer>{block}</answer>"]) == 0.0
