"""MemSearcher's reward as memrl computes it (MemSearcherWorkflow turns the reply into an env action, SearchEnv with
reward="f1" scores it) against a restatement of the authors' compute_score_with_format (icip-cas/MemSearcher,
verl/utils/reward_score/re_call.py) on the final reply: its last \\boxed{} (brace-matched; the "\\boxed " form
too), F1 max over gold answers with the yes/no/noanswer rule, 0 for a bad format, 0.1 for F1 0.

Replies are assumed to end with the end-of-turn token, which the authors' format check also requires and memrl's
workflow cannot see (a reply cut at the token limit). Written from reading that code; none of it is copied.
"""

import json
import re
import string
from collections import Counter

import pytest

from memrl_envs.encyclopedia import SearchQuestion
from memrl_envs.search import SearchEnv
from memrl.workflows.search import MemSearcherWorkflow


def ref_norm(s):
    s = "".join(c for c in s.lower() if c not in set(string.punctuation))
    return " ".join(re.sub(r"\b(a|an|the)\b", " ", s).split())


def ref_box(text):
    if "\\boxed " in text:
        return text.split("\\boxed ")[-1].split("$")[0]
    i = text.rfind("\\boxed")
    if i < 0:
        return None
    depth = 0
    for j in range(i, len(text)):
        depth += text[j] == "{"
        depth -= text[j] == "}"
        if text[j] == "}" and depth == 0:
            body = text[i:j + 1]
            return body[len("\\boxed{"):-1] if body.startswith("\\boxed{") else None
    return None


def ref_f1(pred, golds):
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


def ref_reward(reply, golds):
    if reply.count("<think>") != reply.count("</think>") or "<think>" not in reply:
        return 0.0
    if reply.count("<tool_call>") != reply.count("</tool_call>"):
        return 0.0
    for call in re.findall(r"<tool_call>(.*?)</tool_call>", reply, re.DOTALL):
        try:
            json.loads(call.strip())
        except ValueError:
            return 0.0
        if '"name"' not in call or '"arguments"' not in call:
            return 0.0
    if "\\box" not in reply:
        return 0.0
    answer = ref_box(reply)
    if answer is None:
        return 0.0
    score = ref_f1(answer, golds)
    return score if score > 0 else 0.1


def memrl_reward(reply, golds):
    env = SearchEnv(num_objectives=1, max_turns=2, reward="f1")
    env.reset(seed=0)
    env.questions = (SearchQuestion("q?", tuple(golds)),)
    _, reward, _, _, _ = env.step(MemSearcherWorkflow._env_action(reply))
    return reward


T = "<think>so</think>\n"
CASES = [
    (T + "The answer is \\boxed{Paris}.", ["Paris"]), (T + "\\boxed{paris}", ["Paris"]),
    (T + "\\boxed{The Eiffel Tower}", ["Eiffel Tower"]), (T + "\\boxed{Tower}", ["Eiffel Tower"]),
    (T + "\\boxed{Rome}", ["Paris"]), (T + "\\boxed{}", ["Paris"]), (T + "no box at all", ["Paris"]),
    (T + "\\boxed{Paris", ["Paris"]), (T + "\\boxed{London} or rather \\boxed{Paris}", ["Paris"]),
    (T + "\\boxed{Paris} or rather \\boxed{London}", ["Paris"]), (T + "\\boxed{Paris} {note}", ["Paris"]),
    (T + "\\boxed{Paris}}", ["Paris"]), (T + "\\boxed{x^{2}}", ["x2"]), (T + "\\boxed{yes}", ["yes"]),
    (T + "\\boxed{yes}", ["no"]), (T + "\\boxed{no way}", ["no"]), (T + "\\boxed{no way}", ["no", "no way"]),
    (T + "\\boxed{Barack Obama}", ["Obama", "Barack H. Obama"]), (T + "\\boxed{Zürich}", ["Zurich"]),
    (T + "\\boxed{Zürich}", ["Zürich"]), (T + "\\boxed{São Paulo, Brazil}", ["São Paulo"]),
    (T + "\\boxed{1,000}", ["1000"]), (T + "\\boxed{  Paris  }", ["Paris"]), (T + "\\boxed{the}", ["the"]),
    (T + "\\boxed{A} \\boxed{B} \\boxed{C}", ["c"]), (T + "\\boxed{A} \\boxed{B} \\boxed{C}", ["a"]),
    (T + "\\boxed{New York New York}", ["New York"]), (T + "\\boxed{U.S.A.}", ["USA"]),
    (T + "<tool_call>{}</tool_call> \\boxed{Paris}", ["Paris"]), (T + "\\boxed{Paris} <tool_call>", ["Paris"]),
    ("<think>so \\boxed{Paris}", ["Paris"]), ("no think \\boxed{Paris}", ["Paris"]),
    (T + "\\boxed{{Paris}}", ["Paris"]), (T + "\\boxed{Paris} and \\boxed{Paris", ["Paris"]),
    (T + "\\boxed{Le Mans}", ["le mans"]), (T + "\\boxed{an apple}", ["apple"]),
    (T + "\\boxed{Mr. Smith}", ["mr smith"]),
    (T + "\\boxed{rock-and-roll}", ["rock and roll"]), (T + "\\boxed{3.14}", ["3.14"]), (T + "\\boxed{東京}", ["東京"]),
]
@pytest.mark.parametrize("i", range(len(CASES)))
def test_memsearcher_reward_matches_the_authors(i):
    reply, golds = CASES[i]
    assert memrl_reward(reply, golds) == pytest.approx(ref_reward(reply, golds))


def test_semicolon_inside_a_single_box_is_one_answer():
    reply = T + "\\boxed{Paris; France}"
    assert memrl_reward(reply, ["Paris"]) == pytest.approx(ref_reward(reply, ["Paris"])) == pytest.approx(2 / 3)
