import itertools
import json
import random
import string

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import memrl_envs  # noqa: F401  (registers memrl/ ids)
from memrl_envs.chunk_stream import NO_MEMORY, ChunkStreamEnv, TokenCounter, _cut_points, chunk_documents
from memrl_envs.multihop import MultiHopConfig
from memrl_envs.multihop import make_task as multihop_task
from memrl_envs.niah import NiahConfig
from memrl_envs.niah import make_task as niah_task
from memrl.text import extract_boxed


@pytest.fixture(scope="module")
def tokenizer_path(tiny_checkpoint):
    return str(tiny_checkpoint)


def sample_tasks():
    yield multihop_task(0)
    yield multihop_task(1, MultiHopConfig(num_docs=30, facts_per_doc=3, name_length="long", hardness="hard"))
    yield niah_task(2, NiahConfig(level=1, num_docs=6))
    yield niah_task(3, NiahConfig(level=3, num_docs=8))
    yield niah_task(4, NiahConfig(level=2, num_docs=1, sentences_per_doc=30))  # one document longer than any chunk


def check_chunks(task, chunk_tokens, counter):
    chunks = chunk_documents(task.documents, chunk_tokens, counter)
    assert "".join(chunks) == task.context
    assert all(counter.count(c) <= chunk_tokens for c in chunks), [counter.count(c) for c in chunks]
    assert all(chunks)
    # A document that fits in a chunk lies inside one chunk.
    ends, pos = [], 0
    for c in chunks:
        pos += len(c)
        ends.append(pos)
    start = 0
    for doc in task.documents:
        if counter.count(doc) <= chunk_tokens:
            first = next(i for i, e in enumerate(ends) if e > start)
            assert ends[first] >= start + len(doc), (doc, chunks)
        start += len(doc) + 1
    return chunks


@pytest.mark.parametrize("chunk_tokens", [3, 7, 24, 60, 400])
def test_chunks_by_words(chunk_tokens):
    counter = TokenCounter()
    for task in sample_tasks():
        chunks = check_chunks(task, chunk_tokens, counter)
        if counter.count(task.context) <= chunk_tokens:
            assert chunks == [task.context]
    # Defaults: three or four one-fact documents (5 to 8 words) per 24-word chunk, packed greedily: a chunk ends
    # only where the next document would not fit.
    documents = multihop_task(0).documents
    chunks = chunk_documents(documents, 24, counter)
    assert [c.count("Document") for c in chunks] in ([3, 3, 3, 1], [3, 4, 3], [4, 3, 3], [3, 3, 4], [4, 4, 2])
    for chunk, after in zip(chunks, chunks[1:]):
        assert counter.count(chunk) + counter.count(after.split("\n")[0]) > 24


@pytest.mark.parametrize("chunk_tokens", [2, 9, 40, 128])
def test_chunks_by_tokenizer(tokenizer_path, chunk_tokens):
    counter = TokenCounter(tokenizer_path)
    assert counter.count("Document 1: Kema works for Dulia.") > 6  # BPE pieces, not words
    for task in sample_tasks():
        check_chunks(task, chunk_tokens, counter)


def _long_text(words: int, seed: int = 0, newline_every: int = 0) -> str:
    rng = random.Random(seed)
    vocabulary = ["the", "quick", "Zürich", "東京", "–", "1901", "don't", "x", "  ", "naïve", "Straße"]
    out = []
    for i in range(words):
        out.append(rng.choice(vocabulary))
        if newline_every and i % newline_every == newline_every - 1:
            out.append("\n")
    return " ".join(out).replace(" \n ", "\n")


@pytest.mark.parametrize("newline_every", [0, 7, 40])
@pytest.mark.parametrize("chunk_tokens", [3, 8, 24])  # 3: a CJK character is 3 byte tokens
def test_long_unicode_text_is_cut_at_word_starts_within_the_budget(tokenizer_path, newline_every, chunk_tokens):
    counter = TokenCounter(tokenizer_path)
    text = _long_text(3000, seed=chunk_tokens, newline_every=newline_every)
    assert len(text) >= 4096  # the vectorized planning
    chunks = chunk_documents(text.split("\n"), chunk_tokens, counter)
    assert "".join(chunks) == text and all(chunks)
    counts = counter.counts(chunks)
    assert max(counts) <= chunk_tokens
    if chunk_tokens >= 24:  # every word fits: every cut falls before the whitespace that starts a word, or a line
        cuts = itertools.accumulate(len(c) for c in chunks[:-1])
        assert all(text[c].isspace() or text[c - 1] == "\n" for c in cuts)
        assert sum(counts) / len(counts) > chunk_tokens / 2  # pieces are full, not a token each


def test_cut_points_are_the_same_vectorized_or_not(tokenizer_path):
    counter = TokenCounter(tokenizer_path)
    for text in (_long_text(50, 1), _long_text(900, 2, newline_every=9), "東京", " a  b\tc "):
        starts = counter.token_starts([text])[0]
        assert _cut_points(text, starts, vectorized=True) == _cut_points(text, starts, vectorized=False)


def test_envs_over_one_file_share_one_copy_of_it(tmp_path, tokenizer_path):
    path = tmp_path / "long.jsonl"
    rows = [{"question": f"q{i}", "context": _long_text(2000, i), "answers": ["x"]} for i in range(3)]
    path.write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in rows), encoding="utf-8")
    many = [ChunkStreamEnv(task="file", data_path=str(path), tokenizer_path=tokenizer_path) for _ in range(64)]
    for env in many:
        env.reset(seed=1)
    assert len({id(env.task) for env in many}) == 1  # the same task object, read from the file once
    assert len({id(env.task.documents[0]) for env in many}) == 1
    path.write_text(json.dumps({"question": "new", "context": "c", "answers": ["x"]}))  # a changed file is read anew
    assert ChunkStreamEnv(task="file", data_path=str(path)).reset(seed=0)[1]["question"] == "new"


def test_env_passes_gymnasium_checker(tmp_path):
    check_env(ChunkStreamEnv(), skip_render_check=True)
    check_env(ChunkStreamEnv(stream=False, num_docs=20, hardness="hard"), skip_render_check=True)
    check_env(ChunkStreamEnv(task="niah", level=2, chunk_tokens=40), skip_render_check=True)
    path = tmp_path / "qa.jsonl"
    path.write_text(json.dumps({"question": "q", "context": "Document 1: x\nDocument 2: y", "answers": ["x"]}) + "\n")
    check_env(ChunkStreamEnv(task="file", data_path=str(path)), skip_render_check=True)


def run_expert(env, seed):
    obs, info = env.reset(seed=seed)
    read, memories = obs, []
    while info["phase"] == "memory":
        memory = env.expert_action()
        memories.append(memory)
        # Only facts already read, never a fact from a later chunk.
        if memory != NO_MEMORY:
            assert all(f in read for f in env.task.gold_facts if f in memory)
        obs, reward, terminated, _, info = env.step(memory)
        assert (reward, terminated) == (0.0, False)
        read += obs
    assert read == env.task.context and obs == ""
    answer = env.expert_action()
    assert answer == f"\\boxed{{{env.task.answers[0]}}}"
    obs, reward, terminated, truncated, info = env.step(answer)
    assert (obs, reward, terminated, truncated) == ("", 1.0, True, False)
    assert info["metrics"] == {"em": 1.0, "f1": 1.0, "sub_em": 1.0, "sub_em_authors_code": 1.0, "format_ok": 1.0,
                               "is_equiv": 1.0, "facts_held": 1.0, "all_facts_held": 1.0, "distractors_held": 0.0}
    assert info["answers"] == list(env.task.answers) and info["phase"] == "answer"
    return memories


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"num_docs": 40, "hardness": "hard", "facts_per_doc": 2, "chunk_tokens": 30},
        {"name_length": "long", "chain": "founded", "gold_positions": (0.0, 1.0)},
        {"task": "niah", "level": 1, "chunk_tokens": 40},
        {"task": "niah", "level": 3, "num_docs": 30, "chunk_tokens": 100},
    ],
)
def test_expert_earns_full_reward(kwargs):
    env = ChunkStreamEnv(**kwargs)
    for seed in range(15):
        memories = run_expert(env, seed)
        assert memories[-1] == " ".join(env.task.gold_facts)  # a perfect memory ends holding every gold fact
        assert len(memories) == len(env.chunks)


def test_expert_memory_grows_in_reading_order():
    for positions in ((0.0, 1.0), (0.5, 1.0), (0.4, 0.4)):
        env = ChunkStreamEnv(gold_positions=positions, num_docs=10)
        memories = run_expert(env, 5)
        hop1, hop2 = env.task.gold_facts
        c1, c2 = (next(i for i, c in enumerate(env.chunks) if fact in c) for fact in (hop1, hop2))
        expected = [NO_MEMORY] * c1 + [hop1] * (c2 - c1) + [f"{hop1} {hop2}"] * (len(env.chunks) - c2)
        assert memories == expected, (positions, env.chunks)
        assert c1 == 0 if positions[0] == 0.0 else c1 > 0


@pytest.mark.parametrize("kwargs", [{}, {"task": "niah", "level": 1, "chunk_tokens": 40}])
def test_scored_memories_give_the_expert_full_marks(kwargs):
    env = ChunkStreamEnv(score_memories=True, **kwargs)
    for seed in range(5):
        env.reset(seed=seed)
        while env.phase == "memory":
            env.step(env.expert_action())
        _, reward, _, _, info = env.step(env.expert_action())
        assert info["row_rewards"] == [1.0] * (len(env.chunks) + 1) and info["metrics"]["memory_score"] == 1.0


def test_a_memory_scores_zero_where_it_drops_corrupts_or_adds_a_fact():
    env = ChunkStreamEnv(score_memories=True, gold_positions=(0.3, 0.6), num_docs=12, chunk_tokens=7)
    env.reset(seed=3)
    hop1, hop2 = env.task.gold_facts
    c1, c2 = (next(i for i, c in enumerate(env.chunks) if fact in c) for fact in (hop1, hop2))
    assert 0 < c1 < c2 < len(env.chunks) - 3
    distractor = next(d for d in env.task.documents if hop1 not in d and hop2 not in d).split(": ", 1)[1]
    # chunk c1: the new fact is missed (0); c1 + 1: the fact is written late, nothing was lost (1); c2: both held
    # (1); c2 + 1: a distractor copied in (0); c2 + 2: the distractor kept, a held name corrupted (0); c2 + 3: the
    # distractor kept, nothing else lost (1: it was scored where it was written); after that: nothing held is lost,
    # nothing else is added (1), though the corrupted fact is gone for good.
    broken = hop1.replace(hop1.split()[0], hop1.split()[0] + "x", 1)
    plan = {c1: NO_MEMORY, c1 + 1: hop1, c2: f"{hop1} {hop2}", c2 + 1: f"{hop1} {hop2} {distractor}",
            c2 + 2: f"{broken} {hop2} {distractor}", c2 + 3: f"{hop2} {distractor}"}
    want = {c1: 0.0, c2 + 1: 0.0, c2 + 2: 0.0}
    for k in range(len(env.chunks)):
        env.step(plan.get(k, env.expert_action() if k < c2 + 2 else hop2))
    _, reward, _, _, info = env.step(f"\\boxed{{{env.task.answers[0]}}}")
    assert info["row_rewards"] == [want.get(k, 1.0) for k in range(len(env.chunks))] + [1.0]
    assert info["metrics"]["memory_score"] == pytest.approx(1 - 3 / len(env.chunks))


@pytest.mark.parametrize("stream", [True, False])
def test_answer_reports_the_facts_it_rested_on(stream):
    # What the answer was given from: the last memory when streaming, the answer's own quotes without it.
    env = ChunkStreamEnv(stream=stream, num_docs=12)
    env.reset(seed=6)
    hop1, hop2 = env.task.gold_facts
    others = [d.split(": ", 1)[1] for d in env.task.documents if hop1 not in d and hop2 not in d]
    boxed = f"\\boxed{{{env.task.answers[0]}}}"
    held = f"{hop1} {others[0]} {others[3]}"  # hop 2 lost (or never quoted), two distractors written
    if stream:
        while env.phase == "memory":
            env.step(held)
        _, reward, _, _, info = env.step(boxed)
    else:
        _, reward, _, _, info = env.step(f"Evidence: {held} {boxed}")
    assert reward == 1.0  # the answer itself is right
    assert {k: info["metrics"][k] for k in ("facts_held", "all_facts_held", "distractors_held")} == {
        "facts_held": 0.5, "all_facts_held": 0.0, "distractors_held": 2.0}
    env.reset(seed=6)
    while env.phase == "memory":
        env.step(env.expert_action())
    _, _, _, _, info = env.step(env.expert_action())
    assert (info["metrics"]["facts_held"], info["metrics"]["all_facts_held"],
            info["metrics"]["distractors_held"]) == (1.0, 1.0, 0.0)


def test_expert_with_tokenizer_chunks(tokenizer_path):
    env = ChunkStreamEnv(chunk_tokens=20, tokenizer_path=tokenizer_path, num_docs=12)
    for seed in range(5):
        run_expert(env, seed)
        assert all(env.counter.count(c) <= 20 for c in env.chunks)


def test_full_context_mode():
    env = ChunkStreamEnv(stream=False, num_docs=20)
    obs, info = env.reset(seed=4)
    assert obs == env.task.context
    assert info == {"question": env.task.question, "phase": "answer", "chunk_index": 0, "num_chunks": 1}
    # The full-context reader quotes its evidence (the gold facts, in reading order) before the boxed answer.
    hop1, hop2 = env.task.gold_facts
    assert env.task.context.index(hop1) < env.task.context.index(hop2)
    assert env.expert_action() == f"Evidence: {hop1} {hop2} \\boxed{{{env.task.answers[0]}}}"
    # MemAgent's reward (is_equiv) counts the article that SQuAD's EM drops; reward="em" gives it full marks.
    _, reward, terminated, _, info = env.step(f"I think \\boxed{{The {env.task.answers[0].upper()}}}.")
    assert (reward, terminated, info["metrics"]["em"]) == (0.0, True, 1.0)
    env = ChunkStreamEnv(stream=False, num_docs=20, reward="em")
    env.reset(seed=4)
    _, reward, _, _, info = env.step(f"I think \\boxed{{The {env.task.answers[0].upper()}}}.")
    assert (reward, info["metrics"]["is_equiv"]) == (1.0, 0.0)
    with pytest.raises(ValueError, match="reward='f1' is not allowed"):
        ChunkStreamEnv(reward="f1")


def test_full_context_expert_quotes_the_documents_own_tokens(tokenizer_path):
    # Quoting is copying only if each quoted fact has the tokens it has in the document; a fact opening the reply
    # would be tokenized without its leading space.
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tokenizer_path)
    env = ChunkStreamEnv(stream=False, num_docs=10)

    def ids(text):
        return tok(text, add_special_tokens=False)["input_ids"]

    def contains(seq, run):
        return any(seq[i:i + len(run)] == run for i in range(len(seq) - len(run) + 1))

    for seed in range(5):
        env.reset(seed=seed)
        reply, document = ids(env.expert_action()), ids(env.task.context)
        for fact in env.task.gold_facts:
            assert contains(document, ids(" " + fact)) and contains(reply, ids(" " + fact))
        first = env.task.gold_facts[0]
        assert ids(first)[0] != ids(" " + first)[0]  # opening the reply, it would have been spelled differently


def play_to_answer(env, seed):
    env.reset(seed=seed)
    while env.phase == "memory":
        env.step("memory")


def test_wrong_and_unformatted_answers_score_zero():
    env = ChunkStreamEnv()
    play_to_answer(env, 0)
    _, reward, _, _, info = env.step("\\boxed{Nowhere}")
    assert reward == 0.0 and info["metrics"] == {"em": 0.0, "f1": 0.0, "sub_em": 0.0, "sub_em_authors_code": 0.0,
                                                  "format_ok": 1.0, "is_equiv": 0.0, "facts_held": 0.0,
                                                  "all_facts_held": 0.0, "distractors_held": 0.0}
    play_to_answer(env, 0)
    answer = env.task.answers[0]
    _, reward, _, _, info = env.step(f"The answer is {answer}.")  # right city, no box
    assert reward == 0.0 and info["metrics"]["format_ok"] == 0.0 and info["metrics"]["sub_em"] == 0.0
    play_to_answer(env, 0)
    _, reward, _, _, info = env.step(f"\\boxed{{{answer} Bay}}")
    assert reward == 0.0 and info["metrics"]["sub_em"] == 1.0 and info["metrics"]["f1"] == pytest.approx(2 / 3)


def test_fuzzed_actions_never_crash():
    rng = random.Random(0)
    alphabet = string.printable + "é\x00\x07{}\\ü漢"
    specials = [None, 42, "", "\x00\x01", "a" * 10**6, "\\boxed{", "\\boxed{}", "}}{{\\boxed{x}}", "é" * 5000]
    env = ChunkStreamEnv(num_docs=12, max_action_chars=512)
    for episode in range(40):
        obs, info = env.reset(seed=episode)
        terminated = False
        while not terminated:
            if rng.random() < 0.3:
                action = rng.choice(specials)
            else:
                action = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 300)))
                if rng.random() < 0.3:
                    action += "\\boxed{" + "".join(rng.choice(alphabet) for _ in range(5)) + "}"
            obs, reward, terminated, truncated, info = env.step(action)
            assert env.observation_space.contains(obs) and not truncated
        metrics = info["metrics"]
        cleaned = "" if action is None else "".join(ch for ch in str(action) if ch in string.printable)[:512]
        assert metrics["format_ok"] == float(extract_boxed(cleaned) is not None)
        assert reward == metrics["em"] and all(0.0 <= v <= 1.0 for v in metrics.values())


def test_info_protocol_and_step_after_end():
    env = ChunkStreamEnv(num_docs=10)
    _, info = env.reset(seed=1)
    assert info == {"question": env.task.question, "phase": "memory", "chunk_index": 0, "num_chunks": 4}
    for i in range(1, 5):
        _, _, _, _, info = env.step("m")
        assert info["chunk_index"] == i and info["phase"] == ("answer" if i == 4 else "memory")
    env.step("\\boxed{x}")
    with pytest.raises(RuntimeError, match="after the episode ended"):
        env.step("x")
    with pytest.raises(RuntimeError, match="needs a running episode"):
        env.expert_action()


def test_seeds_lengths_and_registration():
    a = gym.make("memrl/ChunkStream-v0", num_docs=10)
    b = gym.make("memrl/ChunkStream-v0", num_docs=80)
    qa, qb = a.reset(seed=9)[1]["question"], b.reset(seed=9)[1]["question"]
    assert qa == qb and b.unwrapped.task.gold_facts == a.unwrapped.task.gold_facts
    assert b.unwrapped.task.documents != a.unwrapped.task.documents
    shifted = ChunkStreamEnv(seed_offset=100)
    assert shifted.reset(seed=0)[1]["question"] == ChunkStreamEnv().reset(seed=100)[1]["question"]
    assert len({ChunkStreamEnv().reset(seed=s)[1]["question"] for s in range(20)}) > 15


def test_file_task(tmp_path):
    rows = [
        {"question": f"q{i}", "context": f"Document 1: fact {i}\nDocument 2: other", "answer": f"a{i}"}
        for i in range(3)
    ]
    path = tmp_path / "hqa.json"
    path.write_text(json.dumps(rows))
    env = ChunkStreamEnv(task="file", data_path=str(path), chunk_tokens=4)
    obs, info = env.reset(seed=4)  # seed % rows picks row 1
    assert info["question"] == "q1" and obs == "Document 1: fact 1\n"
    with pytest.raises(RuntimeError, match="task='file' has no gold-fact labels"):
        env.expert_action()
    play_to_answer(env, 4)
    assert env.expert_action() == "\\boxed{a1}"
    assert env.step("\\boxed{a1}")[1] == 1.0
    # Unlabelled, the full-context reader's expert has no evidence to quote: the answer alone.
    whole = ChunkStreamEnv(task="file", data_path=str(path), stream=False)
    whole.reset(seed=4)
    assert whole.expert_action() == "\\boxed{a1}"


def test_bad_config_is_named(tmp_path):
    with pytest.raises(ValueError, match="task='qa' is not allowed"):
        ChunkStreamEnv(task="qa")
    with pytest.raises(ValueError, match="chunk_tokens must be an int >= 1"):
        ChunkStreamEnv(chunk_tokens=0)
    with pytest.raises(ValueError, match=r"task='multihop' has no option\(s\) \['level'\]; allowed:"):
        ChunkStreamEnv(level=2)
    with pytest.raises(ValueError, match="hardness='medium' is not allowed"):
        ChunkStreamEnv(hardness="medium")
    with pytest.raises(ValueError, match="task='file' takes exactly one option, data_path"):
        ChunkStreamEnv(task="file")
    with pytest.raises(ValueError, match="score_memories=True needs gold-fact labels, which task='file' lacks"):
        ChunkStreamEnv(task="file", score_memories=True, data_path=str(tmp_path / "rows.jsonl"))
