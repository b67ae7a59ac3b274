"""memrl/WebShop-v0: the WebShop text shop (Yao et al., 2022), the web-navigation env MEM1 trains and evaluates on.

reset(seed=i) starts on the search page with a goal of the chosen split drawn from i (uniformly, so training's even
seeds and held-out odd ones both reach every goal), or reset(options={"goal_index": k}) with goal k exactly. Each
step takes one action string, exactly as the original accepts them:

- `search[keywords]` on a page with a search box (the search page): BM25 over the products' text (bm25s), the top
  50 hits, 10 per result page;
- `click[x]`, x one of the page's clickables, lower-case: `back to search`, `< prev`, `next >` on result pages, a
  product id there, on a product page an option value, `description`, `features`, `reviews` (`attributes` with
  show_attrs) and `buy now`; `< prev` on a product page goes back to its result page, on a sub-page back to the
  product.

An invalid action (unknown verb, empty argument, a search without a search box, a click on something the page does
not show) changes nothing and earns 0; info["valid"] is False and info["error"] says why, and info["format_ok"] is 0
when the text is no action at all (with malformed_reward set, that ends the episode with that reward). The only
reward is paid on `click[buy now]`, which ends the episode (envs.webshop_reward: the original's formula). After
max_turns actions without buying the episode is truncated with reward 0.

Observations are the page's visible strings joined by " [SEP] " (observation_mode 'text'), or with buttons marked
"[button] x [button_]" and chosen options "[clicked button] x [clicked button_]" ('text_rich'); with list_actions
a last line lists the actions the page allows ("Available actions: search[<keywords>]" or "click[...]" each).
info: goal (the instruction), page, valid, error, format_ok, available_actions, asin (the product open), options
(chosen), turn; after buying also reward_info (the reward's parts) and bought; at the end metrics (success, bought,
the reward's parts, format_ok as the share of actions that were actions, invalid_actions, num_searches).

The original text env runs a search from any page; here, as the issue's facts and MEM1's wrapper have it, search
needs the search box. `expert_action()` is the scripted expert warm-starts imitate: search the goal's attributes and
product type, open the top hit, choose each option the goal asks for that the product has (each with probability
expert_recall), buy. It knows only what the agent is shown, so a student can match it; the top hit is not always the
product the goal was written from, which leaves reward above the expert's for RL to find.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass, fields
from functools import lru_cache
from typing import ClassVar

import gymnasium as gym

from envs.retrieval import BM25Retriever, Passage
from envs.text_space import clean, text_space
from envs.webshop_catalog import Catalog, Goal, Product, generate_catalog, load_catalog
from envs.webshop_reward import purchase_reward

SEP = " [SEP] "
SEARCH_RETURN_N = 50
"""Hits a search keeps (the original's)."""
SUB_PAGES = ("description", "features", "reviews", "attributes")
OBSERVATION_MODES = ("text", "text_rich")
SPLITS = ("train", "val", "test", "all")


@dataclass(frozen=True)
class WebShopConfig:
    """Knobs of the WebShop env."""

    data_dir: str | None = None
    """Directory with the original files (envs.webshop_catalog.load_catalog); None: a generated catalog."""
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
    max_turns: int = 10
    """Actions before the episode is truncated without a purchase (MEM1 trains with 10)."""
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
        for name, low in (("goals_per_product", 1), ("test_goals", 0), ("page_size", 1), ("max_turns", 1),
                          ("max_action_chars", 1), ("num_products", 1), ("val_goals", 0)):
            value = getattr(self, name)
            if value is None and name in ("num_products", "val_goals"):
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"WebShopConfig.{name} must be an int >= {low}, got {value!r}")
        if isinstance(self.expert_recall, bool) or not isinstance(self.expert_recall, (int, float)) or not (
                0 <= self.expert_recall <= 1):
            raise ValueError(f"WebShopConfig.expert_recall must be a number in [0, 1], got {self.expert_recall!r}")


@lru_cache(maxsize=4)
def _shop(data_dir: str | None, num_products: int | None, goals_per_product: int, seed: int, test_goals: int,
          val_goals: int | None) -> tuple[Catalog, BM25Retriever]:
    # Envs of one runner share a catalog and its index: building them is the slow part of making an env.
    if data_dir is None:
        catalog = generate_catalog(num_products or 400, goals_per_product, seed, test_goals,
                                   500 if val_goals is None else val_goals)
    else:
        catalog = load_catalog(data_dir, num_products, seed, test_goals, 1000 if val_goals is None else val_goals)
    passages = [Passage(p.asin, p.title, " ".join([*p.bullet_points, p.description,
                                                   *(v for vs in p.options.values() for v in vs)]))
                for p in catalog.products]
    return catalog, BM25Retriever(passages)


def parse_action(action: str) -> tuple[str | None, str | None]:
    """(verb, lower-cased argument) of 'search[...]' / 'click[...]', or (None, None) when it is neither."""
    action = action.strip()
    for verb in ("search", "click"):
        if action.startswith(f"{verb}[") and action.endswith("]"):
            return verb, action[len(verb) + 1:-1].strip().lower()
    return None, None


class WebShopEnv(gym.Env):
    """The WebShop text shop (see the module docstring)."""

    metadata: ClassVar[dict] = {"render_modes": []}

    def __init__(self, **kwargs):
        """`kwargs` are WebShopConfig fields."""
        own = {f.name for f in fields(WebShopConfig)}
        unknown = sorted(set(kwargs) - own)
        if unknown:
            raise ValueError(f"WebShopEnv has no option(s) {unknown}; allowed: {sorted(own)}")
        self.config = config = WebShopConfig(**kwargs)
        self.catalog, self.search_index = _shop(config.data_dir, config.num_products, config.goals_per_product,
                                                config.catalog_seed, config.test_goals, config.val_goals)
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
        WebShopConfig(**options)

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
        verb, arg = parse_action(clean(str(action), self.config.max_action_chars))
        reward, extra = 0.0, {"format_ok": float(verb is not None)}
        error = self._check(verb, arg)
        if verb is None and self.config.malformed_reward is not None:
            self.page, self.reward_info = "done", None
            reward = float(self.config.malformed_reward)
        elif error is None and verb == "search":
            self._search(arg)
        elif error is None:
            reward, extra = self._click(arg)
        terminated = self.page == "done"
        truncated = not terminated and self.turn >= self.config.max_turns
        self._counts["format_ok"] += verb is not None
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

    def _check(self, verb: str | None, arg: str | None) -> str | None:
        """Why the action is invalid on this page, or None."""
        if verb is None:
            return "not an action: write search[keywords] or click[button]"
        if not arg:
            return f"{verb}[] needs an argument"
        if verb == "search":
            return None if self.page == "search" else "this page has no search box; click[back to search] first"
        if arg not in self.clickables():
            shown = ", ".join(self.clickables()) or "nothing"
            return f"no clickable {arg[:80]!r} on this page; clickable: {shown}"
        return None

    def _search(self, keywords: str) -> None:
        self.keywords = keywords.split()
        hits = self.search_index.search([keywords], SEARCH_RETURN_N)[0]
        self.hits = [self.catalog.by_asin[h["id"]] for h in hits]
        self.page, self.page_no, self.product, self.options = "results", 1, None, {}

    def _click(self, name: str) -> tuple[float, dict]:
        if name == "back to search":
            self.page, self.keywords, self.hits, self.product, self.options = "search", [], [], None, {}
        elif self.page == "results":
            if name == "next >":
                self.page_no += 1
            elif name == "< prev":
                self.page_no -= 1
            else:
                self.product, self.options, self.page = self.catalog.by_asin[name.upper()], {}, "item"
        elif self.page == "item":
            if name == "< prev":
                self.page, self.product, self.options = "results", None, {}
            elif name in SUB_PAGES:
                self.page = name
            elif name == "buy now":
                info = purchase_reward(self.product, self.goal, self.product.price, self.options)
                self.page, self.reward_info = "done", info
                return info.reward, {"reward_info": asdict(info), "bought": self.product.asin}
            else:
                group = next(g for g, values in self.product.options.items() if name in values)
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
            nav = ["< prev"] if self.page_no > 1 else []
            nav += ["next >"] if self.page_no * self.config.page_size < len(self.hits) else []
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

    def _observation(self) -> str:
        rich = self.config.observation_mode == "text_rich"
        button = (lambda t: f"[button] {t} [button_]") if rich else (lambda t: t)
        chosen = (lambda t: f"[clicked button] {t} [clicked button_]") if rich else (lambda t: t)
        instruction = ["Instruction:", self.goal.instruction_text]
        page, product = self.page, self.product
        if page == "search":
            parts = ["WebShop", *instruction, button("Search")]
        elif page == "results":
            parts = [*instruction, button("Back to Search"), f"Page {self.page_no} (Total results: {len(self.hits)})"]
            parts += [button("< Prev")] if self.page_no > 1 else []
            parts += [button("Next >")] if self.page_no * self.config.page_size < len(self.hits) else []
            for p in self._shown():
                parts += [button(p.asin), p.title, p.price_tag]
        elif page == "item":
            parts = [*instruction, button("Back to Search"), button("< Prev")]
            for group, values in product.options.items():
                parts += [group, *(chosen(v) if self.options.get(group) == v else button(v) for v in values)]
            parts += [product.title, f"Price: {product.price_tag}", f"Rating: {product.rating}"]
            parts += [button(s.capitalize()) for s in SUB_PAGES if s != "attributes" or self.config.show_attrs]
            parts += [button("Buy Now")]
        elif page in SUB_PAGES:
            body = {"description": [product.description],
                    "features": product.bullet_points,
                    "reviews": [x for r in product.reviews for x in (r.title, str(r.score), r.body)]
                    or ["No reviews found"],
                    "attributes": product.attributes}[page]
            parts = [*instruction, button("Back to Search"), button("< Prev"), *body]
        elif self.reward_info is None:
            parts = ["The episode ended: the reply held no action."]
        else:
            parts = ["Thank you for shopping with us!", "Your score (min 0.0, max 1.0)",
                     f"{self.reward_info.reward:.4f}"]
        text = SEP.join(parts)
        if self.config.list_actions and page != "done":
            text += "\nAvailable actions: " + ", ".join(self.available_actions())
        return text

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
                group = next((g for g, vs in self.product.options.items() if value in vs), None)
                if group is not None and self.options.get(group) != value:
                    return f"click[{value}]"
            return "click[buy now]"
        return "click[< prev]"
