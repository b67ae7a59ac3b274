import itertools
import json
import random
import string

import gymnasium as gym
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from gymnasium.utils.env_checker import check_env

import memrl_envs  # noqa: F401  (registers memrl/ ids)
from memrl_envs.encyclopedia import EncyclopediaConfig, make_world
from memrl_envs.retrieval import BM25Retriever, HTTPRetriever, Passage, start_retrieval_server
from memrl.text import find_action
from memrl_envs.search import SearchEnv, load_questions, parse_action, split_answers, turns_hint

QA_ROWS = [
    {"question": "In which city is the head office of Quovex?", "golden_answers": ["New York City", "NYC"]},
    {"question": "Who founded Trorum?", "golden_answers": ["Dulia"]},
]
CORPUS_ROWS = [
    {"id": "0", "contents": "Quovex\nQuovex has its head office in New York City."},
    {"id": "1", "contents": "Trorum\nTrorum was founded by Dulia in 1901."},
    {"id": "2", "contents": "Gerford\nGerford is an inland city."},
]


@pytest.fixture
def files(tmp_path):
    qa, corpus = tmp_path / "qa.jsonl", tmp_path / "wiki.jsonl"
    qa.write_text("".join(json.dumps(r) + "\n" for r in QA_ROWS))
    corpus.write_text("".join(json.dumps(r) + "\n" for r in CORPUS_ROWS))
    return {"data": "file", "qa_path": str(qa), "corpus_path": str(corpus)}


def play_expert(env, seed):
    obs, info = env.reset(seed=seed)
    while True:
        obs, reward, terminated, truncated, info = env.step(env.expert_action())
        assert env.observation_space.contains(obs)
        if terminated or truncated:
            return reward, terminated, truncated, info


def test_env_passes_gymnasium_checker(files):
    check_env(SearchEnv(), skip_render_check=True)
    check_env(SearchEnv(num_objectives=4, max_turns=12, name_length="long", reward="f1"), skip_render_check=True)
    check_env(SearchEnv(num_objectives=16, max_turns=40, top_k=5, max_doc_chars=200), skip_render_check=True)
    check_env(SearchEnv(num_objectives=2, **files), skip_render_check=True)
    check_env(gym.make("memrl/Search-v0", num_objectives=2).unwrapped, skip_render_check=True)


@pytest.mark.parametrize("num_objectives, max_turns", [(1, 3), (2, 6), (3, 7), (16, 33)])
@pytest.mark.parametrize("reward, full", [("em_sum", None), ("f1", 1.0), ("answer_format", 1.0)])
def test_expert_earns_full_reward(num_objectives, max_turns, reward, full):
    env = SearchEnv(num_objectives=num_objectives, max_turns=max_turns, reward=reward)
    for seed in range(6):
        got, terminated, truncated, info = play_expert(env, seed)
        assert (got, terminated, truncated) == (full or float(num_objectives), True, False)
        metrics = info["metrics"]
        assert metrics["em"] == metrics["f1"] == metrics["format_ok"] == metrics["answer_count_ok"] == 1.0
        hops = len({query for q in env.questions for query in q.queries})  # a query two questions share runs once
        assert metrics["num_searches"] == hops and metrics["num_turns"] == hops + 1 and metrics["num_invalid"] == 0
        assert info["answers"] == [list(q.answers) for q in env.questions] and not info["out_of_turns"]


def test_expert_notes_hold_each_answered_question_and_the_next_question():
    assert SearchEnv(num_objectives=2, max_turns=6).expert_memory() is None  # off by default
    env = SearchEnv(num_objectives=4, max_turns=10, expert_notes=True)
    for seed in range(5):
        env.reset(seed=seed)
        notes = [env.expert_memory()]
        while True:
            *_, terminated, truncated, info = env.step(env.expert_action())
            if terminated or truncated:
                break
            notes.append(env.expert_memory())
        answers = [a[0] for a in info["answers"]]
        questions = [q.question for q in env.questions]
        assert notes[0] == f"Q1: {questions[0]}"
        assert notes[-1] == "\n".join(f"Q{i} {a}" for i, a in enumerate(answers, start=1))
        # A note appears once its question's last hop has been read, never before and in order; then the next
        # question, whole.
        for note, searched in zip(notes, itertools.accumulate(([q] for q in env._searched), initial=[])):
            done = [i for i, q in enumerate(env.questions, start=1) if set(q.queries) <= set(searched)]
            pointer = [f"Q{len(done) + 1}: {questions[len(done)]}"] if len(done) < 4 else []
            assert note == "\n".join([*(f"Q{i} {answers[i - 1]}" for i in done), *pointer])
    with pytest.raises(RuntimeError, match="needs a running episode"):
        env.expert_memory()


def test_reset_search_and_hint():
    env = SearchEnv(num_objectives=2, max_turns=4, two_hop_fraction=1.0)
    obs, info = env.reset(seed=7)
    q1, q2 = env.questions
    assert obs == f"Question 1: {q1.question}\nQuestion 2: {q2.question}" == info["question"]
    assert info == {"question": obs, "questions": [q1.question, q2.question], "turn": 0, "turns_left": 4}
    obs, reward, terminated, truncated, info = env.step(f"<think>hop 1</think><search> {q1.queries[0]} </search>")
    assert (reward, terminated, truncated) == (0.0, False, False)
    assert obs.startswith("<information>You have 3 turns left.\nDoc 1(Title: ") and obs.endswith("</information>")
    assert obs.count("\nDoc ") == 2  # top 3
    assert info["action"] == "search" and info["format_ok"] == 1.0 and info["query"] == q1.queries[0]
    assert q1.gold_ids[0] in info["retrieved_ids"] and (info["turn"], info["turns_left"]) == (1, 3)
    hop2 = next(p for p in make_world(EncyclopediaConfig(two_hop_fraction=1.0)).passages if p.id == q1.gold_ids[1])
    assert hop2.title in obs  # the bridge entity to search next is in what the agent read
    obs, *_ = env.step("<search>zebra quagga</search>")
    assert obs == "<information>You have 2 turns left.\nNo results found.</information>"
    obs, *_, info = env.step("<search>x</search>")
    assert obs == "<information>You have 1 turn left.\nNo results found.</information>"
    assert turns_hint(1) == "You have 1 turn left." and info["turns_left"] == 1


def test_reset_options_give_an_episode_a_smaller_task():
    env = SearchEnv(num_objectives=4, max_turns=10)
    obs, info = env.reset(seed=3, options={"num_objectives": 1, "max_turns": 3})
    assert len(env.questions) == 1 and obs == env.questions[0].question and info["turns_left"] == 3
    obs, *_ = env.step("no tags")
    assert "with 1 answer(s)" in obs and "You have 2 turns left." in obs
    reward, terminated, _, info = play_expert(env, 3)  # no options: the config's full task again
    assert len(env.questions) == 4 and reward == 4.0 and terminated
    env.reset(seed=3, options={"num_objectives": 2})
    for _ in range(9):
        *_, truncated, info = env.step("<search>x</search>")
    assert not truncated and info["turns_left"] == 1  # only the count changed: the config's 10 turns remain
    for options, message in [({"num_objectives": 5}, r"num_objectives=5 .* \[1, 4\]"),
                             ({"max_turns": 0}, r"max_turns=0 .* \[1, 10\]"),
                             ({"num_objectives": "2"}, "num_objectives='2'"),
                             ({"turns": 3}, r"no option\(s\) \['turns'\]; allowed: \['num_objectives', 'max_turns'\]")]:
        with pytest.raises(ValueError, match=message):
            env.reset(seed=0, options=options)


def test_one_question_prompt_is_the_question():
    env = SearchEnv()
    obs, _ = env.reset(seed=2)
    assert obs == env.questions[0].question and not obs.startswith("Question 1")


def test_running_out_of_turns_truncates_with_zero_reward():
    for last in ("<search>Kema</search>", "no tags at all"):
        env = SearchEnv(max_turns=3)
        env.reset(seed=1)
        for turns_left in (2, 1):
            obs, reward, terminated, truncated, info = env.step("<search>Kema</search>")
            assert f"You have {turns_left} turn" in obs and not (terminated or truncated)
        obs, reward, terminated, truncated, info = env.step(last)
        assert (obs, reward, terminated, truncated) == ("", 0.0, False, True)
        assert info["out_of_turns"] and info["turns_left"] == 0
        assert info["format_ok"] == float(last.startswith("<search>"))
        metrics = info["metrics"]
        assert metrics["format_ok"] == metrics["answer_count_ok"] == metrics["em"] == 0.0
        assert metrics["num_turns"] == 3 and metrics["num_searches"] == 2 + last.startswith("<search>")
        with pytest.raises(RuntimeError, match="after the episode ended"):
            env.step("<answer>x</answer>")


def file_env(files, **kwargs):
    env = SearchEnv(num_objectives=2, **files, **kwargs)
    env.reset(seed=0)
    gold = {q["question"]: q["golden_answers"][0] for q in QA_ROWS}
    return env, [gold[q.question] for q in env.questions]


@pytest.mark.parametrize(
    "answer, em_sum, f1, answer_format, count_ok",
    [
        ("{0}; {1}", 2.0, 1.0, 1.0, 1.0),
        ("  {0} ;{1}.  ", 2.0, 1.0, 1.0, 1.0),  # normalised: case, spaces, punctuation
        ("{0}; nobody", 1.0, 0.5, 0.0, 1.0),
        ("nowhere; nobody", 0.0, 0.1, 0.0, 1.0),  # format right, F1 0: MemSearcher's 0.1
        ("{0}", 0.0, 0.0, 0.0, 0.0),  # one answer for two questions
        ("{0}; {1};", 0.0, 0.0, 0.0, 0.0),  # a trailing semicolon is a third (empty) answer
        ("{0}; {1}; extra", 0.0, 0.0, 0.0, 0.0),
    ],
)
def test_reward_kinds_by_hand(files, answer, em_sum, f1, answer_format, count_ok):
    for kind, expected in (("em_sum", em_sum), ("f1", f1), ("answer_format", answer_format)):
        env, gold = file_env(files, reward=kind)
        _, reward, terminated, truncated, info = env.step("<answer>" + answer.format(*gold) + "</answer>")
        assert (reward, terminated, truncated) == (pytest.approx(expected), True, False), kind
        assert info["metrics"]["answer_count_ok"] == info["format_ok"] == count_ok
        assert info["metrics"]["em"] == (em_sum / 2 if count_ok else 0.0)


def test_partial_f1_and_gold_aliases(files):
    env, gold = file_env(files, reward="f1")
    answers = ["New York" if g == "New York City" else g for g in gold]  # F1 with "New York City": 0.8
    _, reward, *_, info = env.step(f"<answer>{'; '.join(answers)}</answer>")
    assert reward == pytest.approx(0.9) and info["metrics"]["em"] == 0.5
    env, gold = file_env(files, reward="em_sum")
    _, reward, *_ = env.step("<answer>" + "; ".join("NYC" if g == "New York City" else g for g in gold) + "</answer>")
    assert reward == 2.0


def test_an_invalid_action_costs_the_format_rewards_only(files):
    for kind, expected in (("em_sum", 2.0), ("f1", 0.0), ("answer_format", 0.0)):
        env, gold = file_env(files, reward=kind)
        env.step("I think I should search")
        _, reward, terminated, _, info = env.step(f"<answer>{gold[0]}; {gold[1]}</answer>")
        assert reward == expected and terminated, kind
        assert info["metrics"]["format_ok"] == 0.0 and info["metrics"]["num_invalid"] == 1
        assert info["format_ok"] == 1.0  # the answer itself was well formed


@pytest.mark.parametrize(
    "action, reason",
    [
        ("", "it holds neither <search> nor <answer>"),
        (None, "it holds neither <search> nor <answer>"),
        (42, "it holds neither <search> nor <answer>"),
        ("<search>a</search> then <answer>b</answer>", "it holds both <search> and <answer>"),
        ("<search>unclosed", "its <search> and </search> tags do not form exactly one block"),
        ("</search>backwards<search>", "its <search> and </search> tags do not form exactly one block"),
        ("<search>a</search><search>b</search>", "its <search> and </search> tags do not form exactly one block"),
        ("<answer>a; b", "its <answer> and </answer> tags do not form exactly one block"),
        ("<search>  \n </search>", "the search query is empty"),
        ("<search>" + "x" * 300 + "</search>", "the search query has 300 characters, more than the 256 allowed"),
    ],
)
def test_malformed_actions_get_a_clear_observation(action, reason):
    env = SearchEnv(num_objectives=2)
    env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step(action)
    assert obs == (
        f"Invalid action: {reason}. Write exactly one <search>query</search>, or <answer>...</answer> with 2 "
        "answer(s) separated by semicolons. You have 5 turns left."
    )
    assert (reward, terminated, truncated) == (0.0, False, False)
    assert info["action"] == "invalid" and info["format_ok"] == 0.0
    assert env.observation_space.contains(obs)


def test_parse_action_and_split_answers():
    assert parse_action("<mem>m</mem><think>t</think><search> Kema Belott </search>", 64) == ("search", "Kema Belott")
    assert parse_action("<answer>\n a; b \n</answer>", 64) == ("answer", "a; b")
    assert parse_action("<answer></answer>", 64) == ("answer", "")
    assert split_answers("a ; b;") == ["a", "b", ""] and split_answers("") == [""]


def test_find_action_leaves_the_query_checks_to_the_env():
    # Workflows find the action with find_action; only the env judges the query (empty, too long).
    assert find_action("<search></search>") == ("search", "")
    assert find_action("<search>" + "x" * 300 + "</search>") == ("search", "x" * 300)
    assert parse_action("<search>" + "x" * 300 + "</search>", 256)[0] == "invalid"
    assert find_action("<think>t</think>") == ("invalid", "it holds neither <search> nor <answer>")


def test_fuzzed_actions_never_crash_and_always_end():
    rng = random.Random(0)
    pieces = ["<search>", "</search>", "<answer>", "</answer>", "<think>", ";", "Kema", " ", "\x00", "é", "漢", "\n"]
    specials = [None, 7, "", "a" * 10**6, "<search>" + "q" * 10**5 + "</search>", "<answer>" + ";" * 40 + "</answer>"]
    for kind in ("em_sum", "f1", "answer_format"):
        env = SearchEnv(num_objectives=3, max_turns=5, reward=kind, max_action_chars=2048)
        for episode in range(40):
            obs, info = env.reset(seed=episode)
            for turn in range(1, 6):
                if rng.random() < 0.2:
                    action = rng.choice(specials)
                elif rng.random() < 0.5:
                    action = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 12)))
                else:
                    action = "".join(rng.choice(string.printable) for _ in range(rng.randint(0, 200)))
                obs, reward, terminated, truncated, info = env.step(action)
                assert env.observation_space.contains(obs) and info["format_ok"] in (0.0, 1.0)
                assert info["action"] in ("search", "answer", "invalid") and info["turn"] == turn
                if terminated or truncated:
                    break
            assert terminated or truncated, "an episode must end within max_turns"
            metrics = info["metrics"]
            assert all(0.0 <= metrics[k] <= 1.0 for k in ("em", "f1", "format_ok", "answer_count_ok"))
            assert 0.0 <= reward <= (3.0 if kind == "em_sum" else 1.0)
            if truncated:
                assert reward == 0.0 and info["out_of_turns"]


def test_file_data(files, tmp_path):
    env = SearchEnv(num_objectives=1, **files)
    seen = set()
    for seed in range(10):
        obs, info = env.reset(seed=seed)
        seen.add(obs)
        obs, *_, info = env.step("<search>Trorum founder</search>")
        assert "Doc 1(Title: Trorum) Trorum was founded by Dulia in 1901." in obs and info["retrieved_ids"][0] == "1"
    assert seen == {r["question"] for r in QA_ROWS}
    with pytest.raises(RuntimeError, match="only data='synthetic' has"):
        env.expert_action()


def test_question_files(tmp_path):
    hotpot = [{"_id": "a", "question": "Which   magazine\nfirst?", "answer": "Arthur's Magazine"}]
    (tmp_path / "hotpot.json").write_text(json.dumps(hotpot))
    assert [(q.question, q.answers) for (q,) in load_questions(str(tmp_path / "hotpot.json"))] == [
        ("Which magazine first?", ("Arthur's Magazine",))
    ]
    search_r1 = [{"id": "t1", "question": "who sang ö?", "golden_answers": ["Björk", "Bjork G."], "data_source": "nq"}]
    pq.write_table(pa.Table.from_pylist(search_r1), tmp_path / "train.parquet")
    ((q,),) = load_questions(str(tmp_path / "train.parquet"))
    assert (q.question, q.answers) == ("who sang ö?", ("Björk", "Bjork G."))
    (tmp_path / "nq.jsonl").write_text(json.dumps({"query": "q?", "answers": ["x"]}) + "\n")
    assert load_questions(str(tmp_path / "nq.jsonl"))[0][0].answers == ("x",)
    # Search-R1's verl rows: the question is the prompt's last "Question:" line, the answers its target.
    verl = [{"data_source": "nq", "prompt": [{"role": "user", "content": "Answer the given question. ...\n"
                                                                          "Question: who sang ö?\n"}],
             "ability": "fact-reasoning", "reward_model": {"style": "rule", "ground_truth": {"target": ["Björk"]}},
             "extra_info": {"split": "train", "index": 0}}]
    pq.write_table(pa.Table.from_pylist(verl), tmp_path / "search_r1.parquet")
    ((q,),) = load_questions(str(tmp_path / "search_r1.parquet"))
    assert (q.question, q.answers) == ("who sang ö?", ("Björk",))


MEM1_INSTRUCTIONS = ("You will answer multiple complex questions using iterative reasoning, summarization, and web "
                     "search.\n\n2. Then provide the final answers\u2014separated by semicolons\u2014within <answer> "
                     "answer1; answer2; ... </answer>.\n\nAnswer the following questions: {questions}\n")


def _mem1_row(questions, targets, split="train", index=0):
    return {"data_source": "hotpotqa",
            "prompt": [{"role": "user", "content": MEM1_INSTRUCTIONS.format(questions="; ".join(questions))}],
            "ability": "fact-reasoning", "reward_model": {"style": "rule", "ground_truth": {"target": targets}},
            "extra_info": {"split": split, "index": index}}


def test_mem1_multi_objective_rows_are_fixed_tasks(tmp_path, files):
    rows = [_mem1_row(["Who founded Trorum?", "When was Trorum founded?", "Where is Zürich; or Bern?"],
                      [["Dulia"], ["1901", "in 1901"], ["Switzerland"]]),
            _mem1_row(["Who founded Trorum?", "Who is Dulia?", "What is 東京?"], [["Dulia"], ["a founder"], ["Tokyo"]],
                      index=1)]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "train.parquet")
    (tmp_path / "test.jsonl").write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in rows), encoding="utf-8")
    loaded = load_questions(str(tmp_path / "train.parquet"))
    assert [[q.question for q in row] for row in loaded] == [
        ["Who founded Trorum?", "When was Trorum founded?", "Where is Zürich; or Bern?"],  # split at "?; " here
        ["Who founded Trorum?", "Who is Dulia?", "What is 東京?"]]
    assert loaded[0][1].answers == ("1901", "in 1901") and loaded[1][2].answers == ("Tokyo",)
    assert load_questions(str(tmp_path / "test.jsonl")) == loaded
    corpus = files["corpus_path"]
    env = SearchEnv(data="file", qa_path=str(tmp_path / "test.jsonl"), corpus_path=corpus, num_objectives=3)
    seen = set()
    for seed in range(8):
        obs, info = env.reset(seed=seed)
        seen.add(tuple(info["questions"]))
        assert obs.splitlines()[0].startswith("Question 1: Who founded Trorum?")
    assert seen == {tuple(q.question for q in row) for row in loaded}  # whole rows, never mixed
    env.reset(seed=0)
    task = env.questions
    _, reward, terminated, _, info = env.step("<answer>" + "; ".join(q.answers[0] for q in task) + "</answer>")
    assert terminated and reward == 3.0 and info["metrics"]["em"] == 1.0
    env.reset(seed=0)
    _, reward, *_ = env.step("<answer>Dulia; 1850; nowhere</answer>")
    assert reward == 1.0
    obs, info = env.reset(seed=0, options={"num_objectives": 2})  # fewer of the task's questions
    assert info["questions"] == [q.question for q in task[:2]]
    with pytest.raises(ValueError, match=r"holds 3-question tasks \(MEM1 multi-objective rows\); set num_objectives=3"):
        SearchEnv(data="file", qa_path=str(tmp_path / "test.jsonl"), corpus_path=corpus)


def test_mem1_rows_that_do_not_fit_are_named(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(_mem1_row(["Who?", "When?"], [["a"], ["b"], ["c"]])) + "\n")
    with pytest.raises(ValueError, match=r"bad.jsonl line 1: the ground truth has answers for 3 questions, but"):
        load_questions(str(path))
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text(json.dumps(_mem1_row(["Who?", "When?"], [["a"], ["b"]])) + "\n"
                     + json.dumps({"question": "q", "answer": "a"}) + "\n")
    with pytest.raises(ValueError, match=r"rows hold different numbers of questions \(\[1, 2\]\)"):
        SearchEnv(data="file", qa_path=str(mixed), corpus_path=str(path), num_objectives=2)


@pytest.mark.parametrize(
    "row, error, message",
    [
        ({"q": "x", "answer": "y"}, ValueError, r"no question key; allowed keys are 'question', 'query', 'input', "),
        ({"question": "x"}, ValueError, "no answers key; allowed keys are 'answers', 'answer', 'golden_answers'"),
        ({"question": " ", "answer": "y"}, ValueError, "the question must be a non-empty string"),
        ({"question": "x", "answers": []}, ValueError, "answers must be a non-empty string or list"),
        (["x"], TypeError, "a row must be an object"),
    ],
)
def test_bad_question_files_are_named(tmp_path, row, error, message):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(row) + "\n")
    with pytest.raises(error, match=message):
        load_questions(str(path))


def test_injected_and_http_backends(files):
    other = BM25Retriever([Passage("z", "Zeta", "Zeta is a made-up passage.")])
    env = SearchEnv(backend=other)
    env.reset(seed=0)
    obs, *_ = env.step("<search>Zeta</search>")
    assert "Doc 1(Title: Zeta) Zeta is a made-up passage." in obs
    env = SearchEnv(retriever="http://127.0.0.1:9/search", http_api="flashrag", http_timeout_s=5, http_retries=0,
                    **files)
    assert isinstance(env.retriever, HTTPRetriever) and env.retriever.api == "flashrag"
    assert (env.retriever.timeout_s, env.retriever.retries) == (5, 0)
    assert env.metadata["blocking_io"] and not SearchEnv(**files).metadata["blocking_io"]
    env.reset(seed=0)
    # A retrieval server that is down is an infrastructure failure, not the model's: the episode ends, flagged.
    obs, reward, terminated, truncated, info = env.step("<search>Trorum</search>")
    assert (obs, reward, terminated, truncated) == ("", 0.0, False, True) and not info["out_of_turns"]
    assert info["failure"].startswith("retrieval failed: ConnectionError: cannot reach the retrieval server")


def test_bm25_index_is_built_once_per_process():
    assert SearchEnv().retriever is SearchEnv(num_objectives=3).retriever
    assert SearchEnv().retriever is not SearchEnv(world_seed=1).retriever


def test_bad_config_is_named(files):
    with pytest.raises(ValueError, match=r"reward='bleu' is not allowed; choose one of \('em_sum', 'f1', 'answer_f"):
        SearchEnv(reward="bleu")
    with pytest.raises(ValueError, match="num_objectives must be an int >= 1, got 0"):
        SearchEnv(num_objectives=0)
    with pytest.raises(ValueError, match="actor_timeout_s must be a number > 0, got 0"):
        SearchEnv(actor_timeout_s=0)
    with pytest.raises(ValueError, match=r"has no option\(s\) \['turns'\]; allowed:"):
        SearchEnv(turns=3)
    with pytest.raises(ValueError, match=r"SearchEnv\(data='file'\) has no option\(s\) \['num_people'\]"):
        SearchEnv(num_people=5, **files)
    with pytest.raises(ValueError, match="data='file' needs qa_path"):
        SearchEnv(data="file")
    with pytest.raises(ValueError, match="retriever='faiss' is not allowed; give 'bm25' or an http"):
        SearchEnv(retriever="faiss")
    with pytest.raises(ValueError, match="expert_notes needs data='synthetic'"):
        SearchEnv(expert_notes=True, **files)
    with pytest.raises(ValueError, match="SearchEnv.expert_notes=1 is not allowed; it must be True or False"):
        SearchEnv(expert_notes=1)
    with pytest.raises(ValueError, match="corpus_path is only for data='file'"):
        SearchEnv(corpus_path=files["corpus_path"])
    with pytest.raises(ValueError, match="needs corpus_path"):
        SearchEnv(data="file", qa_path=files["qa_path"])
    with pytest.raises(ValueError, match="num_objectives=3 is more than the 2 questions"):
        SearchEnv(num_objectives=3, **files)
    with pytest.raises(ValueError, match="num_people=0 is not allowed"):
        SearchEnv(num_people=0)
    with pytest.raises(ValueError, match="this world has 8 distinct questions"):
        SearchEnv(num_objectives=9, num_people=1, num_companies=1, num_cities=1, two_hop_fraction=0.0)


def test_envs_in_ray_workers_share_one_retrieval_actor(ray_session):
    ray = ray_session
    config = EncyclopediaConfig()
    client = start_retrieval_server(make_world(config).passages, name="test-search-env-index")

    @ray.remote(num_cpus=0)
    def run_envs(worker):
        env = SearchEnv(num_objectives=2, retrieval_actor="test-search-env-index")
        return [play_expert(env, 100 * worker + seed)[0] for seed in range(3)]

    assert ray.get([run_envs.remote(w) for w in range(8)]) == [[2.0, 2.0, 2.0]] * 8
    ray.kill(client.actor)
