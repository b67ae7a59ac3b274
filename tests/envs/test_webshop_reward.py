import pytest

from envs.webshop_catalog import Goal, Product
from envs.webshop_reward import (
    normalize_color,
    option_matches,
    purchase_reward,
    title_nouns,
    token_set_ratio,
    type_reward,
)


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


def test_options_match_after_colour_normalisation_and_size_matches_exactly():
    assert normalize_color("navy blue") == "blue"  # the first COLOR_SET word found: 'blue' comes before 'navy'
    assert normalize_color("black forest") == "black" and normalize_color("16x16 inch") == "16x16 inch"
    product = _product()
    # 'navy blue' and the goal's 'blue' both normalise to 'blue'.
    assert option_matches(product, ["blue"], {"color": "navy blue"}) == 1
    assert option_matches(product, ["blue"], {"color": "black forest"}) == 0
    # Size is exact: 'x-large' is not 'large' although their token sets would match fuzzily.
    assert token_set_ratio("x-large", "large") == 100
    assert option_matches(product, ["large"], {"size": "x-large"}) == 0
    assert option_matches(product, ["large"], {"size": "large"}) == 1
    assert option_matches(product, ["large"], {"fit": "x-large"}) == 1  # another group: fuzzy
    # An option named in the product's text counts though the goal does not ask for it (counted per chosen option).
    assert option_matches(_product(title="Harlow Teal Pillow Cover"), ["large"], {"color": "teal"}) == 1


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
    # Options given as {group: value} count their values.
    goal = _goal(goal_options={"color": "blue"})
    assert purchase_reward(_product(), goal, 19.5, {"color": "navy blue"}).reward == pytest.approx(1.0)


def test_each_type_reward_branch():
    goal = _goal(name="Harlow Hand Painted Pillow Cover")  # nouns: harlow, hand, painted, pillow, cover
    assert title_nouns(goal.name) == ["harlow", "hand", "painted", "pillow", "cover"]
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
    assert purchase_reward(_product(title="Quill Braided Hdmi"), goal, 1.0, {}).reward == 0.0


def test_title_nouns_keep_content_words_and_drop_adjectives_units_and_colours():
    assert title_nouns("Kestrel Non Slip Running Shoes, Black, Size 10") == ["kestrel", "slip", "running", "shoes",
                                                                               "size"]
    assert title_nouns("Quill 6 ft Braided HDMI Cable") == ["quill", "braided", "hdmi", "cable"]
    assert title_nouns("Portable Wireless Speaker") == ["speaker"]
    assert title_nouns("") == []
