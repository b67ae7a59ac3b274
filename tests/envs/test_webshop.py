from dataclasses import replace

import gymnasium
import numpy as np
import pytest

import memrl_envs  # noqa: F401  (registers memrl/WebShop-v0)
from memrl_envs.webshop import SEP, WebShopEnv, parse_action

SMALL = {"num_products": 60, "goals_per_product": 2, "test_goals": 20, "val_goals": 20}


def _env(**kwargs) -> WebShopEnv:
    return gymnasium.make("memrl/WebShop-v0", **{**SMALL, **kwargs}).unwrapped


def _run_expert(env, seed):
    env.reset(seed=seed)
    while True:
        obs, reward, terminated, truncated, info = env.step(env.expert_action())
        if terminated or truncated:
            return reward, info


def test_the_scripted_expert_buys_the_top_hit_with_the_goals_options():
    env = _env()
    results = []
    for seed in range(40):
        env.reset(seed=seed)
        env.step(env.expert_action())  # the search
        top = env._shown()[0]
        while True:
            action = env.expert_action()
            obs, reward, terminated, truncated, info = env.step(action)
            if terminated or truncated:
                break
        results.append((reward, info))
        assert info["bought"] == top.asin  # what the agent is shown, never which product the goal came from
        assert set(info["options"].values()) == {v for v in env.goal.goal_options.values()
                                                 if any(v in vs for vs in top.options.values())}
    rewards = [r for r, _ in results]
    assert 0.9 < np.mean(rewards) < 1.0 and min(rewards) < 1.0  # the top hit is not always the goal's product
    assert all(info["reward_info"]["r_type"] == 1.0 and info["page"] == "done" for _, info in results)


def test_pages_and_their_clickables():
    env = _env(num_products=400)  # 20 products of each type: two result pages
    obs, info = env.reset(seed=3)
    assert obs.startswith(f"WebShop{SEP}Instruction:{SEP}{env.goal.instruction_text}{SEP}Search")
    assert obs.endswith("\nAvailable actions: search[<keywords>]") and info["available_actions"] == [
        "search[<keywords>]"]
    obs, reward, terminated, truncated, info = env.step(f"search[{env.goal.query}]")
    assert info["page"] == "results" and info["valid"] and reward == 0 and not (terminated or truncated)
    assert f"Page 1 (Total results: {len(env.hits)})" in obs and len(env.hits) > 10
    shown = env.clickables()[2:]
    assert env.clickables()[:2] == ["back to search", "next >"] and len(shown) == 10
    assert all(a == a.lower() for a in shown) and shown[0].upper() in obs
    env.step("click[next >]")
    # 'Next >' is always offered, as in the original; past the last hit a page is empty.
    assert env.page_no == 2 and env.clickables()[:3] == ["back to search", "< prev", "next >"]
    for _ in range(len(env.hits) // 10 - 1):
        env.step("click[next >]")
    obs, *_, info = env.step("click[next >]")
    assert info["valid"] and env._shown() == [] and env.clickables() == ["back to search", "< prev", "next >"]
    assert f"Page {env.page_no} (Total results: {len(env.hits)}){SEP}< Prev{SEP}Next >\nAvailable" in obs
    while env.page_no > 1:
        env.step("click[< prev]")
    assert env.clickables()[:2] == ["back to search", "next >"]
    env.step(f"click[{shown[0]}]")
    product = env.product
    assert env.page == "item" and product.asin == shown[0].upper()
    assert env.clickables()[:2] == ["back to search", "< prev"] and env.clickables()[-4:] == [
        "description", "features", "reviews", "buy now"]
    obs, *_ = env.step("click[features]")
    assert env.page == "features" and all(b in obs for b in product.bullet_points)
    assert env.clickables() == ["back to search", "< prev"]
    env.step("click[< prev]")
    assert env.page == "item"
    env.step("click[< prev]")
    assert env.page == "results" and env.product is None
    obs, *_ = env.step("click[back to search]")
    assert env.page == "search" and obs.startswith("WebShop")


def test_options_are_remembered_and_marked_in_rich_mode():
    env = _env(observation_mode="text_rich", show_attrs=True, list_actions=False)
    env.reset(seed=0)
    obs, *_ = env.step(f"search[{env.goal.query}]")
    first, second = env.hits[0].asin, env.hits[1].asin
    # One string a line; product ids on a line of their own after a blank one.
    assert obs.startswith(f"Instruction:\n{env.goal.instruction_text}\n[button] Back to Search [button_]\n")
    assert f"\n\n[button] {first} [button_]\n{env.hits[0].title}\n" in obs and obs.endswith("\n")
    env.step(f"click[{first.lower()}]")
    # Two groups, to see the order (a copy: the catalog is shared by every env of the process).
    env.product = replace(env.product, options={"color": ["black", "white"], "size": ["small", "large"]})
    (group, values), (other, others) = env.product.options.items()
    env.step(f"click[{values[-1]}]")
    obs, _, _, _, info = env.step(f"click[{others[0]}]")
    assert info["options"] == {group: values[-1], other: others[0]}
    # Each chosen option is announced first (the latest choice's group last on the page comes first) and marked.
    assert obs.startswith(f"You have clicked {others[0]}.\nYou have clicked {values[-1]}.\nInstruction:\n")
    assert f"\n  [clicked button] {values[-1]} [clicked button_]\n" in obs
    assert f"\n  [button] {values[0]} [button_]\n" in obs and "[button] Buy Now [button_]" in obs
    assert "attributes" in env.clickables()
    obs, *_ = env.step("click[attributes]")
    assert all(a in obs for a in env.product.attributes)
    # A product opened before is marked on the result page, until the search page is left for.
    env.step("click[< prev]")
    obs, *_ = env.step("click[< prev]")
    assert f"[clicked button] {first} [clicked button_]" in obs and f"[button] {second} [button_]" in obs
    env.step("click[back to search]")
    obs, *_ = env.step(f"search[{env.goal.query}]")
    assert f"[button] {first} [button_]" in obs


def test_a_value_of_two_option_groups_selects_the_later_group():
    env = _env()
    env.reset(seed=0)
    env.step(f"search[{env.goal.query}]")
    env.step(f"click[{env.hits[0].asin.lower()}]")
    env.product = replace(env.product, options={"color": ["black", "white"], "pattern": ["white", "striped"]})
    obs, *_, info = env.step("click[white]")
    assert info["valid"] and info["options"] == {"pattern": "white"}
    assert env.clickables().count("white") == 1


def test_invalid_actions_change_nothing_and_say_why():
    env = _env()
    env.reset(seed=1)
    before = env._observation()
    cases = ["", "   ", "click[../../etc/passwd]", "click[buy now]", "open[door]", "search[]", "click[]",
             "search", "click[search]", "✿FUNCTION✿: click", "search[x" + "y" * 10_000 + "]",
             "<answer>search[shoes]</answer>", "CLICK[next >]"]
    for action in cases:
        obs, reward, terminated, truncated, info = env.step(action)
        assert obs == before and reward == 0.0 and not terminated and info["valid"] is False and info["error"]
    env.reset(seed=1)
    env.step("search[shoes]")
    obs, reward, terminated, truncated, info = env.step("click[../../etc/passwd]")
    assert "no clickable '../../etc/passwd'" in info["error"] and "back to search" in info["error"]
    # A search works from any page, as in the original; search_from_any_page=False needs the search box.
    env.step(f"click[{env.clickables()[-1]}]")
    assert env.page == "item"
    obs, reward, terminated, truncated, info = env.step("search[socks]")
    assert info["valid"] and env.page == "results" and env.product is None and env.options == {}
    boxed = _env(search_from_any_page=False)
    boxed.reset(seed=1)
    boxed.step("search[shoes]")
    obs, reward, terminated, truncated, info = boxed.step("search[socks]")
    assert info["valid"] is False and "no search box" in info["error"]


def test_unicode_and_long_searches_are_searches():
    env = _env()
    env.reset(seed=2)
    obs, reward, _, _, info = env.step("search[café 漢字 ñandú]")
    assert info["valid"] and env.page == "results" and env.hits == [] and "Total results: 0" in obs
    assert env.clickables() == ["back to search", "next >"]
    env.reset(seed=2)
    obs, _, _, _, info = env.step("search[" + " ".join(["shampoo"] * 240) + "]")  # 1919 characters
    assert info["valid"] and env.hits


def test_episode_is_truncated_after_max_turns_without_reward():
    env = _env(max_turns=3)
    env.reset(seed=0)
    outcomes = [env.step("click[nothing]") for _ in range(3)]
    assert [o[3] for o in outcomes] == [False, False, True] and all(o[1] == 0.0 for o in outcomes)
    env = _env()  # no turn limit by default, as the original
    env.reset(seed=0)
    assert not any(env.step("click[nothing]")[3] for _ in range(50))


def test_buying_ends_the_episode_with_the_formula_reward():
    env = _env()
    env.reset(seed=5)
    env.step(f"search[{env.goal.query}]")
    wrong = next(p for p in env.hits if p.asin != env.goal.asin)
    env.step(f"click[{wrong.asin.lower()}]")
    obs, reward, terminated, truncated, info = env.step("click[buy now]")
    assert terminated and not truncated and info["bought"] == wrong.asin
    assert 0 <= reward < 1 and reward == pytest.approx(info["reward_info"]["reward"])
    assert obs.startswith("Thank you for shopping with us!") and info["available_actions"] == []
    with pytest.raises(RuntimeError, match="after the episode ended"):
        env.step("click[buy now]")


def test_splits_and_seeds_pick_goals():
    test, train = _env(split="test"), _env(split="train")
    assert len(test.goals) == 20 and len(train.goals) == 120 - 40
    test.reset(seed=7)
    first = test.goal
    test.reset(seed=7)
    assert test.goal is first
    # Even and odd seeds alike reach every goal.
    for parity in (0, 1):
        reached = set()
        for seed in range(parity, 400, 2):
            test.reset(seed=seed)
            reached.add(test.goal.instruction_text)
        assert len(reached) == 20
    test.reset(options={"goal_index": 3})
    assert test.goal is test.goals[3]
    with pytest.raises(ValueError, match=r"goal_index must be an int in \[0, 20\)"):
        test.reset(options={"goal_index": 20})
    assert test.catalog is train.catalog  # one catalog and index per process and setting


def test_config_errors_name_the_option():
    with pytest.raises(ValueError, match="no option"):
        WebShopEnv(colour="red")
    with pytest.raises(ValueError, match="split must be one of"):
        WebShopEnv.check_options({"split": "dev"})
    with pytest.raises(ValueError, match="page_size must be an int >= 1"):
        WebShopEnv.check_options({"page_size": 0})
    with pytest.raises(ValueError, match="has no goals"):
        _env(split="train", test_goals=120, val_goals=0)
    with pytest.raises(ValueError, match="takes only the option goal_index"):
        _env().reset(seed=0, options={"split": "test"})


def test_parse_action_reads_actions_as_the_original():
    assert parse_action("click[Next >]") == ("click", "next >")
    assert parse_action("click[Next >] because it is the next page") == ("click", "next >")
    assert parse_action("search[ Red Shoes ]") == ("search", " red shoes ")  # kept as written
    assert parse_action("click[a] then click[b]") == (None, None)  # the name runs to the last '['
    for text in ("click next", "Search[x]", " click[x]", "click[]", "search[]", "click[x", "<answer>click[x]"):
        assert parse_action(text) == (None, None)
    env = _env()
    env.reset(seed=1)
    env.step("search[shoes]")
    asin = env.clickables()[-1]
    assert env.step(f"click[ {asin} ]")[-1]["valid"] is False  # no page offers ' x '
    obs, _, _, _, info = env.step(f"click[{asin.upper()}] to open it")
    assert info["valid"] and env.page == "item" and info["format_ok"] == 1.0


def test_the_original_files_drive_the_env(tmp_path):
    from tests.envs.test_webshop_catalog import _write_original

    env = WebShopEnv(data_dir=str(_write_original(tmp_path)), split="all", test_goals=1, val_goals=0)
    env.reset(seed=0)
    reward, info = _run_expert(env, 0)
    assert info["page"] == "done" and 0 < reward <= 1


def test_a_malformed_reply_ends_the_episode_with_the_set_reward():
    env = _env(malformed_reward=-1.0)
    env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step("click[nothing here]")  # an action, just not on this page
    assert (reward, terminated, info["format_ok"], info["valid"]) == (0.0, False, 1.0, False)
    obs, reward, terminated, truncated, info = env.step("I think I should buy it")
    assert (reward, terminated, info["format_ok"]) == (-1.0, True, 0.0) and "no action" in obs
    env = _env()
    env.reset(seed=0)
    assert env.step("I think")[1:3] == (0.0, False)


def test_an_imperfect_expert_skips_options_the_same_way_each_time():
    def options_chosen(env, seed):
        env.reset(seed=seed)
        while True:
            _, reward, terminated, truncated, info = env.step(env.expert_action())
            if terminated or truncated:
                return info["options"], reward

    full, none, half = _env(), _env(expert_recall=0.0), _env(expert_recall=0.5)
    counts = {"full": 0, "half": 0}
    for seed in range(40):
        chosen, full_reward = options_chosen(full, seed)
        counts["full"] += len(chosen)
        chosen, reward = options_chosen(none, seed)
        assert chosen == {} and reward <= full_reward
        chosen, _ = options_chosen(half, seed)
        counts["half"] += len(chosen)
        assert options_chosen(half, seed)[0] == chosen
    assert 0.3 < counts["half"] / counts["full"] < 0.7
    with pytest.raises(ValueError, match=r"expert_recall must be a number in \[0, 1\]"):
        WebShopEnv.check_options({"expert_recall": 1.5})


def test_the_last_step_reports_the_episodes_figures():
    env = _env()
    reward, info = _run_expert(env, 4)
    metrics = info["metrics"]
    assert metrics["success"] == 1.0 and metrics["bought"] == 1.0 and metrics["r_att"] == 1.0
    assert metrics["num_searches"] == 1.0 and metrics["invalid_actions"] == 0.0 and metrics["format_ok"] == 1.0
    env = _env(max_turns=2)
    env.reset(seed=4)
    env.step("nonsense")
    *_, truncated, info = env.step(env.expert_action())
    assert truncated and info["metrics"]["format_ok"] == 0.5 and info["metrics"]["bought"] == 0.0
    assert info["metrics"]["invalid_actions"] == 1.0 and info["metrics"]["num_searches"] == 1.0
