import pytest

from memrl_envs.webshop_catalog import Goal, Product
from memrl_envs.webshop_reward import (
    fuzzy_process,
    normalize_color,
    option_matches,
    purchase_reward,
    resolve_noun_tagger,
    rule_nouns,
    title_nouns,
    token_set_ratio,
    type_reward as _type_reward,
)

spacy_installed = resolve_noun_tagger("auto") == "spacy"


def _product(**changes) -> Product:
    fields = dict(asin="B0TEST0001", title="Harlow Hand Painted Pillow Cover", category="home", query="pillow cover",
                  product_category="Home & Kitchen › Bedding › Decorative Pillows", price=19.5, price_tag="$19.5",
                  options={"color": ["navy blue", "black forest"], "size": ["large", "x-large"]},
                  attributes=["gluten-free", "double sided"], bullet_points=["Linen blend: soft."],
                  description="A cover with a hidden zipper.")
    return Product(**{**fields, **changes})


def _goal(**changes) -> Goal:
    fields = dict(asin="B0TEST0001", instruction_text="i need a pillow cover", attributes=["hand painted"],
                  goal_options=[], price_upper=20.0, name="Harlow Hand Painted Pillow Cover", query="pillow cover",
                  category="home", product_category="Home & Kitchen › Bedding › Decorative Pillows")
    return Goal(**{**fields, **changes})


def test_an_attribute_matches_by_substring_of_title_features_or_description_or_by_fuzzy_ratio():
    # Title, bullet points, description: substrings of the lower-cased text.
    for wanted in ("hand painted", "linen blend", "hidden zipper"):
        assert purchase_reward(_product(), _goal(attributes=[wanted]), 19.5, {}).num_attr_matches == 1
    # Fuzzy against the product's attributes: 'gluten-free' and 'gluten free' are one token set (ratio 100).
    assert token_set_ratio("gluten-free", "gluten free") == 100
    assert purchase_reward(_product(), _goal(attributes=["gluten free"]), 19.5, {}).num_attr_matches == 1
    # Word order does not matter; 'double stitched' against 'double sided' is below the threshold.
    assert token_set_ratio("sided double", "double sided") == 100
    assert token_set_ratio("double stitched", "double sided") == 81
    info = purchase_reward(_product(), _goal(attributes=["hand painted", "double stitched", "waterproof"]), 19.5, {})
    assert (info.num_attr_matches, info.r_att) == (1, pytest.approx(1 / 3))


def test_goal_options_match_fuzzily_in_every_group_after_colour_normalisation():
    assert normalize_color("navy blue") == "blue"  # the first COLOR_SET word found: 'blue' comes before 'navy'
    assert normalize_color("black forest") == "black" and normalize_color("16x16 inch") == "16x16 inch"
    # 'navy blue' and the goal's 'blue' both normalise to 'blue'.
    assert option_matches(["blue"], {"color": "navy blue"}) == 1
    assert option_matches(["blue"], {"color": "black forest"}) == 0
    # Size is fuzzy too: 'x-large' holds every word of 'large'.
    assert token_set_ratio("x-large", "large") == 100
    assert option_matches(["large"], {"size": "x-large"}) == 1
    assert option_matches(["18 inch"], {"size": "14 inch"}) == 1  # ratio 86
    assert option_matches(["18 inch"], {"size": "6 inch"}) == 0 and token_set_ratio("18 inch", "6 inch") == 80
    # Counted over the goal's options: an unrequested choice adds nothing, two choices meet one goal option once,
    # one choice can meet two goal options.
    assert option_matches([], {"color": "teal"}) == 0
    assert option_matches(["black"], {"color": "black", "pattern": "black stripe"}) == 1
    assert option_matches(["large", "x-large"], {"size": "large"}) == 2


def test_dict_goal_options_are_name_value_pairs_as_in_the_original():
    # A pair normalises to a colour only when one of its strings is that colour.
    assert normalize_color(("color", "black")) == "black"
    assert normalize_color(("color", "navy blue")) == ("color", "navy blue")
    # Its text is the printed pair: the group's word joins the value's.
    assert fuzzy_process(("size", "18 inch")) == "size    18 inch"
    assert option_matches({"size": "18 inch"}, {"size": "14 inch"}) == 0  # 63 with 'size' among the words
    assert option_matches({"size": "large"}, {"size": "x-large"}) == 0  # 83: 'size' against 'x'
    assert option_matches({"size": "large"}, {"size": "large"}) == 1  # one word set holds the other
    assert option_matches({"color": "navy blue"}, {"color": "navy"}) == 1


def test_the_fuzzy_ratio_processes_text_as_thefuzz_0_19():
    assert fuzzy_process("Crème Brûlée!") == "crme brle" and fuzzy_process("16×16 inch") == "1616 inch"
    assert fuzzy_process("non_slip – sole") == "non_slip   sole"  # underscore kept; a dash above 255 a space
    assert token_set_ratio("crème brûlée", "creme brulee") == 86
    assert token_set_ratio("", "x") == 0 and token_set_ratio("!!", "x") == 0 and token_set_ratio("a b", "b a") == 100


def test_price_at_the_limit_counts_and_above_it_does_not():
    goal = _goal(price_upper=20.0)
    assert purchase_reward(_product(), goal, 20.0, {}).r_price is True
    assert purchase_reward(_product(), goal, 20.01, {}).r_price is False


def test_the_formula_by_hand():
    # 2 goal attributes (1 matched), 2 goal options (1 chosen and matched), price over the limit, r_type 1:
    # (1 + 1 + 0) / (2 + 2 + 1) = 0.4.
    goal = _goal(attributes=["hand painted", "waterproof"], goal_options=["blue", "large"], price_upper=10.0)
    info = purchase_reward(_product(), goal, 19.5, {"color": "navy blue"})
    assert (info.num_attr_matches, info.num_option_matches, info.r_price, info.r_type) == (1, 1, False, 1.0)
    assert info.reward == pytest.approx(0.4) and info.r_option == pytest.approx(0.5)
    # Options given as {group: value}: the pair ('color', 'blue') against the chosen 'navy blue' (read 'blue').
    goal = _goal(goal_options={"color": "blue"})
    assert purchase_reward(_product(), goal, 19.5, {"color": "navy blue"}).reward == pytest.approx(1.0)
    # Options the goal does not ask for never push the reward above 1.
    info = purchase_reward(_product(title="Harlow Hand Painted Black Pillow Cover"), _goal(), 19.5, {"c": "black"})
    assert info.reward == 1.0 and info.num_option_matches == 0 and info.r_option is None


def test_each_type_reward_branch():
    goal = _goal(name="Harlow Hand Painted Pillow Cover")  # nouns: harlow, hand, painted, pillow, cover
    assert rule_nouns(goal.name) == ["harlow", "hand", "painted", "pillow", "cover"]
    type_reward = lambda bought, goal: _type_reward(bought, goal, "rule")  # noqa: E731
    unrelated = dict(query="hdmi cable", product_category="Electronics › Accessories › Cables")
    # Same query: 1 (title shares nouns).
    assert type_reward(_product(), goal)[0] == 1.0
    # One noun of five (0.2, not above 0.2) and another query, but two shared category levels: 1.
    nearby = dict(query="throw blanket", product_category="Home & Kitchen › Bedding › Throws")
    r_type, query_match, category_match, score = type_reward(_product(title="Rowan Bath Cover", **nearby), goal)
    assert (r_type, query_match, category_match, score) == (1.0, False, True, pytest.approx(0.2))
    # The same title with nothing else shared: 0.5.
    r_type, _, category_match, score = type_reward(_product(title="Rowan Bath Cover", **unrelated), goal)
    assert (r_type, category_match, score) == (0.5, False, pytest.approx(0.2))
    # Under 10% of the nouns: 0.1 (one noun of eleven).
    long_goal = _goal(name="Harlow Hand Painted Pillow Cover Case Sham Insert Zipper Cushion Linen")
    r_type, _, _, score = type_reward(_product(title="Rowan Linen Towel", **unrelated), long_goal)
    assert (r_type, score) == (0.1, pytest.approx(1 / 11))
    # No noun shared: 0, even with the same query.
    r_type, query_match, _, score = type_reward(_product(title="Quill Braided Hdmi"), goal)
    assert (r_type, query_match, score) == (0.0, True, 0.0)
    assert purchase_reward(_product(title="Quill Braided Hdmi"), goal, 1.0, {}, "rule").reward == 0.0


def test_the_rule_keeps_content_words_and_drops_adjectives_units_and_colours():
    assert rule_nouns("Kestrel Non Slip Running Shoes, Black, Size 10") == ["kestrel", "slip", "running", "shoes",
                                                                              "size"]
    assert rule_nouns("Quill 6 ft Braided HDMI Cable") == ["quill", "braided", "hdmi", "cable"]
    assert rule_nouns("Portable Wireless Speaker") == ["speaker"]
    assert rule_nouns("") == [] and title_nouns("", "rule") == ()


@pytest.mark.skipif(not spacy_installed, reason="spaCy and its English pipeline (the webshop extra) not installed")
def test_spacy_tags_the_titles_nouns_as_the_original():
    assert title_nouns("Sable Waterproof Hiking Boots for Women", "spacy") == (
        "waterproof", "hiking", "boots", "women")
    assert title_nouns("Waterproof Rain Jacket for Women", "spacy") == ("waterproof", "rain", "jacket", "women")
    assert title_nouns("Soft and Warm", "spacy") == ()  # no nouns: title score 0.2
    assert rule_nouns("Sable Waterproof Hiking Boots for Women") == ["sable", "hiking", "boots"]
    boots = _product(title="Sable Waterproof Hiking Boots for Women", query="boots", product_category="A › B")
    jacket = _goal(name="Waterproof Rain Jacket for Women", query="jacket", product_category="A › C")
    # spaCy: 2 of 4 nouns shared (0.5): r_type 1; the rule shares none: 0.
    assert purchase_reward(boots, jacket, 1.0, {}, "spacy").r_type == 1.0
    assert purchase_reward(boots, jacket, 1.0, {}, "rule").r_type == 0.0
    info = purchase_reward(boots, _goal(name="Soft and Warm", query="x", product_category="Z"), 1.0, {}, "auto")
    assert (info.noun_tagger, info.title_score, info.r_type) == ("spacy", 0.2, 0.5)


def test_the_noun_tagger_is_reported_and_checked():
    info = purchase_reward(_product(), _goal(), 19.5, {}, "rule")
    assert info.noun_tagger == "rule"
    assert resolve_noun_tagger("auto") in ("spacy", "rule")
    with pytest.raises(ValueError, match=r"noun_tagger must be one of \('auto', 'spacy', 'rule'\)"):
        purchase_reward(_product(), _goal(), 19.5, {}, "nltk")
    if not spacy_installed:
        with pytest.raises(ValueError, match=r"pip install 'memrl\[webshop\]'"):
            resolve_noun_tagger("spacy")
