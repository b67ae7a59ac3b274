"""WebShop's purchase reward (Yao et al., 2022), the formula of the original engine's get_reward.

    R = r_type * (attributes matched + options matched + [price <= limit]) / (goal attributes + goal options + 1)

- An attribute of the goal matches when its fuzzy token-set ratio with one of the product's attributes is above 85,
  or when it is a substring of the product's title, bullet points or description (lower-cased).
- Each option the buyer picked matches when, after colour normalisation (the first colour of COLOR_SET found in the
  value), it equals a goal option (the 'size' group: exact), or its token-set ratio with one is above 85 (other
  groups), or it is a substring of the title, bullet points or description.
- r_type compares the bought product with the goal's: 1 when the search query is the same, two category levels are
  shared or more than 20% of the goal title's nouns are in the bought title; 0.5 when none of those holds; 0.1 when
  under 10% of the nouns are shared; 0 when none is.

Ratios are rapidfuzz's token_set_ratio over text lower-cased with punctuation turned to spaces, rounded to an
integer as the original's library does. The original finds a title's nouns with spaCy's large English model, which
cannot be installed here; `title_nouns` keeps the words a noun tagger would keep (content words that are not
numbers, units, colours or common adjectives and adverbs), which agrees on the catalog's titles and is documented
as the one difference.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from rapidfuzz import fuzz
from rapidfuzz.utils import default_process

FUZZY_THRESHOLD = 85
"""A token-set ratio above this is a match (attributes and non-size options)."""
EXACT_MATCH_OPTIONS = ("size",)
"""Option groups whose values must equal a goal option (after colour normalisation) rather than match fuzzily."""
COLOR_SET = (
    "alabaster", "apricot", "aqua", "ash", "asphalt", "azure", "banana", "beige", "black", "blue", "blush", "bordeaux",
    "bronze", "brown", "burgundy", "camel", "camo", "caramel", "champagne", "charcoal", "cheetah", "chestnut",
    "chocolate", "christmas", "coffee", "cognac", "copper", "coral", "cranberry", "cream", "crystal", "dark", "denim",
    "eggplant", "elephant", "espresso", "fuchsia", "gold", "granite", "grape", "graphite", "grass", "gray", "green",
    "grey", "heather", "indigo", "ivory", "ivy", "khaki", "lavender", "lemon", "leopard", "light", "lilac", "lime",
    "magenta", "maroon", "mauve", "merlot", "midnight", "mint", "mocha", "multicolor", "mushroom", "mustard",
    "natural", "navy", "nude", "olive", "orange", "peach", "pewter", "pink", "plum", "purple", "rainbow", "red", "rose",
    "royal", "rust", "sand", "sapphire", "seashell", "silver", "skull", "slate", "steel", "stone", "stonewash",
    "sunflower", "tan", "taupe", "teal", "tiger", "turquoise", "violet", "walnut", "wheat", "white", "wine", "yellow",
)
"""The original engine's colour words, in its order: a value normalises to the first one it contains."""

_NOT_NOUNS = frozenset("""
a an the and or of for with without in on at to by from into over under per as is are be this that these those it its
your our my their his her new best great premium professional classic deluxe ultra super extra mini small large
medium big little long short soft hard light heavy high low natural organic pure fresh fast slow easy simple smart
portable durable comfortable waterproof wireless adjustable non free plus pro men women mens womens kids unisex
x xl xxl s m l ml oz fl lb lbs inch inches in cm mm ft pack count pcs piece pieces set one two three four five six
""".split())
"""Words a noun tagger would not tag NOUN/PROPN in product titles: function words, common adjectives, units."""
_ADJECTIVE_SUFFIXES = ("ly", "ful", "less", "able", "ible", "ous", "ive", "ish")


def normalize_color(value: str) -> str:
    """The first COLOR_SET word found in `value` (a substring, as the original does), else `value` itself."""
    return next((color for color in COLOR_SET if color in value), value)


def token_set_ratio(a: str, b: str) -> int:
    """Fuzzy token-set ratio in 0..100 over lower-cased text with punctuation as spaces, rounded to an integer."""
    return int(round(fuzz.token_set_ratio(a, b, processor=default_process)))


def title_nouns(title: str) -> list[str]:
    """The lower-cased nouns of a product title, by rule (see the module docstring): alphabetic words of two or more
    letters that are not function words, units, colours, common adjectives or adjective/adverb forms."""
    words = re.findall(r"[a-z][a-z'\-]*[a-z]|[a-z]", title.lower())
    return [w for w in words if len(w) > 1 and w not in _NOT_NOUNS and w not in COLOR_SET
            and not _adjective_form(w) and "-" not in w]


def _adjective_form(word: str) -> bool:
    # A suffix counts only after a stem of four letters: 'washable' is an adjective, 'cable' and 'polish' are not.
    return any(word.endswith(s) and len(word) - len(s) >= 4 for s in _ADJECTIVE_SUFFIXES)


@dataclass(frozen=True)
class RewardInfo:
    """The reward and its parts, as the original's verbose mode reports them."""

    reward: float
    """R of the module docstring. Options are counted per chosen option, as in the original, so choosing options
    the goal does not ask for that still match (say, a colour named in the title) can add to the count."""
    r_type: float
    """1, 0.5, 0.1 or 0."""
    r_att: float
    """Share of the goal's attributes matched."""
    r_option: float | None
    """Share of the goal's options matched (None when the goal has none)."""
    r_price: bool
    """The price paid is at most the goal's limit."""
    query_match: bool
    category_match: bool
    title_score: float
    """Share of the goal title's nouns found among the bought title's nouns."""
    num_attr_matches: int
    num_option_matches: int


def type_reward(bought, goal) -> tuple[float, bool, bool, float]:
    """(r_type, query_match, category_match, title_score) of a bought product against the goal's product."""
    query_match = bought.query == goal.query
    levels = lambda p: {level.strip() for level in p.product_category.split("›")}  # noqa: E731
    category_match = len(levels(bought) & levels(goal)) >= 2
    wanted = title_nouns(goal.name)
    title_score = len(set(title_nouns(bought.title)) & set(wanted)) / len(wanted) if wanted else 0.2
    r_type = 1.0
    if not (query_match or category_match or title_score > 0.2):
        r_type = 0.5
    if title_score < 0.1:
        r_type = 0.1
    if title_score == 0.0:
        r_type = 0.0
    return r_type, query_match, category_match, title_score


def _in_text(value: str, product) -> bool:
    return (value in product.title.lower() or value in " ".join(product.bullet_points).lower()
            or value in product.description.lower())


def attribute_matches(bought, goal_attributes: list[str]) -> int:
    """How many goal attributes the product has (fuzzy against its attributes, else a substring of its text)."""
    matched = 0
    for wanted in goal_attributes:
        if any(token_set_ratio(have, wanted) > FUZZY_THRESHOLD for have in bought.attributes) or _in_text(
                wanted, bought):
            matched += 1
    return matched


def option_matches(bought, goal_options: list[str], chosen: dict[str, str]) -> int:
    """How many of the chosen options match a goal option (see the module docstring); counted per chosen option."""
    goal_values = [normalize_color(o) for o in goal_options]
    matched = 0
    for group, value in chosen.items():
        value = normalize_color(value)
        if group.lower() in EXACT_MATCH_OPTIONS:
            hit = value in goal_values
        else:
            hit = any(token_set_ratio(g, value) > FUZZY_THRESHOLD for g in goal_values)
        if hit or _in_text(value, bought):
            matched += 1
    return matched


def purchase_reward(bought, goal, price: float, chosen: dict[str, str]) -> RewardInfo:
    """The reward of buying `bought` at `price` with options `chosen` ({group: value}) for `goal`.

    `bought` is an envs.webshop_catalog.Product, `goal` a Goal (goal_options a list, or a dict whose values
    count)."""
    r_type, query_match, category_match, title_score = type_reward(bought, goal)
    goal_options = list(goal.goal_options.values()) if isinstance(goal.goal_options, dict) \
        else list(goal.goal_options)
    attrs = attribute_matches(bought, goal.attributes)
    options = option_matches(bought, goal_options, chosen)
    r_price = price <= goal.price_upper
    total = (attrs + options + r_price) / (len(goal.attributes) + len(goal_options) + 1)
    return RewardInfo(
        reward=total * r_type, r_type=r_type,
        r_att=attrs / len(goal.attributes) if goal.attributes else 0.0,
        r_option=options / len(goal_options) if goal_options else None, r_price=bool(r_price),
        query_match=query_match, category_match=category_match, title_score=title_score,
        num_attr_matches=attrs, num_option_matches=options)
