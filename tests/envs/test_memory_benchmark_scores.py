"""The benchmarks' scorers against restatements of their repositories' logic, written here another way, on hand-made
cases (at least 30 per metric), plus figures worked out by hand."""

import math
import re
from collections import Counter

import pytest
from nltk.stem import PorterStemmer

from memrl_envs.memory_benchmark_scores import (
    LONGMEMEVAL_TYPES,
    Scored,
    locomo_metrics,
    locomo_score,
    longmemeval_judge_prompt,
    longmemeval_label,
    longmemeval_metrics,
    mab_score,
    movie_name,
    recsys_recalls,
    reported_metric,
)

# -- restatements -----------------------------------------------------------------------------------------------------
STEM = PorterStemmer().stem


def words(text: str, dropped: set[str], drop_commas: bool = False) -> list[str]:
    """Lower-case words without punctuation and without the `dropped` words."""
    if drop_commas:
        text = text.replace(",", "")
    kept = re.sub(r"[!-/:-@\[-`{-~]", "", text.lower())
    return [w for w in kept.split() if w not in dropped]


def token_f1(pred: list[str], gold: list[str]) -> float:
    overlap = Counter(pred) & Counter(gold)
    hits = sum(overlap.values())
    return 0.0 if hits == 0 else 2 * hits / (len(pred) + len(gold))


def locomo_reference(prediction: str, gold: str, category: int) -> float:
    def f1(p, g):
        stemmed = [[STEM(w) for w in words(t, {"a", "an", "the", "and"}, drop_commas=True)] for t in (p, g)]
        return token_f1(*stemmed)

    if category == 5:
        return float(any(s in prediction.lower() for s in ("not mentioned", "no information available")))
    if category == 1:
        preds = [p.strip() for p in prediction.split(",")]
        golds = [g.strip() for g in gold.split(",")]
        return sum(max(f1(p, g) for p in preds) for g in golds) / len(golds)
    if category == 3:
        gold = gold.split(";", 1)[0].strip()
    return f1(prediction, gold)


def squad(text: str) -> str:
    return " ".join(words(text, {"a", "an", "the"}))


def mab_reference(prediction: str, golds: list[str]) -> dict[str, float]:
    """EM, F1 (zero when either side is yes/no/noanswer and they differ) and SubEM, best over golds, best of the reply
    and of its answer line."""
    def one(pred):
        out = {"exact_match": 0.0, "f1": 0.0, "substring_exact_match": 0.0}
        for gold in golds:
            p, g = squad(pred), squad(gold)
            out["exact_match"] = max(out["exact_match"], float(p == g))
            out["substring_exact_match"] = max(out["substring_exact_match"], float(g in p))
            closed = {"yes", "no", "noanswer"}
            f = 0.0 if (p in closed or g in closed) and p != g else token_f1(p.split(), g.split())
            out["f1"] = max(out["f1"], f)
        return out

    def line(text):
        found = re.search(r"answer:(.*)", text, re.I)
        picked = found.group(1) if found else text.split("\n", 1)[0]
        picked = picked.strip()
        return picked[len("answer:"):].strip() if picked.lower().startswith("answer:") else picked

    whole, parsed = one(prediction), one(line(prediction))
    return {k: max(whole[k], parsed[k]) for k in whole}


# -- LongMemEval ------------------------------------------------------------------------------------------------------
def test_longmemeval_picks_the_prompt_by_type_and_the_abstention_prompt_for_abs_questions():
    for qtype in LONGMEMEVAL_TYPES:
        prompt = longmemeval_judge_prompt(qtype, "When?", "May 3", "On May 3rd.")
        assert prompt.endswith("\n\nModel Response: On May 3rd.\n\nIs the model response correct? Answer yes or no "
                               "only.")
        assert ("Rubric: May 3" in prompt) == (qtype == "single-session-preference")
        assert ("off-by-one" in prompt) == (qtype == "temporal-reasoning")
        assert ("updated answer" in prompt) == (qtype == "knowledge-update")
        abstained = longmemeval_judge_prompt(qtype, "When?", "Never said.", "I don't know.", abstention=True)
        assert abstained.startswith("I will give you an unanswerable question, an explanation")
        assert ("Explanation: Never said.\n\nModel Response: I don't know.\n\nDoes the model correctly identify"
                in abstained)
    with pytest.raises(ValueError, match="no judge prompt for question type 'multi_session'; allowed: single-session"):
        longmemeval_judge_prompt("multi_session", "q", "a", "r")


LABELS = [("yes", True), ("Yes.", True), ("YES", True), (" yes\n", True), ("no", False), ("No.", False), ("", False),
          ("Yes, it is correct.", True), ("no, yes", True), ("The answer is yes", True), ("eyes", True),
          ("yesterday", True), ("Y e s", False), ("nope", False), ("correct", False), ("True", False),
          ("I think not", False), ("yES", True), ("'yes'", True), ("**Yes**", True), ("No. Yes.", True),
          ("Answer: no", False), ("Answer: Yes", True), ("y", False), ("ye", False), ("noyes", True), ("\tyes\t", True),
          ("NO", False), ("n/a", False), ("maybe", False), ("yes?", True), ("certainly", False)]


@pytest.mark.parametrize("reply, label", LABELS)
def test_longmemeval_label_is_yes_anywhere_in_the_lowered_reply(reply, label):
    assert longmemeval_label(reply) is label is ("yes" in reply.lower())


def test_longmemeval_metrics_average_types_unweighted_and_report_abstention_apart():
    scored = [Scored("a", "multi-session", 1.0), Scored("b", "multi-session", 0.0), Scored("c", "multi-session", 1.0),
              Scored("d", "temporal-reasoning", 1.0), Scored("e_abs", "temporal-reasoning", 0.0, abstention=True)]
    metrics = longmemeval_metrics(scored)
    assert metrics["per_category"]["multi-session"]["mean"] == pytest.approx(2 / 3)
    assert metrics["task_averaged"] == pytest.approx((2 / 3 + 1 / 2) / 2)
    assert metrics["overall"]["mean"] == pytest.approx(3 / 5) and metrics["overall"]["n"] == 5
    assert metrics["abstention"]["mean"] == 0.0 and metrics["abstention"]["n"] == 1
    assert metrics["overall"]["ci_low"] < 0.6 < metrics["overall"]["ci_high"]
    with pytest.raises(ValueError, match=r"unknown LongMemEval question types \['temporal'\]"):
        longmemeval_metrics([Scored("x", "temporal", 1.0)])


# -- LoCoMo -----------------------------------------------------------------------------------------------------------
LOCOMO = [  # (prediction, gold, category)
    ("7 May 2023", "7 May 2023", 2), ("May 7, 2023", "7 May 2023", 2), ("in May", "7 May 2023", 2),
    ("The week before 9 June 2023", "The week before 9 June 2023", 2), ("2022", "2022", 2), ("last year", "2022", 2),
    ("She went running", "running", 4), ("runs", "running", 4), ("ran", "running", 4),
    ("the cat and the dog", "cat", 4),
    ("Painting, pottery", "painting", 4), ("", "painting", 4), ("The", "the", 4),
    ("Paris!", "paris", 4),
    ("studies studied", "study", 4), ("happily", "happy", 4), ("adoption agencies", "Adoption agencies", 4),
    ("Likely yes; she enjoys it", "Likely yes; she enjoys the outdoors", 3), ("Likely yes", "Likely yes; because", 3),
    ("no", "Likely no; she does not", 3), ("Liberal", "Liberal", 3), ("conservative", "liberal; not sure", 3),
    ("pottery, camping, painting", "pottery, painting", 1), ("pottery", "pottery, painting", 1),
    ("camping", "pottery, painting", 1), ("Sweden, Paris", "Paris, Sweden, Tokyo", 1), ("a, b", "a, b", 1),
    ("hiking and swimming", "hiking, swimming", 1), ("swims", "swimming, hiking", 1), (",", "x, y", 1),
    ("Not mentioned in the conversation", "cat", 5), ("No information available", "dog", 5), ("a dog", "dog", 5),
    ("It is not mentioned.", "x", 5), ("NOT MENTIONED", "x", 5), ("There is no information", "x", 5),
    ("(a) Not mentioned in the conversation", "x", 5), ("no information available here", "x", 5), ("", "x", 5),
    ("the answer is 42", "42", 2), ("42", "42.0", 2), ("Caroline's friend", "Caroline", 4),
]


@pytest.mark.parametrize("prediction, gold, category", LOCOMO)
def test_locomo_scores_as_its_evaluation_does(prediction, gold, category):
    assert locomo_score(prediction, gold, category) == pytest.approx(locomo_reference(prediction, gold, category),
                                                                     abs=1e-12)


def test_locomo_figures_worked_by_hand():
    assert locomo_score("runs", "running", 4) == 1.0  # both stem to "run"
    assert locomo_score("May 7, 2023", "7 May 2023", 2) == 1.0  # commas dropped, order free
    assert locomo_score("in May", "7 May 2023", 2) == pytest.approx(2 * (1 / 2) * (1 / 3) / (1 / 2 + 1 / 3))
    assert locomo_score("pottery", "pottery, painting", 1) == 0.5
    assert locomo_score("Likely yes", "Likely yes; because", 3) == 1.0  # only the text before ";" is the gold
    assert locomo_score("the and", "and", 4) == 0.0  # both normalise to nothing: no common token
    with pytest.raises(ValueError, match="category must be one of \\[1, 2, 3, 4, 5\\], got 6"):
        locomo_score("x", "x", 6)
    metrics = locomo_metrics([Scored("a", 1, 0.5), Scored("b", 5, 1.0), Scored("c", 5, 0.0)])
    assert metrics["per_category"] == {"multi-hop": pytest.approx({"mean": 0.5, "ci_low": 0.5, "ci_high": 0.5, "n": 1}),
                                       "adversarial": metrics["per_category"]["adversarial"]}
    assert metrics["per_category"]["adversarial"]["mean"] == 0.5 and metrics["overall"]["mean"] == 0.5


# -- MemoryAgentBench -------------------------------------------------------------------------------------------------
MAB = [  # (prediction, golds)
    ("Paris", ["Paris"]), ("paris.", ["Paris"]), ("The capital is Paris", ["Paris"]), ("Answer: Paris", ["Paris"]),
    ("answer: the Paris\nmore text", ["Paris"]), ("Lyon", ["Paris", "Lyon"]), ("London", ["Paris"]), ("", ["Paris"]),
    ("yes", ["yes"]), ("yes", ["no"]), ("no way", ["no"]), ("noanswer", ["noanswer"]),
    ("Yes, it is.", ["yes"]),
    ("label: 43", ["43"]), ("43", ["43"]), ("Answer: 43", ["43"]), ("43\nlabel 12", ["12"]),
    ("The Beatles", ["Beatles"]),
    ("beatles the", ["The Beatles"]), ("a an the", ["the"]), ("first line\nAnswer: second", ["second"]),
    ("Answer:Answer: twice", ["twice"]), ("ANSWER: Upper", ["upper"]), ("John Smith went home", ["John Smith"]),
    ("Smith John", ["John Smith"]), ("New York City", ["New York", "NYC"]), ("nyc", ["New York", "NYC"]),
    ("It was 1999.", ["1999"]), ("1,999", ["1999"]), ("e-mail", ["email"]), ("the answer is: cat", ["cat"]),
    ("cat cat cat", ["cat"]), ("dog", ["cat dog"]), ("\nAnswer: after blank", ["after blank"]),
    ("Answer: x\nAnswer: y", ["y"]), ("x", ["x", "y", "z"]),
]


@pytest.mark.parametrize("prediction, golds", MAB)
@pytest.mark.parametrize("source", ["ruler_qa1_197K", "factconsolidation_mh_6k", "detective_qa"])
def test_memoryagentbench_default_metrics_as_its_post_process_gives_them(prediction, golds, source):
    got = mab_score(prediction, golds, source)
    want = mab_reference(prediction, golds)
    for metric, value in want.items():
        assert got[metric] == pytest.approx(value, abs=1e-12), metric
    assert set(got) == {"exact_match", "f1", "substring_exact_match", "rougeL_f1", "rougeL_recall", "rougeLsum_f1",
                        "rougeLsum_recall"}


@pytest.mark.parametrize("prediction, golds", MAB)
def test_memoryagentbench_icl_and_eventqa_read_only_the_answer_line(prediction, golds):
    line = mab_reference(mab_line(prediction), golds)
    got = mab_score(prediction, golds, "icl_banking77_5900shot_balance")
    assert {k: got[k] for k in line} == pytest.approx(line)
    event = mab_score(prediction, golds, "eventqa_full")
    assert {k: event[k] for k in line} == pytest.approx(line)
    assert event["eventqa_recall"] == float(all(g.lower() in prediction.lower() for g in golds))
    niah = mab_score(prediction, golds, "ruler_niah_mk_2")
    assert niah == {"ruler_recall": pytest.approx(sum(g.lower() in prediction.lower() for g in golds) / len(golds))}


def mab_line(text: str) -> str:
    found = re.search(r"answer:(.*)", text, re.I)
    picked = (found.group(1) if found else text.split("\n", 1)[0]).strip()
    return picked[len("answer:"):].strip() if picked.lower().startswith("answer:") else picked


def test_memoryagentbench_rouge_l_worked_by_hand():
    # rouge-score lower-cases, keeps alphanumeric tokens and Porter-stems those longer than 3 characters.
    got = mab_score("the cats were running home", ["a cat runs"], "detective_qa")
    # Tokens: [the, cat, were, run, home] against [a, cat, run]: LCS 2 (cat, run), P = 2/5, R = 2/3.
    assert got["rougeL_recall"] == pytest.approx(2 / 3)
    assert got["rougeL_f1"] == pytest.approx(2 * (2 / 5) * (2 / 3) / (2 / 5 + 2 / 3))


def test_memoryagentbench_choice_questions_count_the_option_text_as_a_match():
    golds = ["B", "the red door"]
    got = mab_score("I pick the red door.", golds, "infbench_choice_eng")
    assert got["substring_exact_match"] == 1.0 and got["exact_match"] == 1.0
    assert mab_score("the blue door", golds, "infbench_choice_eng")["exact_match"] == 0.0


def test_memoryagentbench_reported_metric_per_sub_dataset_and_what_needs_more():
    assert [reported_metric(s) for s in ("eventqa_full", "ruler_qa2_421K", "factconsolidation_sh_262k", "detective_qa",
                                         "icl_trec_fine_6400shot_balance", "recsys_redial_full", "longmemeval_s*",
                                         "infbench_sum_eng_shots2")] == [
        "substring_exact_match", "substring_exact_match", "substring_exact_match", "exact_match", "exact_match",
        "recsys_recall@5", "judge", "judge"]
    with pytest.raises(ValueError, match="reports no metric for source 'booksum'"):
        reported_metric("booksum")
    with pytest.raises(ValueError, match="reported by the LongMemEval judge: pass judge="):
        mab_score("x", ["y"], "longmemeval_s*")
    assert mab_score("x", ["x"], "longmemeval_s*", judge=lambda reply: 0.0)["judge"] == 0.0
    assert "judge" not in mab_score("x", ["x"], "infbench_sum_eng_shots2")  # HELMET's judge is not run here
    with pytest.raises(ValueError, match="pass entity_ids="):
        mab_score("1. Up", ["3"], "recsys_redial_full")


CATALOGUE = {"/movies/Up_(2009)": 1, "The_Matrix_(1999)": 2, "Toy-Story": 3, "Heat": 4, "Alien": 5, "Aliens": 6}
RECSYS = [  # (reply, gold ids)
    ("Here you go: 1. Up 2. The Matrix", ["1"]), ("1. The Matrix\n2. Up", ["1"]), ("1. Toy Story", ["3"]),
    ("Heat, Alien, Aliens", ["6"]), ("no list here", ["4"]),
    ("1. Alien\n2. Aliens\n3. Heat\n4. Up\n5. Toy Story", ["3"]),
    ("1. Alien\n2. Aliens\n3. Heat\n4. Up\n5. Toy Story\n6. The Matrix", ["2", "5"]),
    ("1. Matrix (1999)\n2. Heat", ["2", "4"]), ("1) Heat\n2) Alien", ["4"]), ("1. 2. Heat", ["4"]),
    ("1.Heat", ["4"]), ("Try 1. aliens", ["6"]), ("1. ALIEN", ["5"]), ("1. Toy-Story", ["3"]),
    ("prefs 1. Up\n\n\n2. Heat", ["4"]), ("1. Up\n2. Up\n3. Up\n4. Up\n5. Up\n6. Heat", ["4"]),
    ("1. Heat - a classic", ["4"]), ("1. Hear", ["4"]), ("1. Aliens 2", ["6"]), ("1. The Matrix", [" 2 "]),
    ("1. Up, 2. Heat", ["4"]), ("Up, Heat", ["1", "4"]), ("1. A", ["5"]), ("1. Matrixx", ["2"]), ("1. toy", ["3"]),
    ("1. (Up)", ["1"]), ("1.\n2. Alien", ["5"]), ("1. Alien\n" * 12 + "1. Heat", ["4"]),
    ("1. Heat\n2. Alien", ["5", "4"]),
    ("1. Alien\n2. Heat\n3. Up", ["1", "2", "3"]),
]


def recsys_reference(reply: str, gold: list[str]) -> dict[str, float]:
    titles = {i: movie_name(e) for e, i in CATALOGUE.items()}
    names = sorted(set(titles.values()))
    listed = reply.split("1.", 1)[1] if "1." in reply else reply.replace(",", "\n")
    picked = []
    for item in listed.split("\n"):
        item = re.sub(r"\([^()]*\)", "", item.strip())
        item = re.sub(r"^(?:\d+[.)、]?\s*[-—–]?\s*)?", "", item)
        item = " ".join(item.split()).lower()
        picked.append(min(names, key=lambda n: (levenshtein(item, n.lower()), names.index(n))))
    wanted = [titles[int(g)] for g in gold]
    return {f"recsys_recall@{k}": sum(w in picked[:k] for w in wanted) / len(wanted) for k in (1, 5, 10)}


def levenshtein(a: str, b: str) -> int:
    row = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        prev, row[0] = row[0], i
        for j, cb in enumerate(b, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (ca != cb))
    return row[-1]


@pytest.mark.parametrize("reply, gold", RECSYS)
def test_memoryagentbench_recsys_recalls_as_its_post_process_gives_them(reply, gold):
    assert recsys_recalls(reply, gold, CATALOGUE) == pytest.approx(recsys_reference(reply, gold))


def test_recsys_worked_by_hand():
    assert [movie_name(e) for e in CATALOGUE] == ["Up", "The Matrix", "Toy Story", "Heat", "Alien", "Aliens"]
    got = recsys_recalls("1. Alien\n2. Aliens\n3. Heat\n4. Up\n5. Toy Story\n6. The Matrix", ["2", "5"], CATALOGUE)
    assert got == {"recsys_recall@1": 0.5, "recsys_recall@5": 0.5, "recsys_recall@10": 1.0}
    assert not math.isnan(got["recsys_recall@5"])


# -- one question of a loaded benchmark -------------------------------------------------------------------------------
CHOICES = [("a", "A"), ("b", "B"), ("A", "A"), ("(a)", "A"), ("(b)", "B"), ("(A)", "A"), (" b ", "B"), ("x", "B"),
           ("abc", "B"), ("(a", "(a) not mentioned in the conversation (b) 1990"), ("Not mentioned", "not mentioned"),
           ("", ""), ("ba", "ba"), ("(c)", "B"), ("a.", "a.")]


@pytest.mark.parametrize("reply, picked", CHOICES)
def test_locomo_reads_a_one_or_three_character_reply_as_an_option(reply, picked):
    from memrl_envs.memory_benchmark_scores import locomo_choice

    options = {"a": "A", "b": "B"}
    if reply == "(a":  # any other reply stays itself, lower-cased
        reply = "(a) Not mentioned in the conversation (b) 1990"
    assert locomo_choice(reply, options) == picked


def test_each_benchmark_scores_a_question_by_its_reported_figure():
    from memrl_envs.memory_benchmark_scores import score_question
    from memrl_envs.memory_benchmarks import BenchmarkQuestion, locomo_options, question_text

    asked = []

    def judge(prompt):
        asked.append(prompt)
        return "Yes." if "Model Response: on Tuesday" in prompt else "No."

    lme = BenchmarkQuestion("q1", "When did I buy it?", ("Tuesday",), "temporal-reasoning", date="2023/05/30 (Tue)")
    assert score_question("longmemeval", lme, "on Tuesday", judge=judge) == 1.0
    assert score_question("longmemeval", lme, "no idea", judge=judge) == 0.0
    assert asked[0] == longmemeval_judge_prompt("temporal-reasoning", "When did I buy it?", "Tuesday", "on Tuesday")
    assert question_text("longmemeval", lme) == "Current Date: 2023/05/30 (Tue)\nQuestion: When did I buy it?"
    with pytest.raises(ValueError, match="scored by the LongMemEval judge"):
        score_question("longmemeval", lme, "on Tuesday")

    adversarial = BenchmarkQuestion("conv-26#2", "What did Caroline paint?", ("a sunrise",), 5, abstention=True)
    options = locomo_options(adversarial)
    assert sorted(options.values()) == ["Not mentioned in the conversation", "a sunrise"]
    assert options == locomo_options(adversarial)  # the same order every run
    right = next(k for k, v in options.items() if v.startswith("Not mentioned"))
    assert f"(a) {options['a']} (b) {options['b']}. " in question_text("locomo", adversarial)
    assert score_question("locomo", adversarial, right) == score_question("locomo", adversarial, f"({right})") == 1.0
    assert score_question("locomo", adversarial, "a sunrise") == 0.0
    temporal = BenchmarkQuestion("conv-26#1", "When did Melanie paint a sunrise?", ("2022",), 2)
    assert question_text("locomo", temporal).endswith("? Use DATE of CONVERSATION to answer with an approximate date.")
    assert score_question("locomo", temporal, "In 2022") == pytest.approx(2 / 3)

    ruler = BenchmarkQuestion("r#0", "Who?", ("John Smith", "J. Smith"))
    assert score_question("memoryagentbench", ruler, "It was John Smith.", source="ruler_qa1_197K") == 1.0
    icl = BenchmarkQuestion("i#0", "label?", ("43",))
    assert score_question("memoryagentbench", icl, "label: 43", source="icl_banking77_5900shot_balance") == 0.0
    assert score_question("memoryagentbench", icl, "43", source="icl_banking77_5900shot_balance") == 1.0
    with pytest.raises(ValueError, match="reports 'infbench_sum_eng_shots2' by judge"):
        score_question("memoryagentbench", icl, "43", source="infbench_sum_eng_shots2")


# -- LoCoMo's LLM-judge variant (Mem0's evaluation) -------------------------------------------------------------------
def mem0_label_reference(reply: str) -> bool:
    """Mem0's reading: a fenced block's content, else the outermost braces, else the text; then json's "label"."""
    import json

    text = reply.strip()
    fence = re.search(r"```(?:json)?\s*(.*?)\s*```", text, re.DOTALL)
    if fence:
        text = fence.group(1)
    else:
        first, last = text.find("{"), text.rfind("}")
        if first != -1 and last != -1 and last > first:
            text = text[first:last + 1]
    try:
        return json.loads(text).get("label") == "CORRECT"
    except (ValueError, AttributeError):
        return False


JUDGE_REPLIES = [
    '{"label": "CORRECT"}', '{"label": "WRONG"}', '{"label": "correct"}', '```json\n{"label": "CORRECT"}\n```',
    '```\n{"label": "WRONG"}\n```', 'The answer names the same necklace. {"label": "CORRECT"}',
    'It refers to another year.\n{"label": "WRONG"}', '{"label":"CORRECT","why":"same date"}', 'CORRECT',
    '"CORRECT"', '{"label": "CORRECT"} {"label": "WRONG"}', '{"Label": "CORRECT"}', '{"label": ["CORRECT"]}',
    '{"label": " CORRECT"}', '', '{}', '{', '}{', '[{"label": "CORRECT"}]', '```json\n{"label": "CORRECT"',
    'Reasoning... ```json {"label": "CORRECT"} ``` done', '{"label": "CORRECT"}\n```', '```{"label": "CORRECT"}```',
    '  {"label": "CORRECT"}  ', '{"label": null}', '{"label": "WRONG", "label": "CORRECT"}', 'null',
    '{"label": "CORRECT"', 'label: CORRECT', '{"answer": "CORRECT"}', '{"label": "CORRECT."}',
    'x {"a": {"label": "CORRECT"}} y',
]


@pytest.mark.parametrize("reply", JUDGE_REPLIES)
def test_locomo_judge_reads_its_label_as_mem0_does(reply):
    from memrl_envs.memory_benchmark_scores import locomo_judge_label

    assert locomo_judge_label(reply) is mem0_label_reference(reply)


def test_locomo_judge_asks_its_prompt_and_leaves_adversarial_questions_out():
    from memrl_envs.memory_benchmark_scores import judge_locomo, locomo_judge_prompt, locomo_metrics
    from memrl_envs.memory_benchmarks import BenchmarkQuestion

    prompt = locomo_judge_prompt("When?", "7 May 2023", "last Sunday")
    assert prompt.startswith("\nYour task is to label an answer to a question as \u2019CORRECT\u2019 or \u2019WRONG\u2019.")
    assert "Question: When?\nGold answer: 7 May 2023\nGenerated answer: last Sunday\n\n" in prompt
    assert prompt.endswith('in a json format with the key as "label".\n')
    asked = []
    judge = lambda p: asked.append(p) or '{"label": "CORRECT"}'  # noqa: E731
    assert judge_locomo(BenchmarkQuestion("q", "When?", ("7 May 2023",), 2), "last Sunday", judge) == 1.0
    assert asked == [prompt]
    assert judge_locomo(BenchmarkQuestion("q", "Who?", ("x",), 5), "(a)", judge) is None and len(asked) == 1
    metrics = locomo_metrics([Scored("a", 2, 0.5), Scored("b", 5, 1.0)], judged=[Scored("a", 2, 1.0)])
    assert metrics["judge"]["overall"]["mean"] == 1.0 and set(metrics["judge"]["per_category"]) == {"temporal"}
    assert "judge" not in locomo_metrics([Scored("a", 2, 0.5)])
