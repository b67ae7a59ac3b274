"""memrl/MemoryBank-v0: Memory-R1's manager prompt and mem0's events on the bank, the synthetic conversations, the
manager and answer episodes, the answerer over HTTP."""

import json
import random
import re
from http.server import BaseHTTPRequestHandler

import gymnasium as gym
import pytest

import memrl_envs  # noqa: F401  (registers the envs)
from memrl_envs.memory_bank import (
    ANSWER_MARK,
    MANAGER_PROMPT,
    BankGeneratorConfig,
    MemoryBank,
    MemoryBankEnv,
    apply_events,
    answer_prompt,
    make_bank_task,
    manager_prompt,
    parse_answer,
    parse_events,
    read_fact,
    shown_entries,
    strip_fence,
    when,
)


class _Reader(BaseHTTPRequestHandler):
    """An OpenAI-compatible endpoint whose 'model' answers each question with the value of the first memory line
    (in the order shown) that states a fact about the question's person: a bank holding a stale fact beside the new
    one can answer wrong."""

    calls = []

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).calls.append(body)
        prompt = body["messages"][0]["content"]
        question = prompt.rsplit("Question: ", 1)[1]
        person = re.search(r"does (.+?) (live|work)", question)
        kind = "lives" if person.group(2) == "live" else "works"
        answer = "unknown"
        for line in prompt.splitlines():
            fact = read_fact(line.split(": ", 1)[1]) if line.startswith("- ") and ": " in line else None
            if fact and fact[:2] == (kind, person.group(1)):
                answer = fact[2]
                break
        data = json.dumps({"choices": [{"message": {"role": "assistant", "content": f"{ANSWER_MARK} {answer}"}}]})
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data.encode())))
        self.end_headers()
        self.wfile.write(data.encode())

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def reader_url(serve_http):
    return serve_http(_Reader) + "/v1"


def _bank(*texts: str) -> MemoryBank:
    bank = MemoryBank()
    for text in texts:
        bank.add(text, "9:00 am on 1 May, 2023")
    return bank


def test_the_manager_sees_the_paper_prompt_the_shown_entries_under_temporary_ids_and_the_facts():
    bank = _bank("Kema lives in Lyon", "Ayo works for Quovex", "Kema works for Brindle")
    shown = shown_entries(bank, ["Kema lives in Paris"], top_k=2)
    assert shown == ["m0", "m2"]  # the two entries about Kema, best first
    prompt = manager_prompt(bank, shown, ["Kema lives in Paris"])
    assert prompt.startswith(MANAGER_PROMPT)
    # As mem0 writes them: Python reprs of the entries (ids "0", "1") and of the facts.
    shown_repr = "[{'id': '0', 'text': 'Kema lives in Lyon'}, {'id': '1', 'text': 'Kema works for Brindle'}]"
    assert f"```\n{shown_repr}\n```" in prompt
    assert "```\n['Kema lives in Paris']\n```" in prompt
    assert prompt.endswith("Do not return anything except the JSON format.")
    assert "Current memory is empty." in manager_prompt(MemoryBank(), [], ["Kema lives in Paris"])
    # Each fact's hits are pooled without repeats, in fact order.
    assert shown_entries(bank, ["Kema lives in Paris", "Ayo got a dog", "Kema lives in Rome"], top_k=1) == ["m0", "m1"]


@pytest.mark.parametrize("reply, items", [
    ('{"memory": [{"id": "0", "text": "a", "event": "NONE"}]}', [{"id": "0", "text": "a", "event": "NONE"}]),
    ('```json\n{"memory": []}\n```', []),
    ('  ```\n{"memory": [1]}\n```  ', [1]),
    ('{"facts": []}', []),
    ("I will add it.", None),
    ('[{"id": "0"}]', None),
    ('{"memory": "none"}', None),
    ('Sure: ```json\n{"memory": []}\n```', None),  # a fence that does not hold the whole reply is not taken off
])
def test_replies_are_read_as_mem0_reads_them(reply, items):
    assert parse_events(reply) == items


def _mem0_apply(store: dict, order: list, items, temp: dict, timestamp: str) -> None:
    """mem0's Memory.add loop over the manager's items (mem0/memory/main.py), restated over a dict store: each item
    in a try of its own; an empty text is skipped; UPDATE and DELETE index temp_uuid_mapping (a KeyError skips
    the item), an UPDATE or DELETE of a removed entry fails in the vector store (skipped)."""
    for resp in items:
        try:
            action_text = resp.get("text")
            if not action_text:
                continue
            event_type = resp.get("event")
            if event_type == "ADD":
                memory_id = f"m{len(order)}"
                order.append(memory_id)
                store[memory_id] = (action_text, timestamp)
            elif event_type == "UPDATE":
                memory_id = temp[resp.get("id")]
                if memory_id not in store:
                    raise KeyError(memory_id)
                store[memory_id] = (action_text, timestamp)
            elif event_type == "DELETE":
                memory_id = temp[resp.get("id")]
                del store[memory_id]
        except Exception:
            continue


def test_events_change_the_bank_as_mem0_applies_them_over_many_random_replies():
    rng = random.Random(0)
    texts = ["Kema lives in Lyon", "Ayo works for Quovex", "", None, "Kema lives in Oslo"]
    events = ["ADD", "UPDATE", "DELETE", "NONE", "NOOP", None, "add"]
    ids = ["0", "1", "2", "7", None, 1, "x"]
    for case in range(500):
        bank = _bank(*(f"fact {k}" for k in range(rng.randrange(0, 4))))
        shown = [i for i in bank.entries if rng.random() < 0.8]
        items = []
        for _ in range(rng.randrange(0, 5)):
            item = {"id": rng.choice(ids), "text": rng.choice(texts), "event": rng.choice(events)}
            items.append({k: v for k, v in item.items() if rng.random() < 0.9})
        store = {k: (e.text, e.timestamp) for k, e in bank.entries.items()}
        order = list(bank.entries)
        _mem0_apply(store, order, items, {str(k): i for k, i in enumerate(shown)}, "later")
        counts = apply_events(bank, items, shown, "later")
        assert {k: (e.text, e.timestamp) for k, e in bank.entries.items()} == store, (case, items)
        assert sum(counts.values()) == len(items)


def test_each_event_is_counted_and_an_id_not_shown_changes_nothing():
    bank = _bank("Kema lives in Lyon", "Ayo works for Quovex", "Ayo lives in Oslo")
    shown = ["m0", "m2"]  # "0" is Kema's home, "1" Ayo's
    counts = apply_events(bank, [
        {"id": "0", "text": "Kema lives in Paris", "event": "UPDATE", "old_memory": "Kema lives in Lyon"},
        {"id": "1", "text": "Ayo lives in Oslo", "event": "DELETE"},
        {"id": "2", "text": "Ayo works for Brindle", "event": "UPDATE"},  # id "2" was not shown
        {"id": "1", "text": "Ayo lives in Rome", "event": "UPDATE"},  # deleted above
        {"id": "3", "text": "Tomi works for Vantor", "event": "ADD"},
        {"id": "0", "text": "", "event": "DELETE"},  # no text: skipped, as mem0 skips it
        {"id": "0", "text": "Kema lives in Paris", "event": "NOOP"},
    ], shown, "later")
    assert counts == {"adds": 1, "updates": 1, "deletes": 1, "nones": 1, "skipped": 3}
    assert {k: e.text for k, e in bank.entries.items()} == {
        "m0": "Kema lives in Paris", "m1": "Ayo works for Quovex", "m3": "Tomi works for Vantor"}
    assert bank.entries["m0"].timestamp == "later" and bank.entries["m1"].timestamp != "later"


def test_the_answer_agent_sees_each_speakers_top_entries_and_answers_after_the_last_mark():
    banks = {"John": _bank("John lives in Lyon", "John works for Quovex"), "Maria": _bank("Maria lives in Oslo")}
    prompt = answer_prompt(banks, "In which city does John live?", top_k=1)
    assert "Memories for user John:\n- 9:00 am on 1 May, 2023: John lives in Lyon\n\nMemories for user Maria:" in prompt
    assert "John works for Quovex" not in prompt and prompt.endswith("Question: In which city does John live?")
    assert "10. IMPORTANT: Output the final answer after **Answer:**" in prompt
    assert parse_answer("**Memories selected as relevant:**\n\u2022 x\n**Answer:** Lyon ") == "Lyon"
    assert parse_answer("**Answer:** Oslo\n**Answer:** Lyon") == "Lyon"
    assert parse_answer("Lyon") == "Lyon"
    assert strip_fence("```\nx\n```") == "x"


def test_conversations_change_facts_later_and_ask_for_what_holds_at_the_end():
    config = BankGeneratorConfig(num_people=3, num_turns=6, change_share=0.5, num_questions=3)
    for seed in range(50):
        task = make_bank_task(seed, config)
        assert task == make_bank_task(seed, config)
        told = {}  # (kind, person) -> values in the order told
        for turn in task.turns:
            for fact in turn.facts:
                kind, person, value = read_fact(fact)
                told.setdefault((kind, person), []).append(value)
                assert person in turn.text and value in turn.text
        for question, (gold,) in task.questions:
            kind = "lives" if "live?" in question else "works"
            person = re.search(r"does (.+?) (live|work)", question).group(1)
            assert told[(kind, person)][-1] == gold
        changed = [values for values in told.values() if len(values) > 1]
        assert len(task.stale) == len(changed) and all(len(v) == 2 for v in changed)
        # The questions ask first for the facts that changed.
        assert len(changed) == 0 or any(len(told[(("lives" if "live?" in q else "works"),
                                                   re.search(r"does (.+?) (live|work)", q).group(1))]) > 1
                                        for q, _ in task.questions)
    with pytest.raises(ValueError, match="num_questions=7 is more than the 6 facts of 3 people"):
        BankGeneratorConfig(num_questions=7)


def _run(env, seed: int, reply=None):
    obs, info = env.reset(seed=seed)
    calls, done = 0, False
    while not done:
        action = reply(obs, info) if reply else env.unwrapped.expert_action()
        obs, reward, terminated, truncated, info = env.step(action)
        calls += 1
        done = terminated or truncated
    return reward, info, calls


def test_a_manager_that_updates_keeps_no_stale_fact_and_the_answerer_scores_it(reader_url):
    options = {"num_people": 3, "num_turns": 5, "change_share": 0.5, "num_questions": 2, "answerer": reader_url}
    updating, adding = [], []
    for seed in range(8):
        reward, info, calls = _run(gym.make("memrl/MemoryBank-v0", **options), seed)
        assert info["phase"] == "done" and info["row_rewards"] == [reward] * calls
        assert info["metrics"]["stale_entries"] == 0 and info["metrics"]["parse_failures"] == 0
        assert reward == info["metrics"]["em"] == 1.0  # the reader finds each current fact
        updating.append(reward)
        reward, info, _ = _run(gym.make("memrl/MemoryBank-v0", expert_update_rate=0.0, **options), seed)
        assert info["metrics"]["updates"] == 0
        assert info["metrics"]["stale_entries"] == len(make_bank_task(seed, BankGeneratorConfig(
            num_people=3, num_turns=5, change_share=0.5, num_questions=2)).stale)
        adding.append(reward)
    # The reader takes the first fact it sees about the person: a stale one beside the new one costs answers.
    assert sum(adding) < sum(updating)
    body = _Reader.calls[-1]
    assert body["temperature"] == 0.0 and body["max_tokens"] == 2048 and len(body["messages"]) == 1


def test_a_reply_that_is_not_the_json_changes_nothing_and_is_counted(reader_url):
    env = MemoryBankEnv(num_turns=3, small_talk_share=0.0, answerer=reader_url)
    reward, info, calls = _run(env, 0, reply=lambda obs, info: "I will remember that.")
    assert calls == 3 and info["metrics"]["parse_failures"] == 3 and info["metrics"]["entries"] == 0
    assert reward == 0.0 and info["answers"] == ["unknown"] * 2


def test_without_an_answerer_the_episode_ends_unscored_and_a_dead_answerer_fails_it(tmp_path):
    reward, info, _ = _run(MemoryBankEnv(num_turns=3, dump_dir=str(tmp_path)), 1)
    assert reward == 0.0 and "em" not in info["metrics"] and info["answers"] == []
    assert json.loads((tmp_path / "memory-r1-1.json").read_text())["banks"] == info["banks"]
    env = MemoryBankEnv(num_turns=2, small_talk_share=0.0, answerer="http://127.0.0.1:9/v1", answerer_retries=0,
                        answerer_timeout_s=2)
    _, info, _ = _run(env, 0)
    assert "127.0.0.1:9" in info["failure"] and "row_rewards" not in info


def test_the_answer_agent_answers_one_question_from_the_expert_bank_or_a_managers(tmp_path, reader_url):
    env = MemoryBankEnv(role="answer", num_questions=2)
    obs, info = env.reset(seed=3)  # task 3, the question its seed draws
    index = random.Random("memory-r1-question-3").randrange(2)
    question, (gold,) = make_bank_task(3).questions[index]
    assert obs.endswith(f"Question: {question}") and info["phase"] == "answer"
    expert = env.expert_action()
    assert expert.startswith("**Memories selected as relevant:**\n\u2022 ") and expert.endswith(f"**Answer:** {gold}")
    _, reward, terminated, _, info = env.step(expert)
    assert terminated and reward == 1.0 and info["row_rewards"] == [1.0] and info["answers"] == [gold]
    env.reset(seed=3)
    assert env.step("**Answer:** Atlantis")[1] == 0.0
    # A manager's banks, dumped by its run: the answer episodes read them.
    _run(MemoryBankEnv(num_turns=6, answerer=reader_url, dump_dir=str(tmp_path), expert_update_rate=0.0), 3)
    env = MemoryBankEnv(role="answer", banks_dir=str(tmp_path))
    env.reset(seed=3)
    saved = json.loads((tmp_path / "memory-r1-3.json").read_text())["banks"]
    assert {speaker: bank.to_dict() for speaker, bank in env.banks.items()} == saved
    with pytest.raises(ValueError, match="has no bank of task memory-r1-4"):
        env.reset(seed=4)


def test_training_and_heldout_seeds_each_meet_every_question():
    env = MemoryBankEnv(role="answer", num_questions=2)
    for parity in (0, 1):
        asked = set()
        for seed in range(parity, 40, 2):
            obs, _ = env.reset(seed=seed)
            asked.add(make_bank_task(seed).questions.index(next(q for q in make_bank_task(seed).questions
                                                                if obs.endswith(q[0]))))
        assert asked == {0, 1}


def test_the_teacher_answers_from_the_latest_entry_or_with_the_recency_rate_from_the_first_shown():
    # A manager that never updates keeps the old fact beside the new one: the first shown is the stale one.
    stale = [MemoryBankEnv(role="answer", expert_update_rate=0.0, expert_recency_rate=rate) for rate in (1.0, 0.0)]
    golds, firsts = 0, 0
    for seed in range(30):
        for env in stale:
            env.reset(seed=seed)
        recent, first = (env.expert_action() for env in stale)
        gold = stale[0].task.questions[stale[0]._question][1][0]
        golds += recent.endswith(f"**Answer:** {gold}")
        firsts += first.endswith(f"**Answer:** {gold}")
    assert golds == 30 and firsts < 5  # the questions ask for changed facts, so the first shown is mostly stale
    assert when("11:05 pm on 3 January, 2024") > when("9:59 am on 28 December, 2023")
    assert make_bank_task(5).turns[-1].timestamp.endswith(("2023", "2024"))


def test_the_brief_prompts_keep_the_data_and_drop_the_instructions():
    env = MemoryBankEnv(prompt="brief")
    obs, _ = env.reset(seed=0)
    # The facts come first, then the entries: a small manager copies a value from where it first meets the fact.
    facts = repr(list(env.task.turns[env._turn].facts))
    assert obs.startswith("The new retrieved facts") and obs.endswith("Current memory is empty.")
    assert obs.index(facts) < obs.index("Current memory")
    assert "You are a smart memory manager" not in obs and "JSON structure" not in obs
    env = MemoryBankEnv(role="answer", prompt="brief")
    obs, _ = env.reset(seed=0)
    # The question is the asked fact's opening, in the entries' words; the expert's selected memory is the entry's
    # text alone, then the answer: both copies of what the prompt holds.
    kind, person = env.task.asked[env._question]
    opening = {"lives": f"{person} lives in", "works": f"{person} works for"}[kind]
    assert obs.startswith("Memories for user User:\n- ") and obs.endswith(f"\n\nQuestion:\n\u2022 {opening}")
    gold = env.task.questions[env._question][1][0]
    assert env.expert_action() == f"**Memories selected as relevant:**\n\u2022 {opening} {gold}\n**Answer:** {gold}"
    assert f": {opening} " in obs.split("\n")[1]  # BM25 shows an entry of the asked fact first


@pytest.mark.parametrize("options, message", [
    ({"role": "reader"}, "role must be one of"),
    ({"role": "answer", "answerer": "actor:a"}, "answerer must be None"),
    ({"banks_dir": "/tmp/x"}, "banks_dir gives role='answer' its banks"),
    ({"answerer": "ftp://x"}, "answerer must be an http"),
    ({"manager_top_k": 0}, "manager_top_k must be an int >= 1"),
    ({"expert_update_rate": 1.5}, "expert_update_rate must be a number in"),
    ({"expert_recency_rate": -0.1}, "expert_recency_rate must be a number in"),
    ({"prompt": "short"}, r"prompt must be one of \('paper', 'brief'\)"),
    ({"top_k": 3}, r"no option\(s\) \['top_k'\]"),
    ({"num_turns": "6"}, "num_turns='6' is not allowed"),
])
def test_bad_options_are_named(options, message):
    with pytest.raises(ValueError, match=message):
        MemoryBankEnv.check_options(options)


def test_both_roles_give_warm_start_rows_through_the_last_observation_workflow(tiny_checkpoint):
    from transformers import AutoTokenizer

    from memrl.algorithms.sft import expert_episodes

    tokenizer = AutoTokenizer.from_pretrained(tiny_checkpoint)
    managed = expert_episodes("memrl/MemoryBank-v0", {"num_turns": 4}, "last_observation", {}, tokenizer, 2, seed=0)
    for trajectory, seed in zip(managed, (0, 1)):
        task = make_bank_task(seed, BankGeneratorConfig(num_turns=4))
        assert len(trajectory.conversations) == sum(bool(turn.facts) for turn in task.turns)
        first = tokenizer.decode(trajectory.conversations[0].prompt_ids)
        assert "Current memory is empty." in first and repr(list(next(t.facts for t in task.turns if t.facts))) in first
        assert '"event": "ADD"' in tokenizer.decode(trajectory.conversations[0].response_ids)
    (answered,) = expert_episodes("memrl/MemoryBank-v0", {"role": "answer"}, "last_observation", {}, tokenizer, 1,
                                  seed=0)
    assert answered.reward == 1.0 and len(answered.conversations) == 1
