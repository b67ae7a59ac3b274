"""memrl/WebShop-v0: the WebShop text shop (Yao et al., 2022), the web-navigation env MEM1 trains and evaluates on.

reset(seed=i) starts on the search page with a goal of the chosen split drawn from i (uniformly, so training's even
seeds and held-out odd ones both reach every goal), or reset(options={"goal_index": k}) with goal k exactly. Each
step takes one action string, read as the original text env reads it (`verb[argument]` matched from the start of
the text, the argument lower-cased, anything after the last `]` ignored, no spaces trimmed):

- `search[keywords]` from any page (as the original; `search_from_any_page=False` needs the search page's box, as
  some agents' wrappers do): BM25 over the products' text (bm25s), the top 50 hits, 10 per result page;
- `click[x]`, x one of the page's clickables, lower-case: `back to search`, `< prev` (after the first page) and
  `next >` (always) on result pages, a product id there, on a product page an option value, `description`,
  `features`, `reviews` (`attributes` with show_attrs) and `buy now`; `< prev` on a product page goes back to its
  result page, on a sub-page back to the product. A value offered by two option groups selects the later group's.

An invalid action (unknown verb, a click on something the page does not show) changes nothing and earns 0;
info["valid"] is False and info["error"] says why, and info["format_ok"] is 0 when the text does not start with
`search[` or `click[` (with malformed_reward set, that ends the episode with that reward). The only reward is paid
on `click[buy now]`, which ends the episode (webshop_reward: the original's `get_reward`). The bare env has no
turn limit, as the original; with max_turns the episode is truncated with reward 0 after that many actions.

Observations are the page's visible strings joined by " [SEP] " (observation_mode 'text'), or one string a line
with buttons marked "[button] x [button_]", chosen options "  [clicked button] x [clicked button_]" and a line
"You have clicked x." put first for each, and product ids already opened "[clicked button] x [clicked button_]"
('text_rich'; the original's whitespace-only HTML strings are left out); with list_actions a last line lists the
actions the page allows ("Available actions: search[<keywords>]" and "click[...]" each).
info: goal (the instruction), page, valid, error, format_ok, available_actions, asin (the product open), options
(chosen), turn; after buying also reward_info (the reward's parts, with the noun tagger that scored) and bought; at
the end metrics (success, bought, the reward's parts, format_ok as the share of actions that were actions,
invalid_actions, num_searches).

`expert_action()` is the scripted expert warm-starts imitate: search the goal's attributes and product type, open
the top hit, choose each option the goal asks for that the product has (each with probability expert_recall), buy.
It knows only what the agent is shown, so a student can match it; the top hit is not always the product the goal
was written from, which leaves reward above the expert's for RL to find.
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import asdict, dataclass, fields
from functools import lru_cache
from typing import ClassVar

import gymnasium as gym

from memrl_envs.retrieval import BM25Retriever, Passage
from memrl_envs.text_space import clean, text_space
from memrl_envs.webshop_catalog import Catalog, Goal, Product, generate_catalog, load_catalog
from memrl_envs.webshop_reward import NOUN_TAGGERS, purchase_reward
from memrl.preflight import typed_config

SEP = " [SEP] "
SEARCH_RETURN_N = 50
"""Hits a search keeps (the original's)."""
VERBS = ("search", "click")
SUB_PAGES = ("description", "features", "reviews", "attributes")
OBSERVATION_MODES = ("text", "text_rich")
SPLITS = ("train", "val", "test", "all")


@dataclass(frozen=True)
class WebShopConfig:
    """Knobs of the WebShop env."""

    data_dir: str | None = None
    """Directory with the original files (memrl_envs.webshop_catalog.load_catalog); None: a generated catalog."""
    num_products: int | None = None
    """Products: the generated catalog's size (None: 400), or the first rows of the original items file (None:
    all)."""
    goals_per_product: int = 5
    """Generated catalogs: goals written per product."""
    catalog_seed: int = 0
    """Seed of the generated catalog, and of the original files' drawn prices and price limits."""
    split: str = "train"
    """One of SPLITS: whose goals reset(seed=i) takes."""
    test_goals: int = 500
    """The first this many goals (in the original order) are the test split."""
    val_goals: int | None = None
    """The next this many are validation, the rest training (None: 1000 for the original files, as WebShop and
    MEM1's code split them; 500 for generated catalogs)."""
    page_size: int = 10
    """Products per result page."""
    max_turns: int | None = None
    """Actions before the episode is truncated without a purchase (None: no limit, as the original text env; MEM1
    trains with 10)."""
    search_from_any_page: bool = True
    """search[...] works on every page, as in the original text env; False accepts it only on the search page."""
    noun_tagger: str = "auto"
    """One of webshop_reward.NOUN_TAGGERS: who finds the titles' nouns for r_type (spaCy, as the original, when
    the `webshop` extra is installed; else the rule)."""
    read_reviews: bool = False
    """Original files: read reviews.json for the reviews page and the rating (the original engine never does, so
    every product shows "Rating: N.A." and no reviews)."""
    observation_mode: str = "text"
    """One of OBSERVATION_MODES."""
    show_attrs: bool = False
    """Product pages offer the 'attributes' sub-page (off in the original by default)."""
    list_actions: bool = True
    """Each observation ends with a line listing the available actions."""
    expert_recall: float = 1.0
    """Share of the goal's options the scripted expert chooses before buying; below 1 it skips some, the same ones
    for the same goal (an imperfect teacher leaves its SFT student something RL can improve)."""
    malformed_reward: float | None = None
    """An action that is neither search[...] nor click[...] (a malformed reply) ends the episode with this reward
    (MEM1's WebShop agent: -1); None treats it as any other invalid action (no change, 0)."""
    max_action_chars: int = 2000
    """Actions are cut to this many printable characters before they are parsed."""
    seed_offset: int = 0
    """Added to the reset seed before a goal is drawn from it."""

    def __post_init__(self) -> None:
        if self.split not in SPLITS:
            raise ValueError(f"WebShopConfig.split must be one of {SPLITS}, got {self.split!r}")
        if self.observation_mode not in OBSERVATION_MODES:
            raise ValueError(f"WebShopConfig.observation_mode must be one of {OBSERVATION_MODES}, got "
                             f"{self.observation_mode!r}")
        if self.noun_tagger not in NOUN_TAGGERS:
            raise ValueError(f"WebShopConfig.noun_tagger must be one of {NOUN_TAGGERS}, got {self.noun_tagger!r}")
        for name, low in (("goals_per_product", 1), ("test_goals", 0), ("page_size", 1), ("max_turns", 1),
                          ("max_action_chars", 1), ("num_products", 1), ("val_goals", 0)):
            value = getattr(self, name)
            if value is None and name in ("num_products", "val_goals", "max_turns"):
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"WebShopConfig.{name} must be an int >= {low}, got {value!r}")
        for name in ("search_from_any_page", "read_reviews", "show_attrs", "list_actions"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"WebShopConfig.{name} must be True or False, got {getattr(self, name)!r}")
        if isinstance(self.expert_recall, bool) or not isinstance(self.expert_recall, (int, float)) or not (
                0 <= self.expert_recall <= 1):
            raise ValueError(f"WebShopConfig.expert_recall must be a number in [0, 1], got {self.expert_recall!r}")


@lru_cache(maxsize=4)
def _shop(data_dir: str | None, num_products: int | None, goals_per_product: int, seed: int, test_goals: int,
          val_goals: int | None, read_reviews: bool) -> tuple[Catalog, BM25Retriever]:
    # Envs of one runner share a catalog and its index: building them is the slow part of making an env.
    if data_dir is None:
        catalog = generate_catalog(num_products or 400, goals_per_product, seed, test_goals,
                                   500 if val_goals is None else val_goals)
    else:
        catalog = load_catalog(data_dir, num_products, seed, test_goals, 1000 if val_goals is None else val_goals,
                               read_reviews=read_reviews)
    passages = [Passage(p.asin, p.title, " ".join([*p.bullet_points, p.description,
                                                   *(v for vs in p.options.values() for v in vs)]))
                for p in catalog.products]
    return catalog, BM25Retriever(passages)


_ACTION = re.compile(r"(.+)\[(.+)\]")
"""The original's action pattern, matched from the start: the name runs to the last '[' before the last ']'."""


def parse_action(action: str) -> tuple[str | None, str | None]:
    """(verb, lower-cased argument) of an action read as the original reads it, (None, None) when the name is not
    one of VERBS or nothing stands between the brackets. 'click[x] and more' is click 'x'; 'click[ x ]' is
    click ' x ', which no page offers."""
    found = _ACTION.match(action)
    if found is None or found.group(1) not in VERBS:
        return None, None
    return found.group(1), found.group(2).lower()


def looks_like_action(action: str) -> bool:
    """The text starts as an action does ('search[' or 'click['): memrl's format signal (the original has none)."""
    return action.startswith(tuple(f"{verb}[" for verb in VERBS))


class WebShopEnv(gym.Env):
    """The WebShop text shop (see the module docstring)."""

    metadata: ClassVar[dict] = {"render_modes": []}

    def __init__(self, **kwargs):
        """`kwargs` are WebShopConfig fields."""
        own = {f.name for f in fields(WebShopConfig)}
        unknown = sorted(set(kwargs) - own)
        if unknown:
            raise ValueError(f"WebShopEnv has no option(s) {unknown}; allowed: {sorted(own)}")
        self.config = config = typed_config(WebShopConfig, kwargs, "WebShopEnv")
        self.catalog, self.search_index = _shop(config.data_dir, config.num_products, config.goals_per_product,
                                                config.catalog_seed, config.test_goals, config.val_goals,
                                                config.read_reviews)
        self.goals = self.catalog.split(config.split)
        if not self.goals:
            raise ValueError(f"WebShopEnv: split {config.split!r} has no goals ({len(self.catalog.goals)} goals, "
                             f"test_goals={self.catalog.test_goals}, val_goals={self.catalog.val_goals})")
        self.observation_space = text_space(1 << 20)
        self.action_space = text_space(config.max_action_chars)
        self.goal: Goal | None = None
        self.reward_info = None

    @classmethod
    def check_options(cls, options: dict) -> None:
        """Raise ValueError naming an unknown or bad option, without building the catalog."""
        own = {f.name for f in fields(WebShopConfig)}
        unknown = sorted(set(options) - own)
        if unknown:
            raise ValueError(f"WebShopEnv has no option(s) {unknown}; allowed: {sorted(own)}")
        typed_config(WebShopConfig, options, "WebShopEnv")

    # -- episode ----------------------------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        options = dict(options or {})
        index = options.pop("goal_index", None)
        if options:
            raise ValueError(f"WebShopEnv.reset takes only the option goal_index, got {sorted(options)}")
        if index is None:
            # Seeds of either parity reach every goal (memrl trains on even seeds and holds out odd ones).
            index = random.Random((seed or 0) + self.config.seed_offset).randrange(len(self.goals))
        elif isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < len(self.goals):
            raise ValueError(f"WebShopEnv.reset: goal_index must be an int in [0, {len(self.goals)}) for split "
                             f"{self.config.split!r}, got {index!r}")
        self.goal = self.goals[index]
        self.page = "search"
        self.keywords: list[str] = []
        self.hits: list[Product] = []
        self.page_no = 1
        self.product: Product | None = None
        self.options: dict[str, str] = {}
        self.visited: set[str] = set()
        self.turn = 0
        self.reward_info = None
        self._counts = {"format_ok": 0, "invalid": 0, "searches": 0}
        return self._observation(), self._info(valid=True)

    def step(self, action: str):
        if self.goal is None:
            raise RuntimeError("WebShopEnv.step called before reset")
        if self.page == "done":
            raise RuntimeError("WebShopEnv.step called after the episode ended; call reset")
        self.turn += 1
        text = clean(str(action), self.config.max_action_chars)
        verb, arg = parse_action(text)
        format_ok = looks_like_action(text)
        reward, extra = 0.0, {"format_ok": float(format_ok)}
        error = self._check(verb, arg, format_ok)
        if not format_ok and self.config.malformed_reward is not None:
            self.page, self.reward_info = "done", None
            reward = float(self.config.malformed_reward)
        elif error is None and verb == "search":
            self._search(arg)
        elif error is None:
            reward, bought = self._click(arg)
            extra.update(bought)
        terminated = self.page == "done"
        truncated = not terminated and self.config.max_turns is not None and self.turn >= self.config.max_turns
        self._counts["format_ok"] += format_ok
        self._counts["invalid"] += error is not None
        self._counts["searches"] += error is None and verb == "search"
        if terminated or truncated:
            extra["metrics"] = self._metrics(reward)
        return self._observation(), reward, terminated, truncated, {**self._info(error is None, error), **extra}

    def _metrics(self, reward: float) -> dict[str, float]:
        """The finished episode's figures: success (reward 1), bought, the reward's parts (0 without a purchase),
        the share of actions that were actions at all (format_ok), invalid actions and searches."""
        info = self.reward_info
        return {"success": float(reward >= 1.0), "bought": float(info is not None),
                "r_type": info.r_type if info else 0.0, "r_att": info.r_att if info else 0.0,
                "r_option": (info.r_option if info.r_option is not None else 1.0) if info else 0.0,
                "r_price": float(info.r_price) if info else 0.0, "format_ok": self._counts["format_ok"] / self.turn,
                "invalid_actions": float(self._counts["invalid"]), "num_searches": float(self._counts["searches"])}

    def _check(self, verb: str | None, arg: str | None, format_ok: bool) -> str | None:
        """Why the action is invalid on this page, or None."""
        if verb is None:
            if format_ok:
                return "write the action as search[keywords] or click[button], with something between the brackets"
            return "not an action: write search[keywords] or click[button]"
        if verb == "search":
            if self.page == "search" or self.config.search_from_any_page:
                return None
            return "this page has no search box; click[back to search] first"
        if arg not in self.clickables():
            shown = ", ".join(self.clickables()) or "nothing"
            return f"no clickable {arg[:80]!r} on this page; clickable: {shown}"
        return None

    def _search(self, keywords: str) -> None:
        self.keywords = keywords.split(" ")
        hits = self.search_index.search([keywords], SEARCH_RETURN_N)[0]
        self.hits = [self.catalog.by_asin[h["id"]] for h in hits]
        self.page, self.page_no, self.product, self.options = "results", 1, None, {}

    def _click(self, name: str) -> tuple[float, dict]:
        if name == "back to search":
            self.page, self.keywords, self.hits, self.product, self.options = "search", [], [], None, {}
            self.visited = set()
        elif self.page == "results":
            if name == "next >":
                self.page_no += 1
            elif name == "< prev":
                self.page_no -= 1
            else:
                self.product, self.options, self.page = self.catalog.by_asin[name.upper()], {}, "item"
                self.visited.add(self.product.asin)
        elif self.page == "item":
            if name == "< prev":
                self.page, self.product, self.options = "results", None, {}
            elif name in SUB_PAGES:
                self.page = name
            elif name == "buy now":
                info = purchase_reward(self.product, self.goal, self.product.price, self.options,
                                       self.config.noun_tagger)
                self.page, self.reward_info = "done", info
                return info.reward, {"reward_info": asdict(info), "bought": self.product.asin}
            else:
                # The original keeps one clickable per value, the last group's radio button.
                group = [g for g, values in self.product.options.items() if name in values][-1]
                self.options[group] = name
        else:  # a sub-page: '< prev' is all that is left
            self.page = "item"
        return 0.0, {}

    # -- pages ------------------------------------------------------------------------------------------------
    def _shown(self) -> list[Product]:
        size = self.config.page_size
        return self.hits[(self.page_no - 1) * size: self.page_no * size]

    def clickables(self) -> list[str]:
        """What `click[...]` accepts on the current page, in page order."""
        page = self.page
        if page == "results":
            nav = ["< prev", "next >"] if self.page_no > 1 else ["next >"]
            return ["back to search", *nav, *(p.asin.lower() for p in self._shown())]
        if page == "item":
            values = [v for vs in self.product.options.values() for v in vs]
            subs = [s for s in SUB_PAGES if s != "attributes" or self.config.show_attrs]
            return ["back to search", "< prev", *dict.fromkeys(values), *subs, "buy now"]
        if page in SUB_PAGES:
            return ["back to search", "< prev"]
        return []

    def available_actions(self) -> list[str]:
        if self.page == "search":
            return ["search[<keywords>]"]
        return [f"click[{c}]" for c in self.clickables()]

    def _strings(self) -> list[tuple[str, str]]:
        """The page's visible strings in page order, each with its kind: 'text', 'button', 'option' (a value's
        label), 'chosen' (a chosen value's label), 'product' (a product id) or 'visited' (one opened before)."""
        text = lambda *ts: [("text", t) for t in ts]  # noqa: E731
        instruction = text("Instruction:", self.goal.instruction_text)
        page, product = self.page, self.product
        if page == "search":
            return [*text("WebShop"), *instruction, ("button", "Search")]
        if page == "results":
            parts = [*instruction, ("button", "Back to Search"),
                     *text(f"Page {self.page_no} (Total results: {len(self.hits)})")]
            parts += [("button", "< Prev"), ("button", "Next >")] if self.page_no > 1 else [("button", "Next >")]
            for p in self._shown():
                parts += [("visited" if p.asin in self.visited else "product", p.asin), *text(p.title, p.price_tag)]
            return parts
        if page == "item":
            # The original marks a label chosen when its value, in quotes, is in the page's address, which holds the
            # search words and the chosen options as JSON.
            address = "+".join(self.keywords) + "/" + json.dumps(self.options)
            parts = [*instruction, ("button", "Back to Search"), ("button", "< Prev")]
            for group, values in product.options.items():
                parts += [*text(group), *(("chosen" if f'"{v}"' in address else "option", v) for v in values)]
            parts += text(product.title, f"Price: {product.price_tag}", f"Rating: {product.rating}")
            parts += [("button", s.capitalize()) for s in SUB_PAGES if s != "attributes" or self.config.show_attrs]
            return [*parts, ("button", "Buy Now")]
        if page in SUB_PAGES:
            body = {"description": [product.description],
                    "features": product.bullet_points,
                    "reviews": [x for r in product.reviews for x in (f'"{r.title}"', str(r.score), r.body)],
                    "attributes": product.attributes}[page]
            return [*instruction, ("button", "Back to Search"), ("button", "< Prev"), *text(*body)]
        if self.reward_info is None:
            return text("The episode ended: the reply held no action.")
        return text("Thank you for shopping with us!", "Your score (min 0.0, max 1.0)",
                    f"{self.reward_info.reward:.4f}")

    def _observation(self) -> str:
        strings = self._strings()
        if self.config.observation_mode == "text":
            observation = SEP.join(t for _, t in strings)
        else:
            observation, clicked = "", []
            for kind, t in strings:
                if kind == "button":
                    t = f"[button] {t} [button_]"
                elif kind == "option":
                    t = f"  [button] {t} [button_]"
                elif kind == "chosen":
                    clicked.insert(0, f"You have clicked {t}.\n")
                    t = f"  [clicked button] {t} [clicked button_]"
                elif kind == "product":
                    t = f"\n[button] {t} [button_]"
                elif kind == "visited":
                    t = f"\n[clicked button] {t} [clicked button_]"
                observation += t + "\n"
            observation = "".join(clicked) + observation
        if self.config.list_actions and self.page != "done":
            observation += ("" if observation.endswith("\n") else "\n") + "Available actions: " + ", ".join(
                self.available_actions())
        return observation

    def _info(self, valid: bool, error: str | None = None) -> dict:
        return {"goal": self.goal.instruction_text, "page": self.page, "valid": valid, "error": error,
                "available_actions": self.available_actions() if self.page != "done" else [],
                "asin": self.product.asin if self.product else None, "options": dict(self.options),
                "turn": self.turn}

    # -- scripted expert --------------------------------------------------------------------------------------
    def expert_action(self) -> str:
        """The scripted expert's next action (see the module docstring)."""
        goal, page = self.goal, self.page
        if page == "search":
            return f"search[{' '.join([*goal.attributes, goal.query])}]"
        if page == "results":
            # The top hit: the expert sees what the agent sees, never which product the goal was written from.
            shown = self._shown()
            return f"click[{shown[0].asin.lower()}]" if shown else "click[back to search]"
        if page == "item":
            wanted = goal.goal_options.values() if isinstance(goal.goal_options, dict) else goal.goal_options
            # Which options an imperfect expert skips depends on the goal alone, so every visit skips the same.
            rng = random.Random(f"webshop-expert-{goal.instruction_text}")
            wanted = [v for v in wanted if rng.random() < self.config.expert_recall]
            for value in wanted:
                groups = [g for g, vs in self.product.options.items() if value in vs]
                if groups and self.options.get(groups[-1]) != value:
                    return f"click[{value}]"
            return "click[buy now]"
        return "click[< prev]"
