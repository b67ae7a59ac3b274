"""The scorers of LongMemEval, LoCoMo and MemoryAgentBench, each as its own repository computes it, so that a reply
scores here what it scores there (the loaders are memrl_envs.memory_benchmarks; the repositories are named there).

LongMemEval (src/evaluation/evaluate_qa.py, print_qa_metrics.py): an LLM judge reads one of five prompts (by question
type; the abstention prompt for an "_abs" question whatever its type), answers with temperature 0 and at most 10
tokens, and the reply is correct when "yes" is anywhere in it, lower-cased ("yes" inside "eyes" counts, a "no" beside
it does not matter). Reported: accuracy per question type, their unweighted mean ("task-averaged"), the accuracy
over all questions, and over the abstention questions. MemoryAgentBench judges its LongMemEval rows with the same
prompts (llm_based_eval/longmem_qa_evaluate.py).

LoCoMo (task_eval/evaluation.py, eval_question_answering): by category, on the prediction as given.
- 2 (temporal), 3 (open-domain), 4 (single-hop): token F1 after its normalisation (commas dropped, lower-cased,
  punctuation dropped, the words a/an/the/and dropped, whitespace collapsed), each token Porter-stemmed (NLTK's
  PorterStemmer, default mode); category 3 scores only the gold's text before its first ";".
- 1 (multi-hop): the prediction and the gold are split at ",", and the score is the mean over gold parts of the best
  F1 against any prediction part.
- 5 (adversarial): 1 when the lower-cased prediction says "no information available" or "not mentioned", else 0.
Reported: the mean per category and over all questions.

MemoryAgentBench (utils/eval_other_utils.py, post_process; README "Clarification on Evaluation Metrics"): every reply
gets exact_match, f1, substring_exact_match (SQuAD normalisation; F1 with the yes/no/noanswer rule), rougeL and
rougeLsum F1 and recall (Google's rouge-score with its Porter stemmer), each the best over the golds; by default the
best of the reply as given and of its answer line (the text after "Answer:", else its first line). By sub-dataset
(the row's metadata source, matched as the repository matches it):
- "icl" in the name: the answer line only; "eventqa": the answer line's metrics plus eventqa_recall, 1 when every
  gold is in the reply (lower-cased); "ruler_niah": only ruler_recall, the share of golds in the reply;
  "infbench" with "choice_eng": the gold's second element in the reply counts as exact and substring match;
  "recsys": Recall@1/5/10 of the gold movie ids among the reply's numbered titles, each title taken as the nearest
  catalogue name by edit distance (the catalogue is the repository's entity2id.json).
The paper's "accuracy" is one of these per sub-dataset (`MAB_REPORTED_METRIC`). Two sub-datasets are reported by an
LLM judge: the LongMemEval rows by LongMemEval's (`judge=`), infbench_sum by HELMET's key-point judge, which is not
run here (its replies get the metrics above, as post_process gives them, and no reported figure).

Where the repositories leave a choice open it is made here and said: the recsys nearest title among equally distant
catalogue names is the first in sorted order (the repository takes whichever a Python set yields first, which
changes from run to run).
"""

from __future__ import annotations

import json
import re
import string
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from memrl.stats import mean_interval
from memrl_envs.memory_benchmarks import locomo_options
from memrl_envs.memory_rewards import answer_line
from memrl_envs.qa_metrics import f1 as squad_f1
from memrl_envs.qa_metrics import normalize_answer

# -- LongMemEval -----------------------------------------------------------------------------------------------------
LONGMEMEVAL_TYPES = ("single-session-user", "single-session-preference", "single-session-assistant", "multi-session",
                     "temporal-reasoning", "knowledge-update")
"""The question types, in the order the repository reports them."""
LONGMEMEVAL_JUDGE_SAMPLING = {"temperature": 0.0, "max_tokens": 10}
"""How the judge is asked (one completion, greedy, at most 10 tokens)."""
LONGMEMEVAL_JUDGE_MODEL = "gpt-4o-2024-08-06"
"""The judge the paper's and the leaderboard's figures come from; any other judge is recorded with the result."""

_CORRECT = ("I will give you a question, a correct answer, and a response from a model. Please answer yes if the "
            "response contains the correct answer. Otherwise, answer no. If the response is equivalent to the correct "
            "answer or contains all the intermediate steps to get the correct answer, you should also answer yes. If "
            "the response only contains a subset of the information required by the answer, answer no. ")
_ASK = ("\n\nQuestion: {}\n\nCorrect Answer: {}\n\nModel Response: {}\n\nIs the model response correct? Answer yes "
        "or no only.")
_LONGMEMEVAL_PROMPTS = {
    "single-session-user": _CORRECT + _ASK,
    "single-session-assistant": _CORRECT + _ASK,
    "multi-session": _CORRECT + _ASK,
    "temporal-reasoning": _CORRECT + "In addition, do not penalize off-by-one errors for the number of days. If the "
    "question asks for the number of days/weeks/months, etc., and the model makes off-by-one errors (e.g., predicting "
    "19 days when the answer is 18), the model's response is still correct. " + _ASK,
    "knowledge-update": "I will give you a question, a correct answer, and a response from a model. Please answer yes "
    "if the response contains the correct answer. Otherwise, answer no. If the response contains some previous "
    "information along with an updated answer, the response should be considered as correct as long as the updated "
    "answer is the required answer." + _ASK,
    "single-session-preference": "I will give you a question, a rubric for desired personalized response, and a "
    "response from a model. Please answer yes if the response satisfies the desired response. Otherwise, answer no. "
    "The model does not need to reflect all the points in the rubric. The response is correct as long as it recalls "
    "and utilizes the user's personal information correctly.\n\nQuestion: {}\n\nRubric: {}\n\nModel Response: {}\n\n"
    "Is the model response correct? Answer yes or no only.",
}
_LONGMEMEVAL_ABSTENTION = (
    "I will give you an unanswerable question, an explanation, and a response from a model. Please answer yes if the "
    "model correctly identifies the question as unanswerable. The model could say that the information is incomplete, "
    "or some other information is given but the asked information is not.\n\nQuestion: {}\n\nExplanation: {}\n\n"
    "Model Response: {}\n\nDoes the model correctly identify the question as unanswerable? Answer yes or no only.")


def longmemeval_judge_prompt(question_type: str, question: str, answer: str, response: str,
                             abstention: bool = False) -> str:
    """The judge's one user message for a reply `response` to `question` with reference `answer`."""
    if abstention:
        return _LONGMEMEVAL_ABSTENTION.format(question, answer, response)
    if question_type not in _LONGMEMEVAL_PROMPTS:
        raise ValueError(f"LongMemEval has no judge prompt for question type {question_type!r}; allowed: "
                         f"{', '.join(LONGMEMEVAL_TYPES)}")
    return _LONGMEMEVAL_PROMPTS[question_type].format(question, answer, response)


def longmemeval_label(judge_reply: str) -> bool:
    """The judge's verdict: "yes" anywhere in its stripped, lower-cased reply."""
    return "yes" in judge_reply.strip().lower()


@dataclass(frozen=True)
class Scored:
    """One question's score with what the table groups it by."""

    question_id: str
    category: str | int | None
    score: float
    abstention: bool = False


def summary(values: Sequence[float]) -> dict[str, float]:
    """The mean of `values` with its 95% interval and their count."""
    mean, low, high = mean_interval(np.asarray(values, dtype=float))
    return {"mean": float(mean), "ci_low": float(low), "ci_high": float(high), "n": len(values)}


def longmemeval_metrics(scored: Iterable[Scored]) -> dict:
    """print_qa_metrics.py's figures, each mean with its 95% interval: per question type (those present),
    task_averaged (the unweighted mean of the per-type accuracies), overall and abstention."""
    scored = list(scored)
    by_type = {t: [s.score for s in scored if s.category == t] for t in LONGMEMEVAL_TYPES}
    unknown = sorted({str(s.category) for s in scored} - set(LONGMEMEVAL_TYPES))
    if unknown:
        raise ValueError(f"unknown LongMemEval question types {unknown}; allowed: {', '.join(LONGMEMEVAL_TYPES)}")
    per_type = {t: summary(v) for t, v in by_type.items() if v}
    out = {"per_category": per_type, "overall": summary([s.score for s in scored])}
    out["task_averaged"] = float(np.mean([m["mean"] for m in per_type.values()])) if per_type else float("nan")
    abstention = [s.score for s in scored if s.abstention]
    if abstention:
        out["abstention"] = summary(abstention)
    return out


# -- LoCoMo ------------------------------------------------------------------------------------------------------------
LOCOMO_CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
"""LoCoMo's question categories by number (the paper's names; the file holds the numbers)."""
_LOCOMO_DROPPED_WORDS = re.compile(r"\b(a|an|the|and)\b")
_PUNCTUATION = set(string.punctuation)
_STEMMER = None


def _stem(word: str) -> str:
    global _STEMMER
    if _STEMMER is None:
        from nltk.stem import PorterStemmer

        _STEMMER = PorterStemmer()
    return _STEMMER.stem(word)


def locomo_normalize(text: str) -> str:
    """LoCoMo's normalisation: commas dropped, lower-cased, punctuation dropped, a/an/the/and dropped, spaces
    collapsed."""
    text = "".join(ch for ch in text.replace(",", "").lower() if ch not in _PUNCTUATION)
    return " ".join(_LOCOMO_DROPPED_WORDS.sub(" ", text).split())


def locomo_f1(prediction: str, gold: str) -> float:
    """Token F1 of the Porter-stemmed normalised words."""
    pred = [_stem(w) for w in locomo_normalize(prediction).split()]
    ref = [_stem(w) for w in locomo_normalize(gold).split()]
    common = sum((Counter(pred) & Counter(ref)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(pred), common / len(ref)
    return 2 * precision * recall / (precision + recall)


def locomo_multi_f1(prediction: str, gold: str) -> float:
    """Multi-hop F1: the mean over the gold's ","-parts of the best F1 against any of the prediction's parts."""
    parts = [p.strip() for p in prediction.split(",")]
    return float(np.mean([max(locomo_f1(p, g.strip()) for p in parts) for g in gold.split(",")]))


def locomo_score(prediction: str, gold: str, category: int) -> float:
    """One reply's score by its question's category (module docstring)."""
    if category in (2, 3, 4):
        return locomo_f1(prediction, gold.split(";")[0].strip() if category == 3 else gold)
    if category == 1:
        return locomo_multi_f1(prediction, gold)
    if category == 5:
        lowered = prediction.lower()
        return float("no information available" in lowered or "not mentioned" in lowered)
    raise ValueError(f"LoCoMo category must be one of {sorted(LOCOMO_CATEGORIES)}, got {category!r}")


LOCOMO_JUDGE_MODEL = "gpt-4o-mini"
"""The judge of the LLM-judge figures the field reports on LoCoMo (Mem0's evaluation/metrics/llm_judge.py)."""
LOCOMO_JUDGE_SAMPLING = {"temperature": 0.0, "max_tokens": 512}
"""How that judge is asked: greedy (Mem0 also asks for a JSON object; its length is not capped there)."""
_LOCOMO_JUDGE_PROMPT = (
    "\nYour task is to label an answer to a question as \u2019CORRECT\u2019 or \u2019WRONG\u2019. You will be "
    "given the following data:\n    (1) a question (posed by one user to another user), \n    (2) a "
    "\u2019gold\u2019 (ground truth) answer, \n    (3) a generated answer\nwhich you will score as "
    "CORRECT/WRONG.\n\nThe point of the question is to ask about something one user should know about the other "
    "user based on their prior conversations.\nThe gold answer will usually be a concise and short answer that "
    "includes the referenced topic, for example:\nQuestion: Do you remember what I got the last time I went to "
    "Hawaii?\nGold answer: A shell necklace\nThe generated answer might be much longer, but you should be generous "
    "with your grading - as long as it touches on the same topic as the gold answer, it should be counted as "
    "CORRECT. \n\nFor time related questions, the gold answer will be a specific date, month, year, etc. The "
    "generated answer might be much longer or use relative time references (like \"last Tuesday\" or \"next "
    "month\"), but you should be generous with your grading - as long as it refers to the same date or time period "
    "as the gold answer, it should be counted as CORRECT. Even if the format differs (e.g., \"May 7th\" vs \"7 "
    "May\"), consider it CORRECT if it's the same date.\n\nNow it's time for the real question:\nQuestion: "
    "{question}\nGold answer: {gold_answer}\nGenerated answer: {generated_answer}\n\nFirst, provide a short (one "
    "sentence) explanation of your reasoning, then finish with CORRECT or WRONG. \nDo NOT include both CORRECT and "
    "WRONG in your response, or it will break the evaluation script.\n\nJust return the label CORRECT or WRONG in "
    "a json format with the key as \"label\".\n")
_FENCED_JSON = re.compile(r"```(?:json)?\s*(.*?)\s*```", re.S)


def locomo_judge_prompt(question: str, gold: str, generated: str) -> str:
    """The LLM judge's one user message for LoCoMo (Mem0's ACCURACY_PROMPT)."""
    return _LOCOMO_JUDGE_PROMPT.format(question=question, gold_answer=gold, generated_answer=generated)


def locomo_judge_label(reply: str) -> bool:
    """The judge's verdict as Mem0 reads it: the JSON in a fenced block, else from the first "{" to the last "}",
    else the whole reply; its "label" must be exactly "CORRECT". A reply without such JSON is WRONG here (Mem0's
    script stops with an error on it)."""
    text = reply.strip()
    fenced = _FENCED_JSON.search(text)
    if fenced:
        text = fenced.group(1)
    elif -1 < text.find("{") < text.rfind("}"):
        text = text[text.find("{"): text.rfind("}") + 1]
    try:
        value = json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        return False
    return isinstance(value, dict) and value.get("label") == "CORRECT"


def locomo_metrics(scored: Iterable[Scored], judged: Iterable[Scored] = ()) -> dict:
    """Mean score with its 95% interval per category (by name) and over all questions; with `judged` (the LLM
    judge's 1/0 per question of categories 1-4, as Mem0 reports it), "judge" holds the same figures for those."""
    def figures(rows: list[Scored]) -> dict:
        per = {name: [s.score for s in rows if s.category == number] for number, name in LOCOMO_CATEGORIES.items()}
        return {"per_category": {name: summary(v) for name, v in per.items() if v},
                "overall": summary([s.score for s in rows])}

    judged = list(judged)
    return {**figures(list(scored)), **({"judge": figures(judged)} if judged else {})}


# -- MemoryAgentBench --------------------------------------------------------------------------------------------------
MAB_REPORTED_METRIC = (("eventqa", "substring_exact_match"), ("ruler_qa", "substring_exact_match"),
                       ("factconsolidation", "substring_exact_match"), ("detective", "exact_match"),
                       ("icl", "exact_match"), ("recsys", "recsys_recall@5"), ("ruler_niah", "ruler_recall"),
                       ("longmemeval", "judge"), ("infbench_sum", "judge"))
"""The paper's figure per sub-dataset (the first name fragment the source contains), from the repository's README."""
_ROUGE = None


def _rouge():
    global _ROUGE
    if _ROUGE is None:
        from rouge_score import rouge_scorer

        _ROUGE = rouge_scorer.RougeScorer(["rougeL", "rougeLsum"], use_stemmer=True)
    return _ROUGE


def reported_metric(source: str) -> str:
    """The metric the MemoryAgentBench paper reports for sub-dataset `source`."""
    for fragment, metric in MAB_REPORTED_METRIC:
        if fragment in source:
            return metric
    raise ValueError(f"MemoryAgentBench reports no metric for source {source!r}; known sources contain one of "
                     f"{', '.join(f for f, _ in MAB_REPORTED_METRIC)}")


def _flat(answers) -> list[str]:
    if isinstance(answers, str):
        return [answers]
    answers = list(answers)
    if answers and isinstance(answers[0], (list, tuple)):
        return [a for group in answers for a in group]
    return answers


def mab_metrics_of(prediction: str, answers) -> dict[str, float]:
    """calculate_metrics: exact_match, f1, substring_exact_match and ROUGE-L / ROUGE-Lsum F1 and recall, each the best
    over the (flattened) golds."""
    golds = _flat(answers)
    pred = normalize_answer(prediction)
    metrics = {"exact_match": float(max(pred == normalize_answer(g) for g in golds)),
               "f1": squad_f1(prediction, golds),
               "substring_exact_match": float(max(normalize_answer(g) in pred for g in golds))}
    scores = [_rouge().score(target=g, prediction=prediction) for g in golds]
    for kind in ("rougeL", "rougeLsum"):
        metrics[f"{kind}_f1"] = max(s[kind].fmeasure for s in scores)
        metrics[f"{kind}_recall"] = max(s[kind].recall for s in scores)
    return metrics


def _best_of_reply_and_line(prediction: str, answers) -> dict[str, float]:
    whole, line = mab_metrics_of(prediction, answers), mab_metrics_of(answer_line(prediction), answers)
    return {k: max(v, line[k]) for k, v in whole.items()}


def mab_score(prediction: str, answers, source: str, judge: Callable[[str], float] | None = None,
              entity_ids: dict[str, int] | None = None) -> dict[str, float]:
    """Every metric MemoryAgentBench's post_process gives one reply of sub-dataset `source` (module docstring), routed
    in the repository's order. `judge(prediction)` adds the LongMemEval judge's 1.0/0.0 as "judge" on "longmemeval"
    sources (which are reported by it); `entity_ids` (the repository's processed_data/Recsys_Redial/entity2id.json,
    entity -> id) is needed for "recsys" sources."""
    answers = _flat(answers)
    if not answers:
        raise ValueError(f"a MemoryAgentBench reply of {source!r} needs at least one gold answer")
    lowered = prediction.lower()
    if "icl" in source:
        return mab_metrics_of(answer_line(prediction), answers)
    if "eventqa" in source:
        found = sum(a.lower() in lowered for a in answers) / len(answers)
        return {**mab_metrics_of(answer_line(prediction), answers), "eventqa_recall": float(found == 1)}
    if "infbench" in source and "choice_eng" in source:
        metrics = _best_of_reply_and_line(prediction, answers)
        hit = float(answers[1].lower() in lowered)
        metrics["substring_exact_match"] = hit
        if hit:
            metrics["exact_match"] = 1.0
        return metrics
    if "ruler_niah" in source:
        return {"ruler_recall": sum(a.lower() in lowered for a in answers) / len(answers)}
    if "recsys" in source:
        if entity_ids is None:
            raise ValueError(f"{source!r} is scored against the movie catalogue: pass entity_ids= (the repository's "
                             "processed_data/Recsys_Redial/entity2id.json, entity -> id)")
        return recsys_recalls(prediction, answers, entity_ids)
    metrics = _best_of_reply_and_line(prediction, answers)
    if "longmemeval" in source:
        if judge is None:
            raise ValueError(f"{source!r} is reported by the LongMemEval judge: pass judge=")
        metrics["judge"] = float(judge(prediction))
    return metrics


def mab_metrics(scores_by_source: dict[str, Sequence[float]]) -> dict:
    """Mean reported score with its 95% interval per sub-dataset and over all questions."""
    return {"per_category": {source: summary(v) for source, v in scores_by_source.items()},
            "overall": summary([x for v in scores_by_source.values() for x in v])}


# -- MemoryAgentBench's recommendation sub-dataset -------------------------------------------------------------------
_PARENTHESES = re.compile(r"\([^()]*\)")
_NUMBERING = re.compile(r"^(?:\d+[\.\)、]?\s*[\-\—\–]?\s*)?")


def _clean_title(text: str) -> str:
    text = _NUMBERING.sub("", _PARENTHESES.sub("", text))
    return re.sub(r"\s+", " ", text).strip()


def movie_name(entity: str) -> str:
    """A catalogue entity (a path or name) as a title: the last path part, "_", "-" and ">" as spaces, without
    parenthesised parts, spaces collapsed."""
    name = entity.split("/")[-1].replace("_", " ").replace("-", " ").replace(">", " ")
    return re.sub(r"\s+", " ", _PARENTHESES.sub("", name)).strip()


def recommended_titles(reply: str, catalogue: Sequence[str]) -> list[str]:
    """The reply's list after its first "1." (else its lines and comma-separated items), each item cleaned and taken
    as the nearest catalogue title by edit distance, case-insensitive."""
    from rapidfuzz.distance import Levenshtein

    parts = reply.split("1.", maxsplit=1)
    listed = parts[1] if len(parts) == 2 else reply.replace(",", "\n")
    candidates = sorted(set(catalogue))
    lowered = [c.lower() for c in candidates]
    titles = []
    for item in listed.split("\n"):
        target = _clean_title(item.strip()).lower()
        distances = [Levenshtein.distance(target, c) for c in lowered]
        titles.append(candidates[int(np.argmin(distances))])
    return titles


def recsys_recalls(reply: str, gold_ids: Sequence[str], entity_ids: dict[str, int]) -> dict[str, float]:
    """Recall@1, @5 and @10 of the gold movies (entity ids as text) among the reply's titles."""
    titles_by_id = {entity_id: movie_name(entity) for entity, entity_id in entity_ids.items()}
    titles = recommended_titles(reply, list(titles_by_id.values()))
    gold = [titles_by_id[int(str(i).strip())] for i in gold_ids]
    return {f"recsys_recall@{k}": sum(m in titles[:k] for m in gold) / len(gold) for k in (1, 5, 10)}


# -- one question of a loaded benchmark --------------------------------------------------------------------------------
def locomo_choice(reply: str, options: dict[str, str]) -> str:
    """A reply to a category-5 question read as LoCoMo's evaluation reads it (gpt_utils.get_cat_5_answer): stripped and
    lower-cased; one character means option (a) if it holds "a", else (b); three characters mean (a) if they hold
    "(a)", else (b); anything else stays the reply."""
    reply = reply.strip().lower()
    if len(reply) == 1:
        return options["a"] if "a" in reply else options["b"]
    if len(reply) == 3:
        return options["a"] if "(a)" in reply else options["b"]
    return reply


def locomo_reply(question, reply: str) -> str:
    """A LoCoMo reply as it is scored: an adversarial question's option letter read as its option (locomo_choice)."""
    return locomo_choice(reply, locomo_options(question)) if question.category == 5 else reply


def score_question(benchmark: str, question, reply: str, source: str = "",
                   judge: Callable[[str], str] | None = None, entity_ids: dict[str, int] | None = None) -> float:
    """The score the benchmark reports for `reply` to `question` (a memrl_envs.memory_benchmarks.BenchmarkQuestion):
    LongMemEval's judge verdict, LoCoMo's category score, MemoryAgentBench's reported metric for sub-dataset
    `source`. `judge(prompt)` returns the judge model's reply to one user message (asked with
    LONGMEMEVAL_JUDGE_SAMPLING); LongMemEval questions, and MemoryAgentBench's LongMemEval rows, need it.
    `entity_ids` is MemoryAgentBench's movie catalogue (entity2id.json), which its recommendation rows need."""

    def judged(category) -> float:
        if judge is None:
            raise ValueError(f"{benchmark} question {question.question_id!r} is scored by the LongMemEval judge: "
                             "give a judge (an OpenAI-compatible endpoint or an answerer actor)")
        prompt = longmemeval_judge_prompt(str(category), question.question, question.answers[0], reply,
                                          question.abstention)
        return float(longmemeval_label(judge(prompt)))

    if benchmark == "longmemeval":
        return judged(question.category)
    if benchmark == "locomo":
        return locomo_score(locomo_reply(question, reply), question.answers[0], question.category)
    if benchmark == "memoryagentbench":
        metric = reported_metric(source)
        if metric == "judge" and "longmemeval" in source:
            return judged(question.category)
        scores = mab_score(reply, question.answers, source, entity_ids=entity_ids)
        if metric not in scores:
            raise ValueError(f"MemoryAgentBench reports {source!r} by {metric}, which memrl does not compute (the "
                             "authors' HELMET judge); leave this sub-dataset out or score it with their script")
        return float(scores[metric])
    raise ValueError(f"unknown benchmark {benchmark!r}; allowed: longmemeval, locomo, memoryagentbench")


def judge_locomo(question, reply: str, judge: Callable[[str], str]) -> float | None:
    """The LLM judge's 1.0/0.0 for `reply` to a LoCoMo question (Mem0's prompt and reading; the reply as the F1 reads
    it, an option letter of an adversarial question turned into the option); None for category 5, which Mem0's
    evaluation leaves out."""
    if question.category == 5:
        return None
    return float(locomo_judge_label(judge(locomo_judge_prompt(question.question, question.answers[0], reply))))
