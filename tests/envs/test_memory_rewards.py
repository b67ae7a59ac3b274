import pytest

from memrl_envs.memory_rewards import (
    compression_reward,
    content_reward,
    content_valid,
    metric_for,
    row_rewards,
    score_answer,
    tool_reward,
)
from memrl_envs.memory_store import MemoryStore, ToolCall, execute


def _calls(store, *calls, variant="paper"):
    return [execute(store, ToolCall(name, args), variant) for name, args in calls]


def test_answers_are_scored_by_their_sources_metric():
    assert metric_for("squad") == metric_for("hotpotqa") == "substring"
    assert metric_for("accurate_retrieval") == metric_for("ruler_qa1_197K") == "normalized"
    assert metric_for("lme_train") == metric_for("longmemeval_s*") == "judge"
    assert metric_for("infbench_sum_eng_shots2") == "keywords"
    assert metric_for("pubmed-rct") == metric_for("icl_banking77_5900shot_balance") == "label"
    assert metric_for("booksum") == metric_for("long_range_understanding") == "keywords"
    assert metric_for("perltqa") == "ratio"
    assert score_answer("He works for Quovex now.", ["quovex"], "squad") == 1.0
    assert score_answer("He works for Quovex now.", ["Plixon", "Quovex"], "squad") == 1.0
    assert score_answer("He works for Quovex now.", ["Plixon", "Quovex"], "squad", variant="authors_code") == 0.0
    assert score_answer("The label is \\boxed{3}.", ["3"], "test_time_learning") == 1.0
    assert score_answer("\\boxed{3 or 4}", ["3"], "test_time_learning") == 0.0  # one number, nothing else
    assert score_answer("3", ["3"], "pubmed-rct") == 1.0 and score_answer("\\boxed{2}", ["3"], "pubmed-rct") == 0.0
    assert score_answer("Kema went to Colton and met Pasis.", ["Kema, Colton, Pasis, Gorham"], "booksum") == 0.75
    assert score_answer("tea and cake", ["tea; cake; jam"], "perltqa") == pytest.approx(2 / 3)
    assert score_answer("It was the Marsh Lights!", ["marsh lights"], "ruler_qa1_197K") == 1.0
    assert score_answer("Kema met Pasis.", ["Kema", "river"], "infbench_sum_eng_shots2") == 0.5
    assert score_answer("<think>Quovex?</think>No idea.", ["Quovex"], "squad") == 0.0
    assert score_answer("<think>Quovex is it", ["Quovex"], "squad") == 0.0  # the answer never came
    with pytest.raises(ValueError, match="variant"):
        score_answer("x", ["x"], "squad", variant="mine")


def test_tool_reward_is_the_share_of_calls_that_count_and_skipped_inserts_follow_the_variant():
    calls = (("new_memory_insert", {"memory_type": "semantic_memory", "content": "Kema works for Quovex."}),
             ("new_memory_insert", {"memory_type": "semantic_memory", "content": "Kema works for Quovex."}),
             ("memory_delete", {"memory_type": "semantic_memory", "memory_id": "zzzz"}),
             ("no_such_tool", {}))
    paper = _calls(MemoryStore(), *calls)
    assert [r.ok for r in paper] == [True, True, False, False] and paper[1].skipped
    assert tool_reward(paper) == 0.5  # the skipped insert executed
    authors = _calls(MemoryStore(), *calls, variant="authors_code")
    assert [r.ok for r in authors] == [True, True, True, False]  # their delete of a missing id runs
    assert tool_reward(authors) == 0.5  # ... and their skipped insert counts as failed
    assert tool_reward([]) == 0.0


def test_content_rules_per_memory_type():
    assert content_valid("core", "The user talks about friends who changed jobs and cities.")
    assert not content_valid("core", "This is the core memory of the user.")
    assert not content_valid("core", "Here we save the summary.")
    assert not content_valid("core", "Empty")
    assert content_valid("semantic", "Kema works for Quovex.")
    assert not content_valid("semantic", "Quovex")
    assert not content_valid("semantic", "At Day 2 09:15, the user met Kema.")  # a dated event is episodic
    assert content_valid("episodic", "At Day 2 09:15, the user met Kema.")
    assert content_valid("episodic", "On Monday the user moved to Colton.")
    assert not content_valid("episodic", "The user met Kema.")  # no time


def test_content_reward_judges_every_write_over_all_calls():
    store = MemoryStore()
    core = {"memory_type": "core_memory", "new_content": "The user shares news of friends."}
    results = _calls(store, ("memory_update", core),
                     ("new_memory_insert", {"memory_type": "episodic_memory", "content": "Kema moved to Colton."}),
                     ("new_memory_insert", {"memory_type": "semantic_memory", "content": "Kema works for Quovex."}),
                     ("memory_delete", {"memory_type": "core_memory"}))
    assert content_reward(results) == 0.5  # core and semantic valid; the undated event and the delete are not
    assert content_reward(results, judge=lambda kind, content: True) == 0.75  # a delete never counts
    assert content_reward([]) == 0.0
    fact = {"memory_type": "semantic_memory", "content": "Kema works for Quovex."}
    twice = _calls(MemoryStore(), ("new_memory_insert", fact), ("new_memory_insert", fact))
    assert twice[1].skipped and content_reward(twice) == 1.0  # judged though skipped
    unknown = _calls(MemoryStore(), ("memory_update", {"memory_type": "semantic_memory", "memory_id": "zzzz",
                                                       "new_content": "Kema works for Plixon."}))
    assert not unknown[0].ok and content_reward(unknown) == 1.0  # judged though it failed
    seen = []
    loose = _calls(MemoryStore(), ("new_memory_insert", {"memory_type": "semantic", "content": "a b c"}),
                   ("new_memory_insert", {"memory_type": "Semantic_memory", "content": "d e f"}),
                   ("new_memory_insert", {"memory_type": "semantic_memory", "content": "   "}),
                   ("new_memory_insert", {"memory_type": "semantic_memory", "content": 12}))
    assert content_reward(loose, judge=lambda kind, content: seen.append((kind, content)) or True) == 0.25
    assert seen == [("semantic", "a b c")]  # "_memory" removed; a capital, a blank or a number is not judged


def test_compression_and_the_row_rewards_split_shared_from_per_row_parts():
    assert compression_reward(25, 100) == 0.75
    assert compression_reward(150, 100) == -0.5
    with pytest.raises(ValueError):
        compression_reward(1, 0)
    rows = row_rewards(accuracy=0.5, compression=0.8, tool=[1.0, 0.5, 0.0], content=[1.0, 0.0, 0.5])
    shared = 0.5 + 0.05 * 0.8
    assert rows == pytest.approx([shared + 1.0 + 0.1, shared + 0.5, shared + 0.05])
    rows = row_rewards(0.5, 0.8, [1.0], [1.0], beta=0.2, gamma=0.0)
    assert rows == pytest.approx([0.5 + 0.16 + 1.0])
    with pytest.raises(ValueError, match="one r_tool and one r_content"):
        row_rewards(0.0, 0.0, [1.0], [])
